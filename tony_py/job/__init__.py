"""The job's vocabulary, shared by the AM, history and the client: its records (records.py) and
the read-only view of a job that reports and summaries are made from (view.py)."""
