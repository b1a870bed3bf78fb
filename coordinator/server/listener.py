"""The Kafka listener's sockets: bind early, accept with the peer's address in hand.

asyncio's `create_server` (and uvloop's) gives a protocol its peer address by asking
the socket again after the accept; a client that sent a bad frame and reset at once
is gone by then, and its connection was logged as ``peer=None``. Accepting here keeps
the address `accept()` returned, and binding is separate from serving so the daemon
can fail on a bad address before it touches the data dir.

Every accepted socket first asks for a connection slot (`admit`, the node's
`ConnectionQuotas`): one refused is closed at once; one admitted holds its slot
from here, through a TLS handshake (bounded by `handshake_timeout_s`), until
its connection closes.
"""
from __future__ import annotations

import asyncio
import errno
import functools
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from cohort.coordinator.server.peer_events import iso_time

log = logging.getLogger("cohort.coordinator.server.listener")

_ACCEPTS_PER_WAKEUP = 64
_ACCEPT_RETRY_S = 0.1  # after EMFILE/ENFILE/ENOBUFS: try again shortly, don't spin
_TLS_HANDSHAKE_TIMEOUT_S = 10.0  # a client that opens TCP and never completes TLS is dropped


class AcceptErrors:
    """Accepts refused for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): the first is one
    log line, the rest of ``log.aggregation.interval.ms`` are counted into one more line at its end."""

    retry_s = _ACCEPT_RETRY_S  # accepting pauses this long after each, so the loop does not spin

    def __init__(self, logger: logging.Logger, listener: str, interval_s: float) -> None:
        self._log = logger
        self.listener = listener
        self.interval_s = interval_s
        self.count = 0  # since the logged one
        self._first = self._last = 0.0
        self._reason = ""
        self._timer: asyncio.TimerHandle | None = None

    def note(self, exc: OSError) -> None:
        if self._timer is not None:
            if not self.count:
                self._first = time.time()
            self.count += 1
            self._last = time.time()
            self._reason = exc.strerror or str(exc)
            return
        self._log.warning("cannot accept connections for now", extra={
            "listener": self.listener, "reason": exc.strerror or str(exc)})
        self._timer = asyncio.get_running_loop().call_later(self.interval_s, self.flush)

    def flush(self) -> None:
        """The count of the interval's other refused accepts, if any (also when the listener stops)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.count:
            self._log.warning("cannot accept connections for now (repeated)", extra={
                "listener": self.listener, "reason": self._reason, "count": self.count,
                "interval_ms": round(self.interval_s * 1000), "first": iso_time(self._first), "last": iso_time(self._last)})
            self.count = 0


def peer_name(address) -> str:
    """`host:port` of a socket address (IPv6 hosts unbracketed, as the rest of the logs have them)."""
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address) if address else "unknown"


class Listener:
    """Listening sockets for one host:port (every address it resolves to), served on the running loop."""

    def __init__(self, host: str, port: int, protocol_factory: Callable[[str, Any], asyncio.Protocol],
                 backlog: int = 1024, ssl_context: ssl.SSLContext | None = None,
                 admit: Callable[[str], Any] | None = None, handshake_timeout_s: float = _TLS_HANDSHAKE_TIMEOUT_S,
                 handshake_failed: Callable[[str, BaseException], None] | None = None,
                 log_interval_s: float = 60.0, name: str | None = None) -> None:
        """`protocol_factory(peer, slot)`; `admit(peer)`: a slot (with `release()`) or None to refuse the socket;
        `handshake_failed(peer, exc)`: a TLS handshake that failed or timed out (default: one log line);
        `name`: the listener's name in log lines (default `host:port`)."""
        self.admit = admit
        self._handshake_timeout_s = handshake_timeout_s
        self._handshake_failed = handshake_failed
        self.host = host
        self.requested_port = port
        self._factory = protocol_factory
        self._backlog = backlog
        self._ssl = ssl_context  # TLS listeners: the handshake runs before the protocol sees a byte
        self.sockets: list[socket.socket] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._serving = False
        self._tasks: set[asyncio.Task] = set()
        self._accept_errors = AcceptErrors(log, name or f"{host}:{port}", log_interval_s)

    @property
    def port(self) -> int:
        return self.sockets[0].getsockname()[1]

    async def bind(self) -> None:
        """Resolve and bind (no listen yet: connections are refused until `start_serving`). Raises OSError."""
        self._loop = loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(self.host or None, self.requested_port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        port = self.requested_port
        seen = set()
        try:
            for family, kind, proto, _, address in infos:
                if (family, address[0]) in seen:
                    continue
                seen.add((family, address[0]))
                sock = socket.socket(family, kind, proto)
                self.sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                # Port 0 on several addresses: they all take the port the first one got.
                sock.bind((address[0], port, *address[2:]))
                port = sock.getsockname()[1]
                sock.setblocking(False)
        except OSError:
            self.close()
            raise
        if not self.sockets:
            raise OSError(errno.EADDRNOTAVAIL, f"{self.host} resolves to no address")

    def adopt(self, sockets: list[socket.socket]) -> None:
        """Serve sockets bound by someone else (the `--workers` supervisor binds every worker's port once)."""
        self._loop = asyncio.get_running_loop()
        for sock in sockets:
            sock.setblocking(False)
        self.sockets = list(sockets)

    def start_serving(self) -> None:
        assert self._loop is not None, "bind() first"
        for sock in self.sockets:
            sock.listen(self._backlog)
            self._loop.add_reader(sock.fileno(), self._accept, sock)
        self._serving = True

    def _accept(self, sock: socket.socket) -> None:
        loop = self._loop
        for _ in range(_ACCEPTS_PER_WAKEUP):
            try:
                conn, address = sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._accept_errors.note(exc)
                    loop.remove_reader(sock.fileno())
                    loop.call_later(self._accept_errors.retry_s, self._resume_accepting, sock)
                    return
                raise
            peer = peer_name(address)
            slot = None
            if self.admit is not None:
                slot = self.admit(peer)
                if slot is None:
                    conn.close()
                    continue
            conn.setblocking(False)
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            # (bound now: the factory is called once the setup task runs, after this loop has gone on)
            factory = functools.partial(self._factory, peer, slot)
            if self._ssl is None:
                setup = loop.connect_accepted_socket(factory, conn)
            else:
                setup = loop.connect_accepted_socket(factory, conn, ssl=self._ssl,
                                                     ssl_handshake_timeout=self._handshake_timeout_s)
            task = loop.create_task(setup)
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._accepted, peer, slot))

    def _accepted(self, peer: str, slot: Any, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        failure = task.exception() if not task.cancelled() else asyncio.CancelledError()
        if failure is None:
            return
        # a failed TLS handshake lands here (bad certificate, plaintext client on a TLS port, timeout):
        # no connection was made, so its slot is given back here
        if slot is not None:
            slot.release()
        if self._handshake_failed is not None:
            self._handshake_failed(peer, failure)
        else:
            log.info("accepted connection could not be set up: %s", failure, extra={"peer": peer})

    def _resume_accepting(self, sock: socket.socket) -> None:
        if self._serving and sock.fileno() >= 0:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def close(self) -> None:
        """Stop accepting and release the port (open connections are the server's to close)."""
        self._accept_errors.flush()
        for sock in self.sockets:
            if self._serving and self._loop is not None and sock.fileno() >= 0:
                self._loop.remove_reader(sock.fileno())
            sock.close()
        self._serving = False
        self.sockets = []
