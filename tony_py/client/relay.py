"""A TCP relay from a local port to a task's address (TonY's tonyproxy.ProxyServer).

`tony notebook` listens here and forwards every connection, bytes as they are, to the notebook
task's host:port, so HTTP and Jupyter's websockets both pass. asyncio (stdlib) does the copying:
one event loop in a daemon thread serves any number of connections without a thread each. The
listening socket is bound when the relay is made, before anything is submitted, so a busy
--port is bad input (exit 2) and leaves no application behind.
"""

from __future__ import annotations

import asyncio
import socket
import threading

from tony_py.errors import UsageError

CONNECT_TIMEOUT_S = 10.0
CHUNK = 1 << 16


class Relay:
    def __init__(self, port: int = 0, bind: str = "127.0.0.1"):
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((bind, port))
        except OSError as exc:
            self._sock.close()
            raise UsageError(f"--port {port}: cannot listen on {bind}:{port} ({exc.strerror}); "
                             "give another port, or leave --port out for a free one") from None
        self._sock.listen(128)
        self.port = self._sock.getsockname()[1]
        self.target: tuple[str, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def start(self, host: str, port: int) -> None:
        """Forward to host:port from now on (a restarted task's new address replaces the old one
        for new connections)."""
        self.target = (host, port)
        if self._thread is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._run, name="tony-notebook-relay", daemon=True)
            self._thread.start()

    def stop_forwarding(self) -> None:
        """Refuse new connections until start() names an address again: while the task is not
        running, its old port on its old node may belong to someone else, and the browser's
        requests carry the token."""
        self.target = None

    def close(self) -> None:
        """Stop listening and drop every open connection."""
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()
            self._loop = None
        self._sock.close()

    # ---- the event loop's side -------------------------------------------------------------------
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, sock=self._sock))
        self._loop.run_forever()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target = self.target
        if target is None:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(*target), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            writer.close()
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer), return_exceptions=True)
        finally:
            for w in (writer, up_writer):
                w.close()
                self._writers.discard(w)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One direction until its end; then half-close, so the other direction can still finish."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()
