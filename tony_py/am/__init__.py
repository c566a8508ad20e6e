"""The ApplicationMaster's Python side: job state, restart policy, executor API."""
