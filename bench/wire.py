"""The load generator's side of the wire: pre-encoded requests and pipelined connections.

The generator must never be the bottleneck, so the hot path does no encoding
and almost no decoding:

* `RequestTemplate` encodes a request once with `cohort.protocol.framing.encode_request`
  and, per send, copies the bytes and patches the correlation id (and,
  optionally, 64-bit "sequence" slots such as a committed offset) in place.
* `ResponseClassifier` remembers which response bodies it has already decoded
  and what errors they carried; a repeated body (the common case: the same
  success answer again) costs one dict lookup.
* `PipelinedConnection` is an `asyncio.Protocol` that keeps `depth` requests
  in flight, closed loop: each response sends the next request.

`KafkaSession` is the slow, convenient path for control traffic (group joins,
syncs, set-up): encode, send, await the decoded response by correlation id.
"""
from __future__ import annotations

import asyncio
import struct
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence

from cohort.protocol.errors import ProtocolError, error_name
from cohort.protocol.framing import decode_response, encode_request
from cohort.protocol.messages import API_SCHEMAS, ApiVersionsRequest

_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_CORRELATION_AT = 8  # size(4) + api key(2) + api version(2)
CLIENT_ID = "cohort-bench"

# Stands for "the response could not be decoded" among Kafka error codes.
MALFORMED_RESPONSE = -10000


def code_name(code: int) -> str:
    return "MALFORMED_RESPONSE" if code == MALFORMED_RESPONSE else error_name(code)


# A value no real request contains, used to locate patchable int64 slots.
SEQUENCE_SENTINEL = 0x5EC0_5EC0_5EC0_5EC0


class RequestTemplate:
    """A request encoded once; `render` stamps a correlation id and sequence number."""

    __slots__ = ("api_key", "version", "frame", "sequence_positions", "label")

    def __init__(self, message, version: int, *, label: str = "") -> None:
        self.api_key = message.API_KEY
        self.version = version
        self.label = label
        frame = encode_request(message, version, 0, CLIENT_ID)
        self.frame = frame
        sentinel = _INT64.pack(SEQUENCE_SENTINEL)
        positions = []
        start = frame.find(sentinel)
        while start != -1:
            positions.append(start)
            start = frame.find(sentinel, start + 8)
        self.sequence_positions = tuple(positions)

    def render(self, correlation_id: int, sequence: int = 0) -> bytearray:
        buf = bytearray(self.frame)
        _INT32.pack_into(buf, _CORRELATION_AT, correlation_id)
        for pos in self.sequence_positions:
            _INT64.pack_into(buf, pos, sequence)
        return buf

    def classify(self, classifier: "ResponseClassifier", frame: bytes) -> tuple[str, ...]:
        """Names of the errors a response frame carries (empty when all is well)."""
        return classifier.classify(self.api_key, self.version, frame)


def error_codes(message) -> list[int]:
    """Every non-zero `error_code` anywhere in a decoded response."""
    found = []

    def walk(value) -> None:
        if isinstance(value, dict):
            code = value.get("error_code")
            if code:
                found.append(code)
            for v in value.values():
                if isinstance(v, (list, dict)):
                    walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(message.to_dict())
    return found


class ResponseClassifier:
    """Maps a response frame (minus its correlation id) to the names of the errors it carries."""

    MAX_CACHED = 16384

    def __init__(self) -> None:
        self._known: dict[bytes, tuple[str, ...]] = {}

    def classify(self, api_key: int, version: int, frame: bytes) -> tuple[str, ...]:
        body = frame[4:]
        names = self._known.get(body)
        if names is None:
            try:
                _, message = decode_response(api_key, version, frame)
                names = tuple(code_name(c) for c in error_codes(message))
            except ProtocolError:
                names = (code_name(MALFORMED_RESPONSE),)
            if len(self._known) < self.MAX_CACHED:
                self._known[body] = names
        return names


