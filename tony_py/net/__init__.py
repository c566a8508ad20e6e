"""What the job's processes say to each other over HTTP, below both the AM and the executor that
speak it: the executor API's requests, checked (wire.py), and the one HTTP/1.1 server under the
AM's API and an executor's control endpoint (httpd.py: the transport; httpmsg.py: its messages;
admission.py: who may hold a connection). Standard library only: the executor imports wire.py and,
for its control endpoint, httpd.py."""
