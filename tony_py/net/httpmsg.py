"""HTTP/1.1 messages for tony_py/net/httpd.py (the wire format, no I/O): a request head parsed, an
answer rendered. Only what the AM's and an executor's clients send is accepted; anything else is
an HttpError with the status to answer it with. Kept apart from httpd.py (the connections, on the
loop) because it is pure: the two together would be over the 400-line cap."""

from __future__ import annotations

from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Awaitable, Callable

MAX_HEAD = 16 * 1024
MAX_HEADERS = 100
_METHODS = frozenset({"GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH"})


@dataclass
class Request:
    method: str
    target: str  # path and query exactly as sent (request signatures cover it)
    headers: dict[str, str]  # lower-case names
    body: bytes
    peer: str
    # The handler calls this once the request proved who sent it (a valid signature): only then
    # does its connection stay open after the answer (tony_py/net/admission.py).
    vouch: Callable[[], None] = field(default=lambda: None, repr=False, compare=False)
    refused: Exception | None = field(default=None, repr=False, compare=False)  # why it was not verified

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> str:
        return self.target.split("?", 1)[1] if "?" in self.target else ""


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()
    # Instead of body: a file of file_size bytes, sent with sendfile after the head (no copy of
    # it in this process, however many clients fetch it at once).
    file: Path | None = None
    file_size: int = 0


# A handler answers at once (a Response) or later (an awaitable of one: a long-poll, a page
# built in a thread).
Handler = Callable[[Request], "Response | Awaitable[Response]"]


class HttpError(Exception):
    """A request the server refuses before any handler sees it (the connection then closes)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """(method, target, version, headers) of a request head (without its blank line)."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise HttpError(400, "undecodable request head") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[0] not in _METHODS or not parts[1].startswith("/") \
            or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(400, "malformed request line")
    if len(lines) - 1 > MAX_HEADERS:
        raise HttpError(431, f"more than {MAX_HEADERS} header fields")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or " " in name or "\t" in name:
            raise HttpError(400, "malformed header field")
        name = name.lower()
        value = value.strip()
        if name in headers:
            if name in ("content-length", "host", "transfer-encoding"):
                raise HttpError(400, f"repeated {name} header")
            headers[name] += ", " + value
        else:
            headers[name] = value
    return parts[0], parts[1], parts[2], headers


def body_length(method: str, headers: dict[str, str], max_body: int) -> int:
    if "transfer-encoding" in headers:
        raise HttpError(501, "Transfer-Encoding is not supported: send a Content-Length")
    raw = headers.get("content-length")
    if raw is None:
        if method == "POST":
            raise HttpError(411, "Content-Length is required")
        return 0
    # ASCII digits only: a header is latin-1, where str.isdigit() also accepts '²' (which int()
    # refuses); and few enough of them for int() (it refuses more than 4,300)
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        raise HttpError(400, f"bad Content-Length {raw[:40]!r}")
    length = int(raw)
    if length > max_body:
        raise HttpError(413, f"the body is larger than {max_body} bytes")
    return length


_STATUS_LINES = {code.value: f"HTTP/1.1 {code.value} {code.phrase}\r\n" for code in HTTPStatus}


def render(response: Response, keep_alive: bool) -> bytes:
    length = response.file_size if response.file is not None else len(response.body)
    head = (_STATUS_LINES.get(response.status) or f"HTTP/1.1 {response.status} Unknown\r\n") \
        + f"Content-Type: {response.content_type}\r\nContent-Length: {length}\r\nCache-Control: no-store\r\n"
    for name, value in response.headers:
        head += f"{name}: {value}\r\n"
    if not keep_alive:
        head += "Connection: close\r\n"
    return (head + "\r\n").encode("latin-1") + (response.body if response.file is None else b"")


def error_response(status: int, message: str) -> Response:
    import json

    return Response(status, json.dumps({"error": message}).encode())
