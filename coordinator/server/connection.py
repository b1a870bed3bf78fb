"""`Connection`: one client connection of a Cohort node, from bytes in to responses out.

Each connection is an `asyncio.Protocol` (no stream wrappers on the hot path).
Bytes go through `cohort.protocol.framing.FrameReader`, which refuses a frame
larger than ``socket.request.max.bytes`` from its 4-byte size prefix, before
buffering it. Requests may be pipelined. Like Kafka, a connection runs one
request at a time, except that requests which commute (OffsetCommit,
Heartbeat, Fetch; see `OVERLAPPING_APIS`) may run side by side, so one
connection's pipelined commits share fsyncs. Responses are written strictly in
request order, as Kafka clients require. A handler answers in one of two shapes
(`cohort.coordinator.contracts.answers`): the response, ready now, or a
`PendingAnswer` the connection subscribes to once (a commit waiting for its
append is settled by the partition runtime in the very turn the append settles;
a coroutine handler runs in its own eagerly started task, see
`cohort.coordinator.server.handlers.answering`). A `PendingAnswer` settled with
`off_loop` is encoded on a worker thread. Every answer made in a
loop turn leaves at the start of the next one, one write per connection
(`Connection._write_soon`; at once while the rebalance pacer holds a burst
back). No request has to come first: some clients send
ApiVersions only on their first connection. `Connection._dispatch` is the one
place every request passes through, from its frame to its handler.

Bad input costs only its own connection: an undecodable frame, an unknown API
key, or an unsupported version of anything but ApiVersions (which gets Kafka's
v0 fallback reply) closes that connection with one log line; everyone else is
served as before. An unexpected exception in a handler is logged with its
traceback and also closes only that connection (Kafka's clients treat a closed
connection as retriable).

A frame over ``small.request.max.bytes`` of an API whose requests are small by nature
(all but `LARGE_REQUEST_APIS`) closes its connection before it is decoded.

Per-connection limits: ``queued.max.requests.per.connection`` (reading pauses
while that many responses are outstanding) and the client's own reading
(reading pauses while the transport's write buffer is full). The node-wide
``queued.max.request.bytes`` is `RequestBytesBudget`: one budget for the partly
received requests of all connections; a connection holding a partial request
that would go beyond it stops being read until others finish, so memory stays
bounded whatever clients send. The node enforces the rest (``max.connections``
at accept, ``connections.max.idle.ms`` and ``socket.request.read.timeout.ms``
by a periodic sweep using `Connection.last_active` and `request_started`).
"""
from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import struct
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from cohort.coordinator.contracts.collector import COLLECTOR_HOLD
from cohort.coordinator.contracts.answers import PendingAnswer
from cohort.coordinator.contracts.requests import RequestContext
from cohort.coordinator.server.listener import peer_name
from cohort.coordinator.security.console_sign_ins import CONSOLE_SIGN_INS
from cohort.coordinator.security.sasl import SaslAuthenticator, SaslStep
from cohort.coordinator.security.tls import ANONYMOUS, certificate_principal
from cohort.protocol.errors import ProtocolError
from cohort.protocol.framing import (
    API_VERSIONS_KEY,
    FrameReader,
    FrameTooLarge,
    RequestHeader,
    UnknownApiKey,
    UnsupportedVersion,
    api_versions_fallback,
    decode_request,
    decode_request_header,
    encode_response,
)
from cohort.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from cohort.protocol.schema import compile_struct, uvarint_bytes

log = logging.getLogger("cohort.coordinator.server.connection")