class LoadRun:
    """Shared bookkeeping of one closed-loop measurement across all its connections.

    Operations completing before `measure_from` (warm-up) are not counted.
    """

    def __init__(self, *, max_ops: int, duration_s: float, warmup_s: float = 0.0) -> None:
        self.max_ops = max_ops
        self.duration_s = duration_s
        self.warmup_s = warmup_s
        self.started = 0.0
        self.measure_from = 0.0
        self.deadline = 0.0
        self.stopping = False
        self.issued = 0
        self.completed = 0
        self.latencies = None  # LatencyRecorder, set by the workload
        self.errors: Counter = Counter()
        self.classifier = ResponseClassifier()
        self.done = asyncio.get_running_loop().create_future()
        self.connections: list[PipelinedConnection] = []
        self.measured_end = 0.0

    def begin(self) -> None:
        self.started = time.perf_counter()
        self.measure_from = self.started + self.warmup_s
        self.deadline = self.measure_from + self.duration_s

    def may_issue(self, now: float) -> bool:
        if self.stopping:
            return False
        if now >= self.deadline or self.issued >= self.max_ops:
            self.stopping = True
            return False
        return True

    def connection_drained(self) -> None:
        if self.stopping and all(not c.pending for c in self.connections) and not self.done.done():
            self.measured_end = time.perf_counter()
            self.done.set_result(None)

    def fail(self, exc: BaseException) -> None:
        self.stopping = True
        if not self.done.done():
            self.done.set_exception(exc)


