"""The /metrics and /health HTTP server: connections bounded, a request's head due within a deadline.

It shares the process's file descriptors with the Kafka listeners, so a scraper or anyone else who
opens sockets and dribbles header bytes must not hold many: it accepts through the Kafka listener's
`Listener` (one log line per interval when accepts fail for want of descriptors, never a traceback
per attempt) and `ConnectionQuotas`:

- a connection takes a slot at accept (``metrics.max.connections`` in all, at most a sixteenth of the
  process's descriptor limit, and ``metrics.max.connections.per.ip``); one beyond is closed at once;
- a request's head must arrive whole within ``metrics.request.timeout.ms`` of the accept, or the
  connection is closed; one request per connection (``Connection: close``);
- building and writing the answer (to a client that may never read it) has `ANSWER_LIMIT_S`.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from cohort.coordinator.server.connection_quotas import ConnectionQuotas, ConnectionSlot, descriptor_bound
from cohort.coordinator.server.listener import Listener

log = logging.getLogger("cohort.coordinator.metrics")

MAX_REQUEST_HEAD = 8192
ANSWER_LIMIT_S = 60.0
DESCRIPTOR_SHARE = 16  # the metrics port holds at most 1/16 of the process's descriptors
_NOT_HTTP = b"this is Cohort's metrics port (HTTP); Kafka clients use its listener\n"


@dataclass(frozen=True, slots=True)
class MetricsHttpLimits:
    """The metrics port's bounds (its settings; the defaults are theirs)."""

    max_connections: int = 16
    max_connections_per_ip: int = 8
    request_timeout_s: float = 5.0
    log_interval_s: float = 60.0

    @classmethod
    def from_config(cls, config) -> "MetricsHttpLimits":
        return cls(config.metrics_max_connections, config.metrics_max_connections_per_ip,
                   config.metrics_request_timeout_ms / 1000, config.log_aggregation_interval_ms / 1000)

    def connections_in_all(self) -> int:
        """`max_connections`, or a sixteenth of RLIMIT_NOFILE when that is less."""
        return descriptor_bound(self.max_connections, DESCRIPTOR_SHARE)


class MetricsSource(Protocol):
    """What the port serves: a node's `CoordinatorMetrics`, or the ``--workers`` supervisor (health may be awaited)."""

    async def scrape(self) -> bytes: ...

    def health(self) -> "tuple[bool, str] | Awaitable[tuple[bool, str]]": ...


class MetricsHttpServer:
    """A minimal HTTP/1.1 server (one request per connection) on the event loop."""

    def __init__(self, metrics: MetricsSource, host: str, port: int,
                 limits: MetricsHttpLimits = MetricsHttpLimits(), content_type: str = CONTENT_TYPE_LATEST) -> None:
        self.metrics = metrics
        self.limits = limits
        self.content_type = content_type
        self.quotas = ConnectionQuotas(limits.connections_in_all(), limits.max_connections_per_ip)
        self._listener = Listener(host, port, self._connection, admit=self._admit,
                                  log_interval_s=limits.log_interval_s, name="metrics")
        self._open: set[_MetricsConnection] = set()
        self._bound = False

    @property
    def port(self) -> int:
        return self._listener.port if self._bound else self._listener.requested_port

    async def start(self) -> None:
        """Bind and serve; raises OSError (e.g. address in use) for the caller to report."""
        await self.bind()
        await self.start_serving()

    async def bind(self) -> None:
        """Bind without accepting yet (connections are refused until `start_serving`)."""
        await self._listener.bind()
        self._bound = True

    async def start_serving(self) -> None:
        assert self._bound, "bind() first"
        self._listener.start_serving()

    async def stop(self) -> None:
        if self._bound:
            self._listener.close()
            self._bound = False
        for connection in list(self._open):
            connection.abort()

    def _admit(self, peer: str) -> ConnectionSlot | None:
        slot = self.quotas.acquire(peer.rpartition(":")[0])
        return None if isinstance(slot, str) else slot  # beyond the bound: closed before a byte is read

    def _connection(self, peer: str, slot: ConnectionSlot | None) -> "_MetricsConnection":
        return _MetricsConnection(self, slot)

    async def respond(self, head: bytes) -> tuple[str, str, bytes]:
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or parts[0] not in (b"GET", b"HEAD"):
            return "405 Method Not Allowed", "text/plain; charset=utf-8", b"only GET and HEAD\n"
        path = parts[1].split(b"?", 1)[0]
        if path == b"/metrics":
            return "200 OK", self.content_type, await self.metrics.scrape()
        if path in (b"/health", b"/ready"):
            health = self.metrics.health()
            healthy, body = await health if inspect.isawaitable(health) else health
            status = "200 OK" if healthy else "503 Service Unavailable"
            return status, "text/plain; charset=utf-8", body.encode()
        return "404 Not Found", "text/plain; charset=utf-8", b"try /metrics or /health\n"


class _MetricsConnection(asyncio.Protocol):
    """One connection: its head gathered on a deadline, then one answer and the close."""

    def __init__(self, server: MetricsHttpServer, slot: ConnectionSlot | None) -> None:
        self._server = server
        self._slot = slot
        self._head = bytearray()
        self._answering: asyncio.Task | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._server._open.add(self)
        self._timer = asyncio.get_running_loop().call_later(self._server.limits.request_timeout_s, self.abort)

    def data_received(self, data: bytes) -> None:
        if self._answering is not None:
            return  # one request per connection
        self._head += data
        if not self._head[:1].isalpha():
            # Not an HTTP request (a Kafka client given this port starts with a size field): say what
            # this port is at once, instead of waiting for a request head that never comes.
            self._answer(b"", ("400 Bad Request", "text/plain; charset=utf-8", _NOT_HTTP))
        elif b"\r\n\r\n" in self._head:
            self._answer(bytes(self._head[:self._head.index(b"\r\n\r\n") + 4]), None)
        elif len(self._head) > MAX_REQUEST_HEAD:
            self.abort()

    def _answer(self, head: bytes, answer: tuple[str, str, bytes] | None) -> None:
        self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(ANSWER_LIMIT_S, self.abort)
        self._answering = asyncio.get_running_loop().create_task(self._write(head, answer))

    async def _write(self, head: bytes, answer: tuple[str, str, bytes] | None) -> None:
        status, content_type, body = answer if answer is not None else await self._server.respond(head)
        if self.transport.is_closing():
            return
        self.transport.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n".encode("latin-1") + (b"" if head.startswith(b"HEAD ") else body))
        self.transport.close()  # after the answer is written; `ANSWER_LIMIT_S` aborts a client that never reads

    def eof_received(self) -> bool:
        return self._answering is not None  # keep writing the answer to a client that half-closed

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()  # also one closing with its answer unwritten

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._answering is not None and not self._answering.done():
            self._answering.cancel()
        self._server._open.discard(self)
        if self._slot is not None:
            self._slot.release()