_FETCH_KEY = FetchRequest.API_KEY
# Requests that commute with each other, so a connection may run several at
# once: commits of a pipelining client share fsyncs, and a Fetch parked for its
# max wait holds up nothing. Any other request starts only when every earlier
# request on its connection has finished, which is Kafka's guarantee (one
# request at a time per connection): a pipelined OffsetFetch sees the
# OffsetCommit sent before it, a JoinGroup follows the commit before it.
OVERLAPPING_APIS = frozenset(request.API_KEY for request in (FetchRequest, OffsetCommitRequest, HeartbeatRequest))
# The requests of a rebalance, which clients expect to wait (up to the rebalance
# timeout) anyway: a burst of them is served a slice of each loop turn at a time
# (`RebalancePacer`), so the other requests of that turn are not held up by it.
PACED_APIS = frozenset(request.API_KEY for request in (JoinGroupRequest, SyncGroupRequest))
# How long, per loop turn, paced requests may start before the rest wait for the next turn.
REBALANCE_SLICE_S = 0.002
# A request frame this large is decoded on a worker thread (a 10 000-member group leader's SyncGroup,
# 600 KB, took 25-40 ms to decode: a stall for every other client); the connection's later requests
# wait for it, in order.
DECODE_OFF_LOOP_BYTES = 256 * 1024
# The APIs whose requests are big by nature (a commit or fetch of every partition of a huge group, a
# leader's assignments): only socket.request.max.bytes bounds them. Any other request over
# small.request.max.bytes closes its connection before it is decoded, as an oversized frame does: decoding
# and refusing megabytes of ListOffsets or ReportEndOffsets would hold everyone else up.
LARGE_REQUEST_APIS = frozenset(request.API_KEY for request in (
    OffsetCommitRequest, OffsetFetchRequest, OffsetDeleteRequest, JoinGroupRequest, SyncGroupRequest, FetchRequest,
    ConsumerGroupHeartbeatRequest, ConsumerGroupDescribeRequest))
_SIZE_AND_CORRELATION = struct.Struct(">ii")
# Response class -> whether it has a top-level error code (a failed getattr costs an exception).
_HAS_ERROR_CODE: dict[type, bool] = {}


class FlexibleFetchV0:
    """librdkafka's Fetch v0 in flexible encoding, understood and answered in kind.

    librdkafka lowers its Fetch version to 0 unless the broker also advertises
    Produce v3 (its "MSGVER2" feature needs both); Cohort has no Produce. But
    it chooses the encoding from the negotiated version (16, flexible) before
    lowering it, so it sends Fetch v0 *fields* in the *flexible* encoding
    (request header v2, compact strings and arrays, tagged fields), and reads
    the answer the same way. Such a frame does not parse as Fetch v0; it is
    tried once more with the decoder derived from the same declaration for
    (v0, flexible), and the response is encoded with the matching encoder under
    response header v1. Nothing else is special-cased.

    One more librdkafka detail: before parsing the topics it checks that at
    least 25 bytes per topic remain (a size that assumes the non-flexible
    encoding). A short topic name in compact form can fall below that, so the
    answer is padded with an unknown tagged field, which every Kafka decoder
    skips.
    """

    PADDING_TAG = 0x7FFF
    _MIN_BYTES_PER_TOPIC = 25

    def __init__(self) -> None:
        cache: dict = {}
        self._request = compile_struct(FetchRequest.SCHEMA.struct, 0, True, cache)
        self._response = compile_struct(FetchResponse.SCHEMA.struct, 0, True, cache)

    def decode(self, frame: bytes) -> tuple[RequestHeader, object] | None:
        """The header and body if `frame` is such a request (exactly, to its last byte), else None."""
        try:
            header = decode_request_header(frame)
        except ProtocolError:
            return None
        pos = header.header_size
        if header.api_key != _FETCH_KEY or header.api_version != 0 or pos >= len(frame) or frame[pos] != 0:
            return None  # not Fetch v0, or no empty tagged-field section closing a v2 header
        try:
            body, end = self._request.decode(frame, pos + 1, len(frame))
        except Exception:  # the generated decoder's own failure type: not this form either
            return None
        return (header, body) if end == len(frame) else None

    def encode(self, header: RequestHeader, response) -> bytes:
        out = bytearray(8)
        out.append(0)  # response header v1: no tagged fields
        self._response.encode(response, out)
        topics = len(response.responses)
        # the bytes after the topic count (a uvarint of topics + 1) must reach 25 per topic
        shortfall = self._MIN_BYTES_PER_TOPIC * topics - (len(out) - 9 - len(uvarint_bytes(topics + 1)))
        if shortfall > 0:
            response._unknown_tags = {self.PADDING_TAG: bytes(shortfall)}
            out = bytearray(9)
            self._response.encode(response, out)
        _SIZE_AND_CORRELATION.pack_into(out, 0, len(out) - 4, header.correlation_id)
        return bytes(out)


