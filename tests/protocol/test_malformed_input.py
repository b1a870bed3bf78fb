"""Malformed bytes get one clear error, `ProtocolError`, naming API, version and
position; never IndexError, struct.error, MemoryError or a hang.

Every API and version is fuzzed through both entry points a server and a
client use: `Cls.decode` and `framing.decode_request`.
"""
from __future__ import annotations

import re
import struct

import pytest
from hypothesis import given, strategies as st

from declared_messages import all_versions, codec_settings, message_strategy
from cohort.protocol import framing
from cohort.protocol.errors import ProtocolError
from cohort.protocol.framing import (
    FrameReader, FrameTooLarge, UnknownApiKey, UnsupportedVersion, decode_request, encode_request,
)
from cohort.protocol.messages import (
    API_SCHEMAS, ApiVersionsResponse, HeartbeatRequest, JoinGroupRequest, MetadataResponse, OffsetCommitRequest,
)

CLASSES = [pytest.param(cls, id=cls.__name__)
           for _, api in sorted(API_SCHEMAS.items()) for cls in (api.request, api.response)]

# Byte patterns that make lengths and counts absurd, negative or endless, or text invalid.
NASTY = [
    b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xff", b"\xff\xfe",  # int32 max/min, -1, -2
    b"\x7f\xff", b"\x80\x00",  # int16 max/min
    b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\xff\x01",  # huge / over-long unsigned varints
    b"\xc3\x28", b"\xed\xa0\x80",  # invalid UTF-8 (bad continuation, surrogate)
]


def _assert_clear(exc: ProtocolError, name: str, version: int) -> None:
    text = str(exc)
    assert name in text and f"v{version}" in text and "at byte" in text, text


def _decode_or_clear_error(cls, data: bytes, version: int) -> None:
    try:
        cls.decode(data, version)
    except ProtocolError as exc:
        _assert_clear(exc, cls.__name__, version)


@st.composite
def corrupted(draw, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(buf)))
        how = draw(st.sampled_from(["overwrite", "insert", "byte"]))
        if how == "byte" and pos < len(buf):
            buf[pos] = draw(st.integers(0, 255))
        else:
            pattern = draw(st.sampled_from(NASTY))
            if how == "overwrite":
                buf[pos:pos + len(pattern)] = pattern
            else:
                buf[pos:pos] = pattern
    return bytes(buf)


@pytest.mark.parametrize("cls", CLASSES)
@codec_settings(10)
@given(data=st.data())
def test_truncated_or_corrupted_message_is_a_clear_protocol_error(cls, data):
    """Per version: a valid message cut short must fail clearly; the same bytes
    with absurd lengths, counts, varints or invalid UTF-8 spliced in must either
    decode or fail clearly; for requests, the same holds for whole frames."""
    for version in all_versions(cls):
        msg = data.draw(message_strategy(cls, version), label=f"v{version}")
        encoded = msg.encode(version)
        if encoded:  # an empty body (ApiVersionsRequest v0-2) cannot be cut
            cut = data.draw(st.integers(0, len(encoded) - 1), label="cut")
            with pytest.raises(ProtocolError) as info:
                cls.decode(encoded[:cut], version)
            _assert_clear(info.value, cls.__name__, version)
        _decode_or_clear_error(cls, data.draw(corrupted(encoded), label="corrupted"), version)
        if cls.__name__.endswith("Request"):
            frame = encode_request(msg, version, correlation_id=7, client_id="fuzz")[4:]
            bad = data.draw(st.one_of(st.integers(0, len(frame) - 1).map(lambda c: frame[:c]), corrupted(frame)),
                            label="frame")
            try:
                decode_request(bad)
            except ProtocolError:
                pass  # UnknownApiKey / UnsupportedVersion are ProtocolErrors too


@pytest.mark.parametrize("cls", CLASSES)
@codec_settings(5)
@given(data=st.data())
def test_garbage_decodes_or_is_a_clear_protocol_error(cls, data):
    for version in all_versions(cls):
        _decode_or_clear_error(cls, data.draw(st.binary(max_size=48), label="garbage"), version)


# What a ProtocolError about a frame says: which part failed (the header, or the body of one API at one
# version, with the byte), or, for an API or version nobody declared, the header's numbers.
CLEAR_REQUEST_ERROR = re.compile(r"request header[: ]|\w+Request v\d+: .+ at byte \d+$|\w+Request v\d+: nesting too deep$")
CLEAR_RESPONSE_ERROR = re.compile(r"response header|\w+Response v\d+: .+ at byte \d+$|\w+Response v\d+: nesting too deep$")


