"""The AM's HTTP side: the server for executors, the client and the page, its connection
admission, message reading and field checks, and the page itself."""
