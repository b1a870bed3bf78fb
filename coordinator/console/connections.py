"""The console's sockets: accepted within bounds, every request timed, accept errors logged once per interval.

The console shares the process's file descriptors with the Kafka listeners. Left to aiohttp, sockets
that dribble header bytes stayed open as long as their sender liked and, under a descriptor limit,
took every descriptor the Kafka listeners needed. So here:

- a connection takes a slot at accept (``console.max.connections`` in all, at most a quarter of the
  process's descriptor limit, and ``console.max.connections.per.ip``); one beyond is closed at once,
  before a byte is read;
- a request's header and body must arrive within ``console.request.timeout.ms`` of its first byte (a
  connection's first request: of its accept), and a connection with no request under way is closed
  after ``console.connections.max.idle.ms``; a TLS handshake has the request's time; handling a request
  and writing its answer (to a client that may never read it) has `HANDLING_LIMIT_S`;
- an accept that fails for want of descriptors pauses accepting briefly and is one log line per
  interval (with the count of the rest), not one per attempt.

`RequestTimer` wraps aiohttp's protocol: it sees the bytes arrive and closes the transport at the
deadline; the console's middleware tells it when a request has arrived whole (`arrived`) and when
its answer is written (`answered`).
"""
from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from cohort.coordinator.server.connection_quotas import (ConnectionQuotas, ConnectionSlot, address_key,
                                                         descriptor_bound)
from cohort.coordinator.server.listener import Listener


# A request's handling and the writing of its answer (a client that never reads would hold it for ever).
HANDLING_LIMIT_S = 120.0
DESCRIPTOR_SHARE = 4  # the console holds at most 1/4 of the process's descriptors


@dataclass(frozen=True, slots=True)
class ConsoleLimits:
    """The console's bounds (its settings; the defaults are theirs), connections' and sign-ins'."""

    max_connections: int = 64
    max_connections_per_ip: int = 16
    request_timeout_s: float = 5.0
    idle_timeout_s: float = 30.0
    log_interval_s: float = 60.0
    sign_in_failures_per_ip: int = 10
    sign_in_failures_per_user: int = 20
    sign_in_failure_interval_s: float = 1.0
    trusted_proxies: frozenset[str] = frozenset()

    @classmethod
    def from_config(cls, config) -> "ConsoleLimits":
        return cls(config.console_max_connections, config.console_max_connections_per_ip,
                   config.console_request_timeout_ms / 1000, config.console_connections_max_idle_ms / 1000,
                   config.log_aggregation_interval_ms / 1000, config.console_sign_in_failures_per_ip,
                   config.console_sign_in_failures_per_user, config.console_sign_in_failure_interval_ms / 1000,
                   frozenset(address_key(h) for h in config.console_trusted_proxies.split(",") if h.strip()))


class RequestTimer(asyncio.Protocol):
    """aiohttp's protocol for one connection, with its deadlines (one timer: the request's or the idle one)."""

    __slots__ = ("_inner", "_slot", "_timers", "_request_s", "_idle_s", "_loop", "_timer", "_state", "transport")

    RECEIVING, HANDLING, IDLE = "receiving", "handling", "idle"

    def __init__(self, inner: asyncio.Protocol, slot: ConnectionSlot | None, timers: dict,
                 request_s: float, idle_s: float) -> None:
        self._inner = inner
        self._slot = slot
        self._timers = timers  # transport -> RequestTimer, for the middleware
        self._request_s = request_s
        self._idle_s = idle_s
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._state = self.RECEIVING  # the first request's clock runs from the accept
        self.transport: asyncio.BaseTransport | None = None

    def _arm(self, seconds: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

    def start_clock(self) -> None:
        """(at accept) The first request's time starts now: a TLS handshake and the header share it."""
        self._arm(self._request_s)

    # -- told by the console's middleware --------------------------------------------------------
    def arrived(self) -> None:
        """The request's header and body are in: its handling and answer have `HANDLING_LIMIT_S`."""
        self._state = self.HANDLING
        self._arm(HANDLING_LIMIT_S)

    def answered(self) -> None:
        """The answer is done: the connection may wait idle for the next request."""
        if self._state == self.HANDLING:
            self._state = self.IDLE
            self._arm(self._idle_s)

    # -- asyncio.Protocol, passed on to aiohttp ------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self._timers[transport] = self
        if self._timer is None:
            self._arm(self._request_s)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._state == self.IDLE:
            self._state = self.RECEIVING
            self._arm(self._request_s)
        self._inner.data_received(data)

    def eof_received(self):
        return self._inner.eof_received()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        if self.transport is not None:
            self._timers.pop(self.transport, None)
        if self._slot is not None:
            self._slot.release()
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


def timing_middleware(timers: dict[asyncio.BaseTransport, RequestTimer]):
    """Reads a request's body while its clock runs, then tells its `RequestTimer` it arrived and, after the
    handler, that it was answered. A body aiohttp refuses (too large) is kept for the API's JSON answer."""
    from aiohttp import web

    @web.middleware
    async def timed(request: web.Request, handler) -> web.StreamResponse:
        timer = timers.get(request.transport) if request.transport is not None else None
        try:
            if request.body_exists:
                try:
                    await request.read()
                except web.HTTPException as refused:
                    request[BODY_REFUSED] = refused
            if timer is not None:
                timer.arrived()
            return await handler(request)
        finally:
            if timer is not None:
                timer.answered()

    return timed


BODY_REFUSED = "cohort.body_refused"


class ConsoleListener:
    """The console's accept loop: the Kafka listener's `Listener` on the console's own loop (a slot per
    connection, refused accepts logged once per interval), each socket handed, timed, to aiohttp's server."""

    def __init__(self, sock: socket.socket, protocol_factory: Callable[[], asyncio.Protocol],
                 ssl_context: ssl.SSLContext | None, limits: ConsoleLimits,
                 timers: dict[asyncio.BaseTransport, RequestTimer]) -> None:
        self._sock = sock
        self._factory = protocol_factory
        self.quotas = ConnectionQuotas(descriptor_bound(limits.max_connections, DESCRIPTOR_SHARE),
                                       limits.max_connections_per_ip)
        self.request_timeout_s = limits.request_timeout_s
        self.idle_timeout_s = limits.idle_timeout_s
        self.timers = timers
        # (a TLS handshake has the first request's time; one that fails or times out is closed quietly)
        self._listener = Listener("", 0, self._timed, ssl_context=ssl_context, admit=self._admit,
                                  handshake_timeout_s=limits.request_timeout_s,
                                  handshake_failed=lambda peer, exc: None, log_interval_s=limits.log_interval_s,
                                  name="console")

    def start(self) -> None:
        self._listener.adopt([self._sock])
        self._listener.start_serving()

    def stop(self) -> None:
        self._listener.close()

    def _admit(self, peer: str) -> ConnectionSlot | None:
        slot = self.quotas.acquire(peer.rpartition(":")[0])
        return None if isinstance(slot, str) else slot  # beyond console.max.connections(.per.ip): closed at once

    def _timed(self, peer: str, slot: ConnectionSlot | None) -> RequestTimer:
        timer = RequestTimer(self._factory(), slot, self.timers, self.request_timeout_s, self.idle_timeout_s)
        timer.start_clock()  # (made before a TLS handshake: it shares the first request's time)
        return timer