FLEXIBLE_FETCH_V0 = FlexibleFetchV0()



class RequestBytesBudget:
    """``queued.max.request.bytes``: one budget for the partly received requests of all connections."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0  # partly received request bytes held by all connections
        self._waiting: deque[Connection] = deque()

    def hold(self, conn: "Connection", held: int) -> bool:
        """`conn` now holds `held` bytes of a partial request; False if it must stop reading for now."""
        self.held += held - conn.held_bytes
        conn.held_bytes = held
        # The sole holder always goes on: a request may be as large as socket.request.max.bytes.
        if held == 0 or self.held <= self.limit or self.held == held:
            return True
        self._waiting.append(conn)
        return False

    def release(self, conn: "Connection") -> None:
        """`conn` holds no partial request any more: wake connections waiting for the budget."""
        if conn.held_bytes:
            self.held -= conn.held_bytes
            conn.held_bytes = 0
        waiting = self._waiting
        while waiting and self.held < self.limit:
            waiter = waiting.popleft()
            if not waiter.closed:
                waiter.budget_paused = False
                waiter._update_reading()


class RebalancePacer:
    """JoinGroup and SyncGroup requests start within a slice of each loop turn; the rest wait their turn.

    A huge group's rebalance arrives as a burst (10 000 members: 30 000 Join and
    Sync requests within a second or two). Served as it arrives, it makes loop
    turns of tens of milliseconds, and a commit from anyone else, which needs
    about five loop turns to become durable and answered, waits for each of them.
    Paced, those requests start for at most `slice_s` of each turn (at least one
    per turn); later ones queue here, first come first served, and start in
    later turns. Everything else (commits, fetches, heartbeats) starts in the
    turn it arrives, so other clients see short turns. A connection whose next
    request waits here reads on, up to its own request limit.
    """

    def __init__(self, slice_s: float = REBALANCE_SLICE_S) -> None:
        self.slice_s = slice_s
        # Connections whose next request is held back; not empty while a rebalance flood is served
        # (an attribute, not a property: commits and answers look at it on every request).
        self.waiting: deque[Connection] = deque()
        self._in_turn = False  # a paced request started in this loop turn
        self._slice_end = 0.0

    def may_start(self, conn: "Connection") -> bool:
        """Whether `conn`'s next (paced) request may start now; if not, `conn` is resumed in a later turn."""
        if not self.waiting:
            if not self._in_turn:
                self._start_turn()
                return True
            if time.perf_counter() < self._slice_end:
                return True
        conn.paced_waiting = True
        self.waiting.append(conn)
        return False

    def _start_turn(self) -> None:
        self._in_turn = True
        self._slice_end = time.perf_counter() + self.slice_s
        asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        """(on the next loop turn) Start waiting requests, oldest first, for one slice."""
        self._in_turn = False
        waiting = self.waiting
        if not waiting:
            return
        self._start_turn()
        while waiting:
            conn = waiting.popleft()
            conn.paced_waiting = False
            if not conn.closed:
                conn._run_queued(paced_ok=True)
            if time.perf_counter() >= self._slice_end:
                return


class _Request:
    """A decoded request, and its place in the connection's response order (`payload` is set when answered)."""

    __slots__ = ("payload", "header", "request", "ctx", "handler", "encode", "started", "overlaps", "paced", "task", "ended")

    def __init__(self, header, request, ctx, handler, encode, started, overlaps, paced) -> None:
        self.payload: bytes | None = None
        self.task: PendingAnswer | None = None  # the answer it waits for, once the handler handed back a pending one
        self.ended = False  # the handler has answered (or failed)
        self.header = header
        self.request = request
        self.ctx = ctx
        self.handler = handler
        self.encode = encode
        self.started = started
        self.overlaps = overlaps
        self.paced = paced


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """How connections of one listener are secured: its name, Kafka security protocol, TLS context, SASL mechanisms."""

    name: str = "PLAINTEXT"
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    credentials: Any = None  # what SASL checks logins against; None = the node's credential store
    reauthenticates: bool = True  # sessions last connections.max.reauth.ms (False: the worker link's never end)


