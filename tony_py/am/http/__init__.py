"""The AM's HTTP side: the server for executors, the client and the page (its route table), and
the page itself. The transport under it and the executor API's requests are in tony_py/net."""