class PipelinedConnection(asyncio.Protocol):
    """One TCP connection keeping `depth` requests in flight from a rotation of templates."""

    def __init__(self, run: LoadRun, templates: Sequence[RequestTemplate], depth: int) -> None:
        self.run = run
        self.templates = templates
        self.depth = depth
        self.pending: deque = deque()
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._correlation = 0
        self._sequence = 0
        self.closed = asyncio.get_running_loop().create_future()

    # asyncio callbacks -------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)
        if self.pending:
            self.run.fail(ConnectionError(f"server closed a connection with {len(self.pending)} requests "
                                          f"in flight ({exc or 'EOF'})"))

    def start(self) -> None:
        now = time.perf_counter()
        out = [self._issue(now) for _ in range(self.depth) if self.run.may_issue(now)]
        if out:
            self.transport.write(b"".join(out))

    def _issue(self, now: float) -> bytearray:
        run = self.run
        templates = self.templates
        # One rotation shared by all connections: N requests use templates 0..N-1
        # exactly once each before any repeats (the restart fill relies on it).
        template = templates[run.issued % len(templates)]
        run.issued += 1
        self._correlation = cid = (self._correlation + 1) & 0x7FFFFFFF
        self._sequence += 1
        self.pending.append((time.perf_counter_ns(), cid, template))
        return template.render(cid, self._sequence)

    def data_received(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        pos = 0
        n = len(buf)
        out = []
        run = self.run
        pending = self.pending
        now_ns = time.perf_counter_ns()
        now = now_ns / 1e9
        measuring = now >= run.measure_from
        while n - pos >= 4:
            size = _INT32.unpack_from(buf, pos)[0]
            end = pos + 4 + size
            if end > n:
                break
            frame = bytes(buf[pos + 4:end])
            pos = end
            if not pending:
                run.fail(ProtocolError("response without a request in flight"))
                return
            sent_ns, cid, template = pending.popleft()
            if _INT32.unpack_from(frame, 0)[0] != cid:
                run.errors["CORRELATION_MISMATCH"] += 1
            else:
                names = template.classify(run.classifier, frame)
                if measuring and names:
                    for name in names:
                        run.errors[name] += 1
            if measuring:
                run.completed += 1
                run.latencies.add(now_ns - sent_ns)
            if run.may_issue(now):
                out.append(self._issue(now))
        if pos:
            del buf[:pos]
        if out:
            self.transport.write(b"".join(out))
        if run.stopping and not pending:
            run.connection_drained()


async def open_pipelined(host: str, port: int, factory: Callable[[], PipelinedConnection],
                         security=None) -> PipelinedConnection:
    """A pipelined connection; `security` (a `cohort.client.security.ClientSecurity`) adds TLS and SASL.

    With SASL the exchange runs first on a `KafkaSession`, whose transport is then handed over."""
    loop = asyncio.get_running_loop()
    if security is None or not security.uses_sasl:
        context = security.ssl_context if security is not None else None
        _, protocol = await loop.create_connection(factory, host, port, ssl=context)
        return protocol
    session = await KafkaSession.open(host, port, security=security)
    transport = session.detach()
    protocol = factory()
    protocol.authenticated_by = session  # its stream writer closes the transport when collected
    transport.set_protocol(protocol)
    protocol.connection_made(transport)
    return protocol


class KafkaSession:
    """A plain request/response connection for control traffic; requests may overlap."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._waiting: dict[int, tuple[asyncio.Future, int, int]] = {}
        self._correlation = 0
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())
        self.versions: dict[int, tuple[int, int]] = {}

    @classmethod
    async def open(cls, host: str, port: int, *, negotiate: bool = True, security=None) -> "KafkaSession":
        """`security`: a `cohort.client.security.ClientSecurity` (TLS, then SASL after negotiating)."""
        context = security.ssl_context if security is not None else None
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 24, ssl=context)
        session = cls(reader, writer)
        if negotiate or (security is not None and security.uses_sasl):
            await session.negotiate()
        if security is not None and security.uses_sasl:
            await security.authenticate(session, 30000)
        return session

    # what `ClientSecurity.authenticate` asks of a connection
    async def send_raw(self, message, version: int, timeout_ms: int):
        return await self.request(message, version, timeout_ms / 1000)

    def version_for(self, api_key: int) -> int:
        return self.pick_version(api_key, API_SCHEMAS[api_key].max_version)

    def detach(self) -> asyncio.Transport:
        """Stop reading responses here and give the connection's transport away (nothing may be in flight)."""
        self._reader_task.cancel()
        return self._writer.transport

    async def negotiate(self) -> None:
        """Learn the server's version ranges (ApiVersions v0 is understood by everyone)."""
        response = await self.request(ApiVersionsRequest(), 0)
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    def pick_version(self, api_key: int, preferred: int) -> int:
        """`preferred` if the server supports it, else the closest version both sides know."""
        ours = API_SCHEMAS[api_key]
        low, high = self.versions.get(api_key, (ours.min_version, ours.max_version))
        low, high = max(low, ours.min_version), min(high, ours.max_version)
        if low > high:
            raise RuntimeError(f"server and codec share no version of {ours.name} "
                               f"(server {self.versions.get(api_key)}, codec {ours.min_version}-{ours.max_version})")
        return min(max(preferred, low), high)

    async def _read_loop(self) -> None:
        try:
            while True:
                size = _INT32.unpack(await self._reader.readexactly(4))[0]
                frame = await self._reader.readexactly(size)
                cid = _INT32.unpack_from(frame, 0)[0]
                entry = self._waiting.pop(cid, None)
                if entry is None:
                    continue
                future, api_key, version = entry
                if not future.done():
                    try:
                        future.set_result(decode_response(api_key, version, frame)[1])
                    except ProtocolError as exc:
                        future.set_exception(exc)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            for future, _, _ in self._waiting.values():
                if not future.done():
                    future.set_exception(ConnectionError(f"connection lost: {exc!r}"))
            self._waiting.clear()

    def send(self, message, version: int) -> asyncio.Future:
        self._correlation = cid = (self._correlation + 1) & 0x7FFFFFFF
        future = asyncio.get_running_loop().create_future()
        if self._reader_task.done():
            future.set_exception(ConnectionError("connection is closed"))
            return future
        self._waiting[cid] = (future, message.API_KEY, version)
        self._writer.write(encode_request(message, version, cid, CLIENT_ID))
        return future

    async def request(self, message, version: int, timeout: float = 30.0):
        try:
            return await asyncio.wait_for(self.send(message, version), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no answer to {API_SCHEMAS[message.API_KEY].name} v{version} "
                               f"within {timeout:g} s") from None

    async def close(self) -> None:
        self._reader_task.cancel()
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (ConnectionError, OSError):
            pass


def install_uvloop() -> str:
    """Use uvloop when installed; returns the loop implementation's name for the report."""
    try:
        import uvloop
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return f"uvloop {uvloop.__version__}"
