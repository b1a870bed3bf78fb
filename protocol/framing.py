"""Frames and headers: size prefixes, request/response headers, ApiVersions quirks.

Pure functions over bytes; the server and the client both use them.

* A frame is an int32 size followed by that many bytes. `FrameReader` checks
  the announced size against the limit *before* buffering the body, so an
  oversized frame costs nothing but its 4-byte prefix.
* Request header v1 (non-flexible API versions) is api key, api version,
  correlation id and a nullable int16-length client id; v2 (flexible) adds a
  tagged-field section. Response header v0 is the correlation id; v1 adds
  tagged fields. ApiVersions responses always use header v0 (KIP-511).
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from cohort.protocol.errors import ErrorCode, ProtocolError
from cohort.protocol.messages import API_SCHEMAS, Api, ApiVersionsResponse
from cohort.protocol.schema import EncodeError, DecodeFailure, read_uvarint

API_VERSIONS_KEY = 18

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")
_RESPONSE_HEADER = struct.Struct(">ii")  # size + correlation id

# Every (api, version) this codec implements: what a server may advertise.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    key: (api.min_version, api.max_version) for key, api in API_SCHEMAS.items()
}


class FrameTooLarge(ProtocolError):
    """The announced frame size exceeds the configured maximum."""


class UnknownApiKey(ProtocolError):
    def __init__(self, header: "RequestHeader") -> None:
        super().__init__(f"unknown API key {header.api_key} (correlation id {header.correlation_id})")
        self.header = header


class UnsupportedVersion(ProtocolError):
    def __init__(self, header: "RequestHeader") -> None:
        api = API_SCHEMAS.get(header.api_key)
        name = api.name if api else str(header.api_key)
        super().__init__(f"unsupported version {header.api_version} of {name}")
        self.header = header


class FrameReader:
    """Splits a byte stream into frame bodies, refusing oversized frames up front."""

    __slots__ = ("max_frame_bytes", "_buffer")

    def __init__(self, max_frame_bytes: int = 104857600) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """Complete frame bodies in `data` (plus what earlier calls left over).

        Frames are cut straight out of `data` when nothing is pending, so only
        an incomplete tail is ever copied into the buffer; a size over the
        limit raises before that frame's bytes are kept.
        """
        if self._buffer:
            self._buffer += data
            view = self._buffer
        else:
            view = data
        frames = []
        pos = 0
        n = len(view)
        limit = self.max_frame_bytes
        while n - pos >= 4:
            (size,) = _SIZE.unpack_from(view, pos)
            if size < 0 or size > limit:
                self._buffer = bytearray()
                raise FrameTooLarge(f"frame of {size} bytes exceeds the limit of {limit}"
                                    if size >= 0 else f"negative frame size {size}")
            end = pos + 4 + size
            if end > n:
                break
            frames.append(bytes(view[pos + 4:end]))
            pos = end
        if view is data:
            if pos < n:
                self._buffer = bytearray(data[pos:])
        elif pos:
            del self._buffer[:pos]
        return frames

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held so far."""
        return len(self._buffer)

    def discard(self) -> None:
        """Drop a partial frame (its connection is closing)."""
        self._buffer = bytearray()


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str = ""
    header_size: int = 0  # bytes the header took in the frame

    @property
    def flexible(self) -> bool:
        api = API_SCHEMAS.get(self.api_key)
        return api is not None and self.api_version >= api.flexible_from


def decode_request_header(frame: bytes) -> RequestHeader:
    """Parse the request header; the version's flexibility picks header v1 or v2."""
    try:
        api_key, api_version, correlation_id, client_len = _HEADER.unpack_from(frame, 0)
    except struct.error:
        raise ProtocolError(f"request header truncated ({len(frame)} bytes)") from None
    pos = 10
    if client_len < -1:
        raise ProtocolError(f"request header: invalid client id length {client_len}")
    if client_len >= 0:
        end = pos + client_len
        if end > len(frame):
            raise ProtocolError("request header: client id runs past the end of the frame")
        try:
            client_id = frame[pos:end].decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("request header: client id is not valid UTF-8") from None
        pos = end
    else:
        client_id = ""  # a null client id counts as ""
    if api_version >= _FLEXIBLE_FROM.get(api_key, 32767):
        pos = _skip_tagged_fields(frame, pos, "request header")
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


# API key -> its first flexible version (request header v2 from there on).
_FLEXIBLE_FROM: dict[int, int] = {key: api.flexible_from for key, api in API_SCHEMAS.items()}


def _skip_tagged_fields(data: bytes, pos: int, what: str) -> int:
    try:
        count, pos = read_uvarint(data, pos)
        for _ in range(count):
            _tag, pos = read_uvarint(data, pos)
            size, pos = read_uvarint(data, pos)
            pos += size
            if pos > len(data):
                raise ProtocolError(f"{what}: tagged field runs past the end")
    except (IndexError, DecodeFailure):
        raise ProtocolError(f"{what}: truncated tagged fields") from None
    return pos


