"""HTML for people: the AM's page at the tracking URL and `tony portal` share one look."""