@codec_settings(200)
@given(st.binary(max_size=64))
def test_garbage_request_frame_is_a_protocol_error(frame):
    """Random bytes as a request frame: the request its header names, at a version that API declares, or a
    `ProtocolError` that says which part failed (never any other exception)."""
    try:
        header, body = decode_request(frame)
    except (UnknownApiKey, UnsupportedVersion) as exc:
        api = API_SCHEMAS.get(exc.header.api_key)
        assert api is None or not api.min_version <= exc.header.api_version <= api.max_version, exc
    except ProtocolError as exc:
        assert CLEAR_REQUEST_ERROR.match(str(exc)), str(exc)
    else:
        api = API_SCHEMAS[header.api_key]
        assert type(body) is api.request and api.min_version <= header.api_version <= api.max_version


@codec_settings()
@given(st.binary(max_size=64))
def test_garbage_response_frame_is_a_protocol_error(frame):
    """Random bytes as a response frame of every API at its oldest and newest version: that API's response,
    or a `ProtocolError` that says which part failed (never any other exception)."""
    for key, api in API_SCHEMAS.items():
        for version in (api.min_version, api.max_version):
            try:
                correlation_id, body = framing.decode_response(key, version, frame)
            except ProtocolError as exc:
                assert CLEAR_RESPONSE_ERROR.match(str(exc)), (api.name, version, str(exc))
            else:
                assert type(body) is api.response and correlation_id == int.from_bytes(frame[:4], "big", signed=True)


# ---------------------------------------------------------------- the named cases


def test_negative_length_of_a_non_nullable_string_is_refused():
    body = struct.pack(">h", -1) + struct.pack(">i", 1) + struct.pack(">h", 0)
    with pytest.raises(ProtocolError, match=r"HeartbeatRequest v0: null or negative length -1 .*group_id at byte 2"):
        HeartbeatRequest.decode(body, 0)


def test_length_other_than_minus_one_of_a_nullable_string_is_refused():
    ok = HeartbeatRequest(group_id="g", member_id="m").encode(3)
    bad = ok[:-2] + struct.pack(">h", -2)  # group_instance_id: null is -1, -2 means nothing
    with pytest.raises(ProtocolError, match="invalid length -2"):
        HeartbeatRequest.decode(bad, 3)


def test_length_past_the_end_is_refused():
    body = struct.pack(">h", 30000) + b"abc"
    with pytest.raises(ProtocolError, match="runs past the end"):
        HeartbeatRequest.decode(body, 0)


def test_invalid_utf8_is_refused():
    body = struct.pack(">h", 2) + b"\xc3\x28" + struct.pack(">i", 1) + struct.pack(">h", 0)
    with pytest.raises(ProtocolError, match="invalid UTF-8"):
        HeartbeatRequest.decode(body, 0)


@pytest.mark.parametrize("count", [0x7FFFFFFF, 1 << 24])
def test_absurd_array_count_is_refused_before_allocating(count):
    prefix = JoinGroupRequest(group_id="g", session_timeout_ms=1, protocol_type="consumer").encode(5)[:-4]
    with pytest.raises(ProtocolError, match="runs past the end"):
        JoinGroupRequest.decode(prefix + struct.pack(">i", count), 5)


def test_absurd_count_of_a_fixed_width_array_is_refused():
    partition = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(replica_nodes=[1, 2])
    topic = MetadataResponse.MetadataResponseTopic(name="t", partitions=[partition])
    good = MetadataResponse(topics=[topic]).encode(1)
    two_replicas = struct.pack(">iii", 2, 1, 2)
    at = good.index(two_replicas)
    bad = good[:at] + struct.pack(">i", 0x7FFFFFFF) + good[at + 4:]
    with pytest.raises(ProtocolError, match="replica_nodes"):
        MetadataResponse.decode(bad, 1)


def test_absurd_compact_count_is_refused():
    prefix = JoinGroupRequest(group_id="g", session_timeout_ms=1, protocol_type="consumer").encode(6)[:-2]
    huge = b"\xff\xff\xff\xff\x0f"  # unsigned varint 2**32-1
    with pytest.raises(ProtocolError, match="runs past the end"):
        JoinGroupRequest.decode(prefix + huge + b"\x00", 6)


def test_overlong_varint_is_refused():
    with pytest.raises(ProtocolError, match="longer than 5 bytes"):
        HeartbeatRequest.decode(b"\xff\xff\xff\xff\xff\xff\x01", 4)


