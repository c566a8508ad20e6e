"""Job history that outlives the application: the AM's event log, job.json summaries, Parquet
files, and the readers behind `tony history`, `tony logs` and `tony portal`."""