PLAINTEXT_LISTENER = ListenerSecurity()
# Kafka's sasl.server.max.receive.size: before authentication a frame may not be larger than this.
SASL_MAX_RECEIVE_BYTES = 524288
audit = logging.getLogger("cohort.audit")


_SIZE = struct.Struct(">i")
_SASL_KEYS = frozenset({17, 36})  # SaslHandshake, SaslAuthenticate


class _Slot:
    """A place in a connection's response order for an answer made without a `_Request`."""

    __slots__ = ("payload",)

    def __init__(self, payload: bytes | None = None) -> None:
        self.payload = payload


class Connection(asyncio.Protocol):
    """One client connection: frames in, responses out in request order."""

    # Slots: see GroupCoordinator (at 30 attributes an instance dict is one attribute from the slow layout).
    __slots__ = (
        "server", "security", "handlers", "metrics", "budget", "pacer", "paced_waiting", "reader",
        "max_pending", "transport", "pending", "_queued", "_running", "_running_exclusive", "_out",
        "_write_scheduled", "_reading", "closed", "closing", "reading_paused", "writing_paused",
        "budget_paused", "held_bytes", "request_started", "last_active", "peer", "sasl", "_ctx", "_decoding",
        "_loop", "slot", "accepted_at",
    )

    def __init__(self, server, peer: str = "",
                 security: ListenerSecurity = PLAINTEXT_LISTENER, slot: Any = None) -> None:
        """`server`: the node (`node.CoordinatorServer`, which imports this module); `slot`: its place in the
        node's connection counts (`ConnectionSlot`), given back when it closes."""
        self.slot = slot
        self.server = server
        self.security = security
        self.handlers = server.handlers
        self.metrics = server.metrics
        self.budget = server.request_budget
        self.pacer = server.rebalance_pacer
        self.paced_waiting = False  # the next request waits in the pacer's queue
        self.reader = FrameReader(server.config.socket_request_max_bytes)
        self.max_pending = server.config.queued_max_requests_per_connection
        self.transport: asyncio.Transport | None = None
        self.pending: deque[_Request | _Slot] = deque()
        self._queued: deque[_Request] = deque()
        self._running = 0
        self._running_exclusive = 0
        self._out: list[bytes] = []
        self._write_scheduled = False
        self._reading = False  # in data_received: what it answers is handed to `_write_soon` at its end
        self.peer = peer  # host:port as accept() returned it (the socket may be reset already)
        self.closed = False
        self.reading_paused = False
        self.writing_paused = False
        self.budget_paused = False  # waiting for queued.max.request.bytes
        # a big frame decodes off the loop, or a password is checked there: the frames that come meanwhile
        self._decoding: deque[bytes] | None = None
        self.held_bytes = 0  # bytes of a partial request counted against that budget
        self.request_started: float | None = None  # when the partial request's first byte arrived
        self.last_active = 0.0
        self._loop = asyncio.get_running_loop()
        self.accepted_at = self._loop.time()  # (made at accept: before a TLS handshake)
        self._ctx = RequestContext("", "")
        # SASL listeners: nothing but ApiVersions and the SASL exchange until it succeeds (see security/sasl.py)
        self.sasl: SaslAuthenticator | None = None
        self.closing = False  # a failed authentication: closed after connection.failed.authentication.delay.ms
        if security.protocol.startswith("SASL"):
            credentials = server.security.credentials if security.credentials is None else security.credentials
            self.sasl = SaslAuthenticator(security.mechanisms, credentials,
                                          server.config.connections_max_reauth_ms if security.reauthenticates else 0,
                                          oauthbearer=server.oauthbearer)
            self.reader.max_frame_bytes = min(self.reader.max_frame_bytes, SASL_MAX_RECEIVE_BYTES)

    # -- asyncio callbacks --------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if not self.peer:
            self.peer = peer_name(transport.get_extra_info("peername"))
        host = self.peer.rpartition(":")[0]
        # Java renders a client's address as "/<ip>"; admin tools show it as is.
        principal = ANONYMOUS
        if self.security.protocol == "SSL":  # on SASL_SSL the principal comes from SASL instead
            ssl_object = transport.get_extra_info("ssl_object")
            principal = certificate_principal(ssl_object.getpeercert() if ssl_object is not None else None)
        self._ctx = RequestContext("", f"/{host}", principal, self.security.name)
        self.last_active = self._loop.time()
        if not self.server.admit(self):
            self.closed = True
            self._release_slot()
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self.server.forget(self, "client" if exc is None else "error")
        self._release_slot()
        self.pending.clear()
        self._queued.clear()
        self.budget.release(self)

    def pause_writing(self) -> None:
        # The client is not reading its responses: stop reading its requests.
        self.writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        now = self.last_active = self._loop.time()
        try:
            frames = self.reader.feed(data)
        except FrameTooLarge as exc:
            self._reject("oversized", str(exc))
            return
        held = self.reader.buffered
        if held:
            if frames or self.request_started is None:
                self.request_started = now  # a new request began in this chunk
            if not self.budget.hold(self, held):
                self.budget_paused = True
        elif self.held_bytes or self.request_started is not None:
            self.request_started = None
            self.budget.release(self)
        self._reading = True
        try:
            for frame in frames:
                self._dispatch(frame)
                if self.closed:
                    return
        finally:
            self._reading = False
        if self._out:
            self._write_soon()  # what this chunk's requests answered at once
        self._update_reading()

    def eof_received(self) -> bool:
        return False  # close our side too; in-flight responses cannot be delivered anyway

    # -- requests -------------------------------------------------------------------
    def _dispatch(self, frame: bytes, decoded: tuple | ProtocolError | None = None, started: float = 0.0) -> None:
        """Serve one request frame (`decoded`: what a worker thread made of a big one, `_decode_off_loop`)."""
        if self.closing:
            return
        sasl = self.sasl
        if decoded is None:
            if self._decoding is not None:
                self._decoding.append(frame)  # behind a big frame being decoded: served after it, in order
                return
            if sasl is not None and sasl.expects_raw_token:
                self._sasl_step(sasl.on_raw_token(frame), None)
                return
            started = time.perf_counter()
            if len(frame) >= DECODE_OFF_LOOP_BYTES:
                if len(frame) > self.server.config.small_request_max_bytes \
                        and int.from_bytes(frame[:2], "big", signed=True) not in LARGE_REQUEST_APIS:
                    self._reject("request_too_large", f"{len(frame)} bytes, over small.request.max.bytes for "
                                 f"API key {int.from_bytes(frame[:2], 'big', signed=True)}")
                    return
                self._decode_off_loop(frame, started)
                return
        try:
            if decoded is None:
                header, request = decode_request(frame)
            elif type(decoded) is tuple:
                header, request = decoded
            else:
                raise decoded
        except UnsupportedVersion as exc:
            if exc.header.api_key == API_VERSIONS_KEY:
                # Kafka's rule: answer with the versions we do speak, keep the connection.
                self._answer(_Slot(api_versions_fallback(exc.header)))
                return
            self._reject("protocol_error", str(exc))
            return
        except UnknownApiKey as exc:
            self._reject("protocol_error", str(exc))
            return
        except ProtocolError as exc:
            decoded = FLEXIBLE_FETCH_V0.decode(frame)
            if decoded is None:
                self._reject("protocol_error", f"malformed request: {exc}")
                return
            header, request = decoded
            encode = FLEXIBLE_FETCH_V0.encode
        else:
            encode = encode_response
        key = header.api_key
        # (with connections.max.reauth.ms every request asks: the session may have expired)
        if sasl is not None and (not sasl.authenticated or key in _SASL_KEYS or sasl.session_expires_at is not None):
            step = sasl.on_request(key, header.api_version, request)
            if not step.serve:
                self._sasl_step(step, header)
                return
        handler = self.handlers.routes.get(key)
        if handler is None:
            # The codec knows this API but the server does not answer it (not advertised).
            self._reject("protocol_error", f"API key {key} is not served")
            return
        ctx = self._ctx
        if header.client_id != ctx.client_id:
            ctx = self._ctx = RequestContext(header.client_id, ctx.client_host, ctx.principal, ctx.listener)
        req = _Request(header, request, ctx, handler, encode, started, key in OVERLAPPING_APIS,
                       key in PACED_APIS)
        if self._running and key != _FETCH_KEY:
            fetch_waits = self.handlers.fetch_waits
            if fetch_waits.by_connection:  # (nearly always empty: no call)
                fetch_waits.cut_short(ctx)  # its answer would wait for a parked Fetch's
        self.pending.append(req)
        if self._queued or req.paced or self._must_wait(req):
            self._queued.append(req)
            self._run_queued()
        else:
            self._start(req)  # (what `_run_queued` would do, without the queue: most requests start at once)

    def _decode_off_loop(self, frame: bytes, started: float) -> None:
        self._decoding = deque()
        self._update_reading()  # nothing more is read until it is served
        COLLECTOR_HOLD.begin()  # (its objects must not cost the loop full collections)
        decoding = self._loop.run_in_executor(None, _decoded_or_error, frame)
        decoding.add_done_callback(functools.partial(self._decoded_off_loop, frame, started))

    def _decoded_off_loop(self, frame: bytes, started: float, decoding: asyncio.Future) -> None:
        COLLECTOR_HOLD.end()
        held, self._decoding = self._decoding, None
        if self.closed or decoding.cancelled():  # cancelled: the executor shut down with the server
            return
        self._dispatch(frame, decoding.result(), started)
        self._dispatch_held(held)

    def _dispatch_held(self, held: deque[bytes] | None) -> None:
        """Serve the frames that arrived while the connection waited for work off the loop, in order."""
        for later in held or ():
            if self.closed:
                return
            self._dispatch(later)  # (another wait may hold the rest again)
        if self.closed:
            return
        if self._out:
            self._write_soon()
        self._update_reading()

    def _check_password(self, step: SaslStep, header: RequestHeader | None) -> None:
        """Run a SASL/PLAIN password check off the loop (`PasswordChecks`); frames that come meanwhile wait."""
        self._decoding = deque()
        self._update_reading()

        def checked(matches: bool) -> None:
            held, self._decoding = self._decoding, None
            self._sasl_step(self.sasl.verified(matches), header)
            self._dispatch_held(held)

        check = step.verify
        console = bool(check.console_proof)
        if console and not CONSOLE_SIGN_INS.proves(check.console_proof, self.peer, self._local_name(), check.user):
            checked(False)  # a forged console proof: refused, no password checked
            return
        # (the console's own sign-ins: it budgets them per browser address and user, not per this machine)
        self.server.password_checks.submit(self.peer.rpartition(":")[0], check, checked,
                                           lambda: not self.closed, budgeted=not console)

    def _local_name(self) -> str:
        """``host:port`` of this end of the socket (as the console names the address it connected to)."""
        return peer_name(self.transport.get_extra_info("sockname")) if self.transport is not None else "unknown"

    def _sasl_step(self, step: SaslStep, header: RequestHeader | None) -> None:
        """Carry out what the SASL state machine decided: answer, check a password, note the principal, close."""
        if step.verify is not None:
            self._check_password(step, header)
            return
        if step.outcome is not None and self.metrics is not None:
            self.metrics.count_authentication(step.mechanism or "unknown", step.outcome)
        if step.response is not None:
            self._answer(_Slot(encode_response(header, step.response)))
        elif step.raw_reply is not None:
            self._answer(_Slot(_SIZE.pack(len(step.raw_reply)) + step.raw_reply))
        if step.outcome == "success":
            ctx = self._ctx
            self._ctx = RequestContext(ctx.client_id, ctx.client_host, self.sasl.principal, ctx.listener)
            self.reader.max_frame_bytes = self.server.config.socket_request_max_bytes
            log.debug("re-authenticated" if step.reauthentication else "authenticated",
                      extra={"peer": self.peer, "principal": self.sasl.principal,
                                             "mechanism": step.mechanism, "listener": self.security.name})
        elif step.outcome == "failure":
            self.server.peer_events.note(audit, logging.INFO, "authentication failed", self.peer,
                                         kind=step.mechanism or "", mechanism=step.mechanism, listener=self.security.name,
                                         user=_shown_user(step.user))
        if not step.close:
            return
        if step.delay_close:
            # Kafka's connection.failed.authentication.delay.ms: the answer goes out now, the close
            # comes later, so a client guessing passwords gets one guess per delay.
            self.closing = True
            self.stop_reading()
            delay = self.server.config.connection_failed_authentication_delay_ms / 1000
            self._loop.call_later(delay, self.close, "authentication")
            return
        self.server.peer_events.note(log, logging.WARNING, "closing connection: SASL refused the request", self.peer,
                                     reason=step.reason, listener=self.security.name)
        self.close("authentication")

    def _run_queued(self, paced_ok: bool = False) -> None:
        """Start queued requests, in order, as far as the ordering rule and the rebalance pacer allow."""
        queued = self._queued
        while queued and not self.closed:
            head = queued[0]
            if self._must_wait(head):
                return
            if head.paced and not paced_ok:
                if self.paced_waiting or not self.pacer.may_start(self):
                    return  # the pacer calls again in a later turn
            paced_ok = False
            self._start(queued.popleft())

    def _must_wait(self, req: "_Request") -> bool:
        """The ordering rule: a request waits while one that does not commute with it runs."""
        return self._running > 0 and (self._running_exclusive > 0 or not req.overlaps)

    def _start(self, req: "_Request") -> None:
        self._running += 1
        if not req.overlaps:
            self._running_exclusive += 1
        header = req.header
        try:
            response = req.handler(req.request, header.api_version, req.ctx)
            if type(response) is PendingAnswer:
                self._wait_for(req, response)
                return
            payload = req.encode(header, response)
        except Exception:
            self._fail(header)
            return
        self._finish(req, response, payload)

    def _wait_for(self, req: "_Request", answer: PendingAnswer) -> None:
        """Answer `req` once `answer` is settled (at once if it is): subscribed once, no task of our own."""
        if answer.done:
            self._answered(req, answer)
            return
        req.task = answer
        self.server.inflight.add(answer)
        if self.pacer.waiting:
            self.server.hurry_appends()  # a rebalance flood makes this turn long: sync without waiting it out
        answer.subscribe(self._answered, req)

    def _answered(self, req: "_Request", answer: PendingAnswer) -> None:
        """Encode what `answer` was settled with; if `req` had to wait, the queue behind it goes on."""
        header = req.header
        req.ended = True
        waited = req.task is not None
        if waited:
            self.server.inflight.discard(answer)
        error = answer.error
        if error is not None:
            if not isinstance(error, asyncio.CancelledError):  # cancelled at shutdown: never answered
                self._fail(header, error)
        elif not self.closed:
            response = answer.response
            if answer.off_loop:
                self._encode_in_thread(req, response)
            else:
                try:
                    payload = req.encode(header, response)
                except Exception:
                    self._fail(header)
                else:
                    self._finish(req, response, payload)
        if waited and self._queued:
            self._run_queued()

    def _encode_in_thread(self, req: "_Request", response) -> None:
        """Encode a huge response on a worker thread; the loop keeps serving others meanwhile."""
        encoding = self._loop.run_in_executor(None, req.encode, req.header, response)

        def encoded(done: asyncio.Future) -> None:
            if self.closed or done.cancelled():  # cancelled: the executor shut down with the server
                return
            if done.exception() is not None:
                self._fail(req.header, done.exception())
                return
            self._finish(req, response, done.result())
            self._run_queued()

        encoding.add_done_callback(encoded)

    def _finish(self, req: "_Request", response, payload: bytes) -> None:
        self._running -= 1
        if not req.overlaps:
            self._running_exclusive -= 1
        req.payload = payload
        self._flush()
        self._observe(req.header, response, req.started)

    def _answer(self, slot: _Slot) -> None:
        self.pending.append(slot)
        self._flush()
        self._update_reading()  # (one more pending answer may make reading pause)

    def _flush(self) -> None:
        """Move every answered response at the head of the queue to the output, in order."""
        pending = self.pending
        out = self._out
        while pending and pending[0].payload is not None:
            out.append(pending.popleft().payload)  # type: ignore[arg-type]
        if out and not self._reading:  # (data_received writes what its chunk answered when it is done)
            self._write_soon()
        if self.reading_paused:  # fewer pending answers may let reading go on (nothing here makes it pause)
            self._update_reading()

    def _write_soon(self) -> None:
        """Send the answers in `_out` at the start of the next loop turn, with whatever else this turn answers.

        One write (one syscall) carries every answer a connection got in a turn, and every connection
        with answers writes in the same moment: a client is woken once per turn, not once per
        connection or per answer. Waking a client costs the server's CPU too (on loopback a write to
        a sleeping reader takes about twice as long): writing as each read was processed served ~8 %
        fewer requests of a trivial API. During a rebalance flood
        every turn is long, so answers leave at once instead: a commit then waits for no turn but its own.
        """
        if self.pacer.waiting:
            self._write_out()
        elif not self._write_scheduled:
            self._write_scheduled = True
            self._loop.call_soon(self._write_out)

    def _write_out(self) -> None:
        self._write_scheduled = False  # (a scheduled call may still come: it finds nothing to write)
        out = self._out
        if self.closed or not out:
            out.clear()
            return
        self.transport.write(out[0] if len(out) == 1 else b"".join(out))  # type: ignore[union-attr]
        out.clear()
        self.last_active = self._loop.time()

    def _observe(self, header, response, started: float) -> None:
        metrics = self.metrics
        if metrics is not None:
            metrics.observe_request(header.api_key, header.api_version, time.perf_counter() - started)
            # (committed offsets are counted by the group coordinator, where they are applied)
            cls = type(response)
            has_error_code = _HAS_ERROR_CODE.get(cls)
            if has_error_code is None:
                has_error_code = _HAS_ERROR_CODE[cls] = hasattr(cls, "error_code")
            if has_error_code and response.error_code:
                metrics.count_request_error(header.api_key, response.error_code)

    def _update_reading(self) -> None:
        if self.closed or self.transport is None:
            return
        should_pause = (self.writing_paused or self.budget_paused or self.closing
                        or len(self.pending) >= self.max_pending or self._decoding is not None)
        if should_pause and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        elif not should_pause and self.reading_paused and self.server.state == "ready":
            self.reading_paused = False
            self.transport.resume_reading()

    # -- closing ----------------------------------------------------------------------
    def _reject(self, reason: str, message: str) -> None:
        """Close this connection over bad input: one log line (aggregated per address), nobody else affected."""
        self.server.peer_events.note(log, logging.WARNING, "closing connection: bad request", self.peer,
                                     reason=reason, detail=message, client_id=self._ctx.client_id)
        self.close(reason)

    def _fail(self, header, exc: BaseException | None = None) -> None:
        log.error("request failed; closing the connection", exc_info=exc or True,
                  extra={"peer": self.peer, "api_key": header.api_key, "api_version": header.api_version,
                         "client_id": header.client_id})
        self.close("error")

    def stop_reading(self) -> None:
        """The server is stopping: read no more requests, but answer those in flight."""
        if not self.closed and not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()

    def close(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.pending.clear()
        self._queued.clear()
        self.server.forget(self, reason)
        self._release_slot()
        self.reader.discard()
        self.budget.release(self)
        if self.transport is not None:
            if self._out:  # answers already made still go out; close() flushes the transport's buffer
                self.transport.write(b"".join(self._out))
            self._out.clear()
            self.transport.close()

    def _release_slot(self) -> None:
        if self.slot is not None:
            self.slot.release()

    @property
    def unauthenticated(self) -> bool:
        """On a SASL listener and never signed in (a re-authenticating connection was)."""
        return self.sasl is not None and self.sasl.principal is None


def _shown_user(user: str | None) -> str:
    """A user name a client tried, safe for a log line: bounded and printable."""
    if user is None:
        return "-"
    shown = user[:64].encode("unicode_escape").decode("ascii")
    return shown + ("…" if len(user) > 64 else "")


def _decoded_or_error(frame: bytes) -> tuple | ProtocolError:
    """(worker thread) `decode_request` with the interpreted decoder (it lets the loop's thread run every few
    ms; a compiled one would hold it for the whole frame); what it raises is returned, as a ProtocolError."""
    try:
        return decode_request(frame, interpreted=True)
    except ProtocolError as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - never leave the connection waiting for this frame
        return ProtocolError(f"cannot decode: {exc!r}")
