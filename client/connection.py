"""One TCP connection to one Kafka-protocol broker.

- Requests are pipelined: each gets a fresh correlation id and is written at
  once; a reader task matches responses to requests strictly in order (Kafka
  answers in request order on a connection), checking the correlation id.
- ApiVersions is negotiated on connect: for every API both sides know, the
  highest version both support. A broker that does not know our ApiVersions
  version answers with its own range for key 18 and we retry with that.
- A request that times out closes the connection: a later response could no
  longer be matched reliably, which is also what Kafka's Java client does.
- After a failure the connection reconnects on next use, waiting an
  exponentially growing backoff between attempts (reconnect.backoff.ms).
- A SASL session the server gave a lifetime (connections.max.reauth.ms) is
  renewed on the same connection before it ends (KIP-368): the first request
  after 85-95 % of the lifetime runs the SASL exchange again first, as Kafka's
  Java client does; the server keeps answering the requests already sent.
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import random
import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cohort.client.errors import KafkaConnectionError, RequestTimedOut, UnsupportedApi, kafka_error
from cohort.client.retry import Backoff

if TYPE_CHECKING:
    from cohort.client.security import ClientSecurity
from cohort.protocol.errors import ErrorCode, ProtocolError
from cohort.protocol.framing import SUPPORTED_VERSIONS, FrameReader, decode_response, encode_request
from cohort.protocol.messages import API_SCHEMAS, ApiVersionsRequest

log = logging.getLogger(__name__)

CLIENT_SOFTWARE_NAME = "cohort-client"
CLIENT_SOFTWARE_VERSION = "0.1.0"
API_VERSIONS_KEY = 18

# Versions the client itself refuses to use even when both sides know them:
# OffsetCommit/OffsetFetch v10 name topics by UUID, which a coordinator
# without topic metadata cannot resolve.
CLIENT_MAX_VERSIONS: dict[int, int] = {8: 9, 9: 9}

# The client id of the requests the current task sends, when it acts for someone the connection's own id
# does not name (the console sets the browser's address, which the coordinator's journal then shows).
acting_client_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("acting_client_id", default=None)


@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    api_key: int
    version: int
    future: asyncio.Future


def parse_address(address: str, default_port: int = 9092) -> tuple[str, int]:
    """'host:port', '[v6addr]:port' or 'host' → (host, port); ValueError on nonsense."""
    address = address.strip()
    if not address:
        raise ValueError("empty broker address")
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif address.count(":") == 1:
        host, port_text = address.split(":")
    else:
        host, port_text = address, ""
    if not host:
        raise ValueError(f"no host in broker address {address!r}")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"bad port in broker address {address!r}")
    return host, int(port_text)


class BrokerConnection:
    """A pipelined, self-reconnecting connection to one broker."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "cohort-client",
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        max_frame_bytes: int = 104857600,
        security: "ClientSecurity | None" = None,
    ) -> None:
        self.host = host
        self.security = security  # TLS and/or SASL (see cohort.client.security); None = PLAINTEXT
        self.port = port
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.max_frame_bytes = max_frame_bytes
        self._backoff = Backoff(reconnect_backoff_ms, reconnect_backoff_max_ms)
        self._next_attempt = 0.0  # monotonic time before which we don't reconnect
        self._lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task | None = None
        self._in_flight: deque[_InFlight] = deque()
        self._correlation_id = 0
        self._versions: dict[int, int] = {}
        self._broker_ranges: dict[int, tuple[int, int]] = {}
        self._closed_for_good = False
        self._reauthenticate_at: float | None = None  # monotonic; None = the session has no end

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, {'up' if self.connected else 'down'})"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def local_address(self) -> str | None:
        """``host:port`` of this end of the socket (as the server names its peer), None when not connected."""
        sockname = self._writer.get_extra_info("sockname") if self._writer is not None else None
        return f"{sockname[0]}:{sockname[1]}" if isinstance(sockname, tuple) and len(sockname) >= 2 else None

    @property
    def peer_address(self) -> str | None:
        """``host:port`` of the server's end of the socket, None when not connected."""
        peername = self._writer.get_extra_info("peername") if self._writer is not None else None
        return f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) and len(peername) >= 2 else None

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    # ------------------------------------------------------------ versions

    def version_for(self, api_key: int, max_version: int | None = None, min_version: int = 0) -> int:
        """Highest version of `api_key` both sides support, within [min_version, max_version]."""
        version = self._versions.get(api_key)
        name = API_SCHEMAS[api_key].name if api_key in API_SCHEMAS else str(api_key)
        if version is None:
            raise UnsupportedApi(f"broker {self.address} does not support {name}")
        if max_version is not None:
            broker_low = self._broker_ranges[api_key][0]
            version = min(version, max_version)
            if version < broker_low:
                raise UnsupportedApi(f"broker {self.address} needs {name} v{broker_low}+, client wants ≤ v{max_version}")
        if version < min_version:
            raise UnsupportedApi(f"broker {self.address} supports {name} only up to v{version}, v{min_version} needed")
        return version

    def supports(self, api_key: int, min_version: int = 0) -> bool:
        return self._versions.get(api_key, -1) >= min_version

    # ------------------------------------------------------------ lifecycle

    async def connect(self) -> None:
        """Connect (waiting out the reconnect backoff) and negotiate versions; no-op when connected."""
        async with self._lock:
            if self.connected:
                if self._reauthenticate_at is not None and time.monotonic() >= self._reauthenticate_at:
                    await self._reauthenticate()
                return
            if self._closed_for_good:
                raise KafkaConnectionError(f"connection to {self.address} was closed")
            wait = self._next_attempt - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                await self._open()
                await self._negotiate()
                self._reauthenticate_at = None
                if self.security is not None and self.security.uses_sasl:
                    self._session_started(await self.security.authenticate(self, self.connect_timeout_ms))
            except BaseException as exc:
                self._next_attempt = time.monotonic() + self._backoff.next_delay()
                self._teardown(KafkaConnectionError(f"connection to {self.address} failed: {exc}"))
                if isinstance(exc, (OSError, asyncio.TimeoutError)):
                    raise KafkaConnectionError(f"cannot connect to {self.address}: {_describe(exc)}") from None
                raise
            self._backoff.reset()

    def _session_started(self, lifetime_ms: int) -> None:
        if lifetime_ms > 0:  # Kafka's client: renew at a random point between 85 and 95 % of the lifetime
            self._reauthenticate_at = time.monotonic() + lifetime_ms / 1000 * random.uniform(0.85, 0.95)

    async def _reauthenticate(self) -> None:
        """KIP-368: the SASL exchange again on this connection; if it fails the connection is closed."""
        try:
            self._session_started(await self.security.authenticate(self, self.connect_timeout_ms))
        except BaseException as exc:
            self._next_attempt = time.monotonic() + self._backoff.next_delay()
            self._teardown(KafkaConnectionError(f"re-authentication with {self.address} failed: {exc}"))
            if isinstance(exc, (OSError, asyncio.TimeoutError)):
                raise KafkaConnectionError(f"re-authentication with {self.address} failed: {_describe(exc)}") from None
            raise

    async def _open(self) -> None:
        try:
            context = self.security.ssl_context if self.security is not None else None
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=context,
                                        server_hostname=self.host if context is not None else None),
                self.connect_timeout_ms / 1000,
            )
        except asyncio.TimeoutError:
            raise KafkaConnectionError(
                f"cannot connect to {self.address}: no answer within {self.connect_timeout_ms} ms"
            ) from None
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop(self._reader))

    async def _negotiate(self) -> None:
        ours_low, ours_high = SUPPORTED_VERSIONS[API_VERSIONS_KEY]
        version = ours_high
        for _ in range(2):
            request = ApiVersionsRequest(
                client_software_name=CLIENT_SOFTWARE_NAME, client_software_version=CLIENT_SOFTWARE_VERSION
            )
            response = await self._send(request, version, self.connect_timeout_ms)
            if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
                theirs = {k.api_key: k.max_version for k in response.api_keys}
                version = min(ours_high, theirs.get(API_VERSIONS_KEY, 0))
                if version < ours_low:
                    raise UnsupportedApi(f"broker {self.address} speaks no ApiVersions version we know")
                continue
            if response.error_code != ErrorCode.NONE:
                raise kafka_error(response.error_code, f"ApiVersions from {self.address}")
            break
        else:
            raise UnsupportedApi(f"broker {self.address} refused every ApiVersions version")
        self._broker_ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        versions = {}
        for key, (their_low, their_high) in self._broker_ranges.items():
            if key not in SUPPORTED_VERSIONS:
                continue
            our_low, our_high = SUPPORTED_VERSIONS[key]
            high = min(our_high, their_high, CLIENT_MAX_VERSIONS.get(key, our_high))
            if high >= max(our_low, their_low):
                versions[key] = high
        self._versions = versions

    async def close(self) -> None:
        """Close for good: in-flight requests fail, later requests are refused."""
        self._closed_for_good = True
        writer = self._writer
        self._teardown(KafkaConnectionError(f"connection to {self.address} closed"))
        if writer is not None:
            try:
                await asyncio.wait_for(writer.wait_closed(), 1.0)
            except (OSError, asyncio.TimeoutError):
                pass

    def _teardown(self, error: Exception) -> None:
        """Drop the socket and fail every in-flight request with `error`."""
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        while self._in_flight:
            entry = self._in_flight.popleft()
            if not entry.future.done():
                entry.future.set_exception(error)

    # ------------------------------------------------------------ requests

    async def request(self, message, version: int | None = None, timeout_ms: int | None = None):
        """Send `message` and return the decoded response.

        `version` defaults to the highest version both sides support. Raises
        `KafkaConnectionError` (retriable) when the broker is unreachable or
        the connection breaks, `RequestTimedOut` after `timeout_ms`.
        """
        await self.connect()
        if version is None:
            version = self.version_for(message.API_KEY)
        return await self._send(message, version, timeout_ms if timeout_ms is not None else self.request_timeout_ms)

    async def send_raw(self, message, version: int, timeout_ms: int):
        """Send on the current connection without connecting first (the SASL exchange of `connect`)."""
        return await self._send(message, version, timeout_ms)

    async def _send(self, message, version: int, timeout_ms: int):
        writer = self._writer
        if writer is None or writer.is_closing():
            raise KafkaConnectionError(f"not connected to {self.address}")
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        frame = encode_request(message, version, self._correlation_id, acting_client_id.get() or self.client_id)
        future = asyncio.get_running_loop().create_future()
        self._in_flight.append(_InFlight(self._correlation_id, message.API_KEY, version, future))
        try:
            writer.write(frame)
            return await asyncio.wait_for(self._drain_then(writer, future), timeout_ms / 1000)
        except asyncio.TimeoutError:
            name = API_SCHEMAS[message.API_KEY].name
            self._next_attempt = time.monotonic() + self._backoff.next_delay()
            self._teardown(KafkaConnectionError(f"connection to {self.address} closed after a request timed out"))
            raise RequestTimedOut(f"{name} to {self.address}: no response within {timeout_ms} ms") from None
        except OSError as exc:
            self._teardown(KafkaConnectionError(f"connection to {self.address} broke: {_describe(exc)}"))
            raise KafkaConnectionError(f"connection to {self.address} broke: {_describe(exc)}") from None

    @staticmethod
    async def _drain_then(writer: asyncio.StreamWriter, future: asyncio.Future):
        """Wait until the request left our buffer, then for its response (one timeout covers both)."""
        await writer.drain()
        return await future

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        frames = FrameReader(self.max_frame_bytes)
        error: Exception = KafkaConnectionError(f"{self.address} closed the connection")
        answered = False  # a Kafka frame came back on this connection
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if not answered:
                    foreign = _not_kafka(data, self.max_frame_bytes)
                    if foreign is not None:
                        error = KafkaConnectionError(f"{self.address} is not a Kafka server: {foreign}")
                        break
                for frame in frames.feed(data):
                    answered = True
                    if not self._in_flight:
                        raise ProtocolError("response without a request")
                    entry = self._in_flight.popleft()
                    if len(frame) < 4 or int.from_bytes(frame[:4], "big", signed=True) != entry.correlation_id:
                        raise ProtocolError(f"response out of order (expected correlation id {entry.correlation_id})")
                    if entry.future.done():
                        continue  # its caller gave up (cancelled)
                    try:
                        _, body = decode_response(entry.api_key, entry.version, frame)
                    except ProtocolError as exc:
                        entry.future.set_exception(
                            KafkaConnectionError(f"undecodable response from {self.address}: {exc}")
                        )
                    else:
                        entry.future.set_result(body)
        except asyncio.CancelledError:
            raise
        except ProtocolError as exc:
            log.warning("closing connection to %s: %s", self.address, exc)
            error = KafkaConnectionError(f"bad response stream from {self.address}: {exc}")
        except OSError as exc:
            error = KafkaConnectionError(f"connection to {self.address} broke: {_describe(exc)}")
        except Exception as exc:  # noqa: BLE001 - never leave requests waiting on a dead reader
            log.error("connection to %s: reader failed: %r", self.address, exc)
            error = KafkaConnectionError(f"connection to {self.address} failed: {exc!r}")
        if self._reader is reader:  # not already replaced by a reconnect
            self._next_attempt = time.monotonic() + self._backoff.next_delay()
            self._teardown(error)


def _not_kafka(first: bytes, max_frame_bytes: int) -> str | None:
    """Why the first bytes a server sent cannot start a Kafka response (None: they can): an HTTP server
    (a metrics or console port given as --bootstrap-server) answers a Kafka request with text."""
    if first.startswith(b"HTTP/") or first[:1] == b"<":
        line = first.split(b"\n", 1)[0].strip()[:60].decode("ascii", "replace")
        return f"it answered like a web server ({line!r}); give the Kafka listener's address (e.g. port 9092)"
    if len(first) >= 4:
        size = int.from_bytes(first[:4], "big", signed=True)
        if size < 4 or size > max_frame_bytes:
            return f"its answer does not start with a Kafka frame (size field {size}); give the Kafka listener's address"
    return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    if isinstance(exc, socket.gaierror) and exc.strerror:
        return exc.strerror.lower()
    if isinstance(exc, OSError):
        if exc.errno and exc.errno > 0:
            return os.strerror(exc.errno).lower()
        if exc.strerror:
            return exc.strerror
    return str(exc) or type(exc).__name__