def decode_request(frame: bytes, interpreted: bool = False) -> tuple[RequestHeader, object]:
    """Header and body of one request frame (`interpreted`: with the decoder generated as Python code, for a
    big frame decoded on a worker thread; see `MessageSchema.interpreted_codec`).

    Raises `UnknownApiKey` or `UnsupportedVersion` (both carry the header, so a
    server can answer ApiVersions' special case) or `ProtocolError`.
    """
    if type(frame) is not bytes:
        frame = bytes(frame)
    header = decode_request_header(frame)
    version = header.api_version
    decoders = _INTERPRETED_REQUEST_DECODERS if interpreted else _REQUEST_DECODERS
    entry = decoders.get((header.api_key, version))
    if entry is None:
        api = API_SCHEMAS.get(header.api_key)
        if api is None:
            raise UnknownApiKey(header)
        if not api.min_version <= version <= api.max_version:
            raise UnsupportedVersion(header)
        schema = api.request.SCHEMA
        codec = schema.interpreted_codec(version) if interpreted else schema.codec(version)
        entry = decoders[(header.api_key, version)] = (codec.decode, schema.name)
    decode, name = entry
    # the generated decoder, called directly; its failures reported as `<Request>.decode` reports them
    try:
        body, _end = decode(frame, header.header_size, len(frame))
    except DecodeFailure as exc:
        raise ProtocolError(f"{name} v{version}: {exc.reason} at byte {exc.pos}") from None
    except RecursionError:
        raise ProtocolError(f"{name} v{version}: nesting too deep") from None
    return header, body


# (api key, version) -> (generated request decoder, request name), for the versions the codec supports.
_REQUEST_DECODERS: dict[tuple[int, int], tuple[Callable, str]] = {}
_INTERPRETED_REQUEST_DECODERS: dict[tuple[int, int], tuple[Callable, str]] = {}


def encode_response(header: RequestHeader, message, version: int | None = None) -> bytes:
    """A size-prefixed response frame for the request `header` described."""
    version = header.api_version if version is None else version
    cls = type(message)
    entry = _RESPONSE_ENCODERS.get((header.api_key, version, cls))
    if entry is None:
        entry = _response_encoder(header.api_key, version, cls)
    header_bytes, encode = entry
    out = bytearray(header_bytes)
    try:
        encode(message, out)
    except (struct.error, AttributeError, TypeError, UnicodeEncodeError) as exc:
        raise EncodeError(f"{cls.SCHEMA.name} v{version}: {exc}") from None
    _RESPONSE_HEADER.pack_into(out, 0, len(out) - 4, header.correlation_id)
    return bytes(out)


# (api key, version, response class) -> (header bytes to fill in, generated body encoder):
# every response of a busy server takes the same few entries.
_RESPONSE_ENCODERS: dict[tuple[int, int, type], tuple[int, Callable[[object, bytearray], bytearray]]] = {}


def _response_encoder(api_key: int, version: int, cls: type) -> tuple[int, Callable[[object, bytearray], bytearray]]:
    api = API_SCHEMAS[api_key]
    encode = cls.SCHEMA.codec(version).encode  # raises ProtocolError for a version the message lacks
    # size + correlation id, then response header v1's empty tagged fields (never for ApiVersions)
    header_bytes = 9 if version >= api.flexible_from and api_key != API_VERSIONS_KEY else 8
    if len(_RESPONSE_ENCODERS) < 4096:
        _RESPONSE_ENCODERS[(api_key, version, cls)] = (header_bytes, encode)
    return header_bytes, encode


def api_versions_fallback(header: RequestHeader) -> bytes:
    """Kafka's answer to an ApiVersions version it does not support.

    A v0 body under header v0: UNSUPPORTED_VERSION and the supported range for
    key 18 only, so the client retries with a version both sides know.
    """
    low, high = SUPPORTED_VERSIONS[API_VERSIONS_KEY]
    body = ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=API_VERSIONS_KEY, min_version=low, max_version=high)],
    )
    out = bytearray(8)
    body.encode_into(0, out)
    _RESPONSE_HEADER.pack_into(out, 0, len(out) - 4, header.correlation_id)
    return bytes(out)


def encode_request(message, version: int, correlation_id: int, client_id: str | None = "cohort") -> bytes:
    """A size-prefixed request frame."""
    api: Api = API_SCHEMAS[message.API_KEY]
    out = bytearray(4)
    if client_id is None:
        out += _HEADER.pack(api.key, version, correlation_id, -1)
    else:
        cid = client_id.encode("utf-8")
        out += _HEADER.pack(api.key, version, correlation_id, len(cid))
        out += cid
    if version >= api.flexible_from:
        out.append(0)
    message.encode_into(version, out)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, object]:
    """(correlation id, body) of one response frame (size prefix already stripped)."""
    api = API_SCHEMAS.get(api_key)
    if api is None:
        raise ProtocolError(f"unknown API key {api_key}")
    if len(frame) < 4:
        raise ProtocolError("response header truncated")
    (correlation_id,) = _SIZE.unpack_from(frame, 0)
    pos = 4
    if version >= api.flexible_from and api_key != API_VERSIONS_KEY:
        pos = _skip_tagged_fields(frame, pos, "response header")
    if api_key == API_VERSIONS_KEY and len(frame) >= pos + 2:
        # An old server answers an ApiVersions version it does not know with a
        # v0 body carrying UNSUPPORTED_VERSION: read it as v0.
        (error,) = struct.unpack_from(">h", frame, pos)
        if error == ErrorCode.UNSUPPORTED_VERSION:
            version = 0
    return correlation_id, api.response.decode(frame, version, pos=pos)


def peek_correlation_id(frame: bytes) -> int:
    """The correlation id of a response frame, without decoding the rest."""
    if len(frame) < 4:
        raise ProtocolError("response header truncated")
    return _SIZE.unpack_from(frame, 0)[0]