def test_tagged_field_past_the_end_is_refused():
    ok = HeartbeatRequest(group_id="g", member_id="m").encode(4)
    bad = ok[:-1] + b"\x01\x05\x7f" + b"short"
    with pytest.raises(ProtocolError, match="tagged field 5 runs past the end"):
        HeartbeatRequest.decode(bad, 4)


def test_unsupported_version_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="unsupported version 99"):
        HeartbeatRequest.decode(b"", 99)


def test_offset_commit_fuzz_anchor_still_decodes():
    """The fuzz corpus starts from valid bytes: make sure they really are valid."""
    msg = OffsetCommitRequest(group_id="g", topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
        name="t", partitions=[OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=5)])])
    for version in all_versions(OffsetCommitRequest):
        assert OffsetCommitRequest.decode(msg.encode(version), version) == msg


# ---------------------------------------------------------------- frames


def test_oversized_frame_is_refused_on_its_size_prefix_before_the_body_arrives():
    reader = FrameReader(max_frame_bytes=1024)
    with pytest.raises(FrameTooLarge, match="1025 bytes exceeds the limit of 1024"):
        reader.feed(struct.pack(">i", 1025))
    assert reader.buffered == 0


def test_negative_frame_size_is_refused():
    with pytest.raises(FrameTooLarge, match="negative frame size"):
        FrameReader().feed(struct.pack(">i", -5) + b"x")


def test_frame_at_the_limit_is_accepted():
    reader = FrameReader(max_frame_bytes=8)
    assert reader.feed(struct.pack(">i", 8) + b"12345678") == [b"12345678"]


@codec_settings(50)
@given(bodies=st.lists(st.binary(max_size=40), max_size=6), cuts=st.lists(st.integers(0, 300), max_size=8))
def test_frames_split_anywhere_come_out_whole_and_in_order(bodies, cuts):
    stream = b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    reader = FrameReader(max_frame_bytes=64)
    out = []
    for a, b in zip(points, points[1:]):
        out += reader.feed(stream[a:b])
    assert out == bodies
    assert reader.buffered == 0


def test_truncated_or_bad_request_headers_are_protocol_errors():
    with pytest.raises(ProtocolError, match="request header truncated"):
        decode_request(b"\x00\x0c\x00")
    with pytest.raises(ProtocolError, match="invalid client id length"):
        decode_request(struct.pack(">hhih", 12, 0, 1, -3))
    with pytest.raises(ProtocolError, match="client id runs past the end"):
        decode_request(struct.pack(">hhih", 12, 0, 1, 50) + b"abc")
    with pytest.raises(ProtocolError, match="client id is not valid UTF-8"):
        decode_request(struct.pack(">hhih", 12, 0, 1, 2) + b"\xc3\x28")
    with pytest.raises(ProtocolError, match="truncated tagged fields"):
        decode_request(struct.pack(">hhih", 12, 4, 1, 0) + b"\x85")


def test_api_versions_response_with_garbage_stays_a_protocol_error():
    with pytest.raises(ProtocolError):
        framing.decode_response(18, 3, struct.pack(">i", 1) + b"\x00\x00\xff")
    assert ApiVersionsResponse.decode(ApiVersionsResponse().encode(3), 3) == ApiVersionsResponse()


def test_oversized_frame_arriving_with_its_body_is_refused_without_keeping_it():
    reader = FrameReader(max_frame_bytes=1024)
    ok = struct.pack(">i", 3) + b"abc"
    with pytest.raises(FrameTooLarge):
        reader.feed(ok + struct.pack(">i", 1 << 20) + bytes(1 << 20))
    assert reader.buffered == 0


def test_incomplete_tail_is_kept_until_the_rest_arrives():
    reader = FrameReader(max_frame_bytes=1024)
    assert reader.feed(struct.pack(">i", 2) + b"ab" + struct.pack(">i", 3) + b"c") == [b"ab"]
    assert reader.buffered == 5
    assert reader.feed(b"de" + struct.pack(">i", 0)) == [b"cde", b""]
    assert reader.buffered == 0


def test_known_tagged_field_larger_than_its_declared_size_is_refused():
    plain = ApiVersionsResponse().encode(3)
    # tag 1 (FinalizedFeaturesEpoch, an int64) announced as 2 bytes long
    bad = plain[:-1] + b"\x01\x01\x02" + struct.pack(">q", 5)
    with pytest.raises(ProtocolError, match="ApiVersionsResponse v3: tagged field 1 overruns its size"):
        ApiVersionsResponse.decode(bad, 3)
