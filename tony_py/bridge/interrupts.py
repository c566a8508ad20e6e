"""Ctrl-C and kill signals that never land inside a JVM bridge call.

A SIGINT that arrives while Py4J is reading the JVM's answer interrupts the socket read: Py4J
0.10.9.x then tries to tidy a connection it does not own (`AttributeError: shutdown_socket`)
and the client dies with a traceback instead of killing its application. So the client turns
SIGINT, SIGTERM and SIGHUP into a request:

- outside a bridge call, the request is a KeyboardInterrupt at once (a sleep, an HTTP poll);
- inside one, it is remembered and raised as soon as the call returns (`shielded()`);
- once the client is cleaning up (killing the application, deleting staged files), further
  signals are remembered and never raised: the cleanup must finish, and every step of it is
  bounded by a timeout;
- only the first signal is ever raised. The client is going down from then on, and a second
  KeyboardInterrupt, raised while the first is handled but before its cleanup started, would
  skip killing the application. Signals do come in bursts: the jar's driver dying delivers
  the client's parent-death SIGTERM once for each of the driver JVM's threads as they exit
  (the kernel sends it whenever the parent *thread* goes).

Only the CLI installs the handlers (`install()`); a library user keeps their own, and
`shielded()` is then a no-op.

A child forked to exec something runs Python between fork and exec when it is given a
preexec_fn (the executor's and Ray's children), and inherits the handlers: a Ctrl-C landing
there must not raise inside the child's at-fork hooks (it printed "Exception ignored in:
<function _after_fork>"). In any process but the one that installed them the handler does
nothing: the child goes on to exec, and the client, which got the same Ctrl-C, cleans up.
(The client's own JVM starts with no Python in its child at all: gateway.start_gateway_server.)
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class InterruptGuard:
    def __init__(self) -> None:
        self.installed = False
        self.pending: int | None = None  # the first signal not raised yet
        self.received: list[int] = []
        self.cleaning_up = False
        self.raised = False  # one KeyboardInterrupt per process: the client is ending
        self._depth = 0  # nesting of shielded() in the main thread
        self._pid = 0  # the process that installed the handlers

    def install(self) -> None:
        self._pid = os.getpid()
        for sig in SIGNALS:
            signal.signal(sig, self._handle)
        self.installed = True

    def _handle(self, signum, _frame) -> None:
        if os.getpid() != self._pid:  # a forked child before its exec: the client handles it
            return
        self.received.append(signum)
        if self.pending is None:
            self.pending = signum
        if self._depth == 0 and not self.cleaning_up:
            self._raise()

    def _raise(self) -> None:
        signum, self.pending = self.pending, None
        if signum is not None and not self.raised:
            self.raised = True
            raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    def caused(self, exc: BaseException) -> bool:
        """Whether exc is the interrupt, or came of it: Python 3.11 turns a KeyboardInterrupt raised
        while a class is being made (a dataclass's fields, during an import) into a RuntimeError."""
        return isinstance(exc, KeyboardInterrupt) or self.raised

    @contextmanager
    def shielded(self):
        """Run a bridge call to completion; a signal received meanwhile is raised after it."""
        if not self.installed or threading.current_thread() is not threading.main_thread():
            yield
            return
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if self._depth == 0 and not self.cleaning_up:
            self._raise()

    @contextmanager
    def cleanup(self):
        """Nothing interrupts what runs inside (killing the application, removing files)."""
        previous = self.cleaning_up
        self.cleaning_up = True
        try:
            yield
        finally:
            self.cleaning_up = previous


guard = InterruptGuard()
