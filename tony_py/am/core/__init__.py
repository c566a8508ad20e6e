"""The job core of the AM: the job's state, its tasks, the executor protocol, restarts,
fail-over and fencing, the status it reports. Pure logic: no sockets, no files, no JVM (the
process shell around it, tony_py/am/, supplies those through ports)."""
