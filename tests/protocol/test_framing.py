"""Frames and headers, against kafka-python's framing and Kafka's rules.

Request header v1 (non-flexible versions) / v2 (flexible), response header v0 /
v1, the ApiVersions exceptions (response header always v0; an unsupported
version answered with a v0 body), unknown tagged fields kept and written back,
and tagged fields written only when they differ from their default.
"""
from __future__ import annotations

import struct
import uuid

import pytest

from declared_messages import kafka_python_classes, to_kafka_python
from cohort.protocol import framing
from cohort.protocol.errors import ErrorCode
from cohort.protocol.framing import (
    SUPPORTED_VERSIONS, RequestHeader, UnknownApiKey, UnsupportedVersion, api_versions_fallback, decode_request,
    decode_response, encode_request, encode_response, peek_correlation_id,
)
from cohort.protocol.messages import (
    API_SCHEMAS, ApiVersionsRequest, ApiVersionsResponse, CreateTopicsResponse, FetchRequest, HeartbeatRequest,
    HeartbeatResponse, OffsetCommitRequest,
)
from cohort.protocol.schema import uvarint_bytes

KP = kafka_python_classes()
EDGE_VERSIONS = sorted({(key, v) for key, api in API_SCHEMAS.items() if key in KP
                        for v in (api.min_version, api.flexible_from - 1, api.flexible_from, api.max_version)
                        if api.min_version <= v <= api.max_version})


def _kp(msg, key, side, version):
    schema = msg.SCHEMA
    return to_kafka_python(msg, schema.struct, KP[key][side], version, version in schema.flexible)


@pytest.mark.parametrize("key, version", EDGE_VERSIONS)
@pytest.mark.parametrize("client_id", ["cohort-test", "", None])
def test_request_frame_is_byte_identical_to_kafka_python(key, version, client_id):
    api = API_SCHEMAS[key]
    msg = api.request()
    ours = encode_request(msg, version, correlation_id=123456, client_id=client_id)
    kp_msg = _kp(msg, key, 0, version)
    kp_msg.with_header(correlation_id=123456, client_id=client_id)
    assert ours == kp_msg.encode(version=version, header=True, framed=True)

    (size,) = struct.unpack_from(">i", ours)
    assert size == len(ours) - 4
    header, body = decode_request(ours[4:])
    assert (header.api_key, header.api_version, header.correlation_id) == (key, version, 123456)
    assert header.client_id == (client_id or "")  # a null client id counts as ""
    assert header.flexible == (version >= api.flexible_from)
    assert body == msg


@pytest.mark.parametrize("key, version", EDGE_VERSIONS)
def test_response_frame_is_byte_identical_to_kafka_python(key, version):
    api = API_SCHEMAS[key]
    msg = api.response()
    header = RequestHeader(key, version, correlation_id=-77, client_id="c")
    ours = encode_response(header, msg)
    kp_msg = _kp(msg, key, 1, version)
    kp_msg.encode(version=version)  # sets the version; a response header cannot take it later
    kp_msg.with_header(correlation_id=-77)
    assert ours == kp_msg.encode(header=True, framed=True)

    assert peek_correlation_id(ours[4:]) == -77
    assert decode_response(key, version, ours[4:]) == (-77, msg)


def test_response_header_v1_has_a_tag_section_and_v0_does_not():
    header_v0 = RequestHeader(12, 3, correlation_id=5)
    header_v1 = RequestHeader(12, 4, correlation_id=5)
    body = HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
    assert encode_response(header_v0, body)[4:] == struct.pack(">iih", 5, 0, 27)
    assert encode_response(header_v1, body)[4:] == struct.pack(">iBihB", 5, 0, 0, 27, 0)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_response_header_is_always_v0(version):
    body = ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)])
    frame = encode_response(RequestHeader(18, version, correlation_id=9), body)
    # correlation id, then the body straight away: no tagged-field byte even in v3+
    assert frame[4:] == struct.pack(">i", 9) + body.encode(version)
    assert decode_response(18, version, frame[4:]) == (9, body)


def test_api_versions_request_in_an_unknown_version_gets_the_v0_fallback():
    # A client's newest ApiVersions (v7, flexible: request header v2) that we do not know.
    body = b"\x03abc\x021\x00"  # compact strings + empty tags, as a v3+ body would be
    frame = struct.pack(">hhih", 18, 7, 4242, 3) + b"cli" + b"\x00" + body
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(frame)
    header = info.value.header
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (18, 7, 4242, "cli")

    reply = api_versions_fallback(header)
    (size, correlation_id) = struct.unpack_from(">ii", reply)
    assert (size, correlation_id) == (len(reply) - 4, 4242)
    # header v0, then a v0 body: UNSUPPORTED_VERSION and key 18's range only
    assert reply[8:] == struct.pack(">hihhh", 35, 1, 18, *SUPPORTED_VERSIONS[18])
    _, decoded = decode_response(18, 7, reply[4:])
    assert decoded.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [(18, 0, 4)]
    # and kafka-python's client reads it the same way
    kp = KP[18][1].decode(reply, version=4, header=True, framed=True)
    assert kp.error_code == 35 and [(k.api_key, k.min_version, k.max_version) for k in kp.api_keys] == [(18, 0, 4)]


def test_unsupported_version_of_another_api_and_unknown_keys_are_refused_with_the_header():
    with pytest.raises(UnsupportedVersion, match="unsupported version 9 of Heartbeat") as info:
        decode_request(struct.pack(">hhih", 12, 9, 1, 0) + b"\x00")
    assert info.value.header.correlation_id == 1
    with pytest.raises(UnknownApiKey, match="unknown API key 999") as info:
        decode_request(struct.pack(">hhih", 999, 0, 2, 0))
    assert info.value.header.correlation_id == 2


def test_supported_versions_cover_every_declared_api():
    assert SUPPORTED_VERSIONS == {
        1: (0, 16), 2: (0, 9), 3: (0, 12), 8: (0, 9), 9: (0, 9), 10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5),
        14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1), 18: (0, 4), 19: (0, 7), 20: (0, 6), 29: (1, 3), 30: (1, 3),
        31: (1, 3), 36: (0, 2), 37: (0, 3), 42: (0, 2), 47: (0, 0), 50: (0, 0), 51: (0, 0),
        68: (0, 1), 69: (0, 1),
        10000: (0, 0),  # GroupReport: Cohort's own, never advertised
        10001: (0, 1), 10002: (0, 0),  # ReportEndOffsets (v1: an operator's forced correction), DescribeEndOffsets: Cohort's own, never advertised
        10003: (0, 0),  # GroupOverview: Cohort's own, never advertised
    }


# ---------------------------------------------------------------- tagged fields


def _with_tags(encoded_without_tags: bytes, tags: list[tuple[int, bytes]]) -> bytes:
    out = bytearray(encoded_without_tags)
    out += uvarint_bytes(len(tags))
    for tag, payload in tags:
        out += uvarint_bytes(tag) + uvarint_bytes(len(payload)) + payload
    return bytes(out)


def test_unknown_tags_are_skipped_on_read_and_written_back():
    known = HeartbeatRequest(group_id="g", generation_id=3, member_id="m").encode(4)
    assert known[-1] == 0
    data = _with_tags(known[:-1], [(7, b"abc"), (300, b""), (9, b"\x01" * 200)])
    decoded = HeartbeatRequest.decode(data, 4)
    assert (decoded.group_id, decoded.generation_id, decoded.member_id) == ("g", 3, "m")
    assert decoded._unknown_tags == {7: b"abc", 300: b"", 9: b"\x01" * 200}
    assert decoded.encode(4) == _with_tags(known[:-1], [(7, b"abc"), (9, b"\x01" * 200), (300, b"")])


def test_unknown_tags_mix_with_known_ones_in_tag_order():
    plain = ApiVersionsResponse().encode(3)
    data = _with_tags(plain[:-1], [(1, struct.pack(">q", 5)), (9, b"hi")])
    decoded = ApiVersionsResponse.decode(data, 3)
    assert decoded.finalized_features_epoch == 5 and decoded._unknown_tags == {9: b"hi"}
    assert decoded.encode(3) == data
    decoded.zk_migration_ready = True  # known tag 3 lands between 1 and the unknown 9
    assert decoded.encode(3) == _with_tags(plain[:-1], [(1, struct.pack(">q", 5)), (3, b"\x01"), (9, b"hi")])


def test_unknown_tags_in_nested_structs_survive_a_round_trip():
    partition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=1, committed_offset=2, committed_metadata="m")
    topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
    msg = OffsetCommitRequest(group_id="g", topics=[topic_cls(name="t", partitions=[partition])])
    encoded = msg.encode(8)
    # the partition struct ends just before the topic's and the message's empty tag sections
    assert encoded.endswith(b"\x00\x00\x00")
    data = encoded[:-3] + b"\x01\x2a\x01\xff" + b"\x00\x00"
    decoded = OffsetCommitRequest.decode(data, 8)
    assert decoded.topics[0].partitions[0]._unknown_tags == {42: b"\xff"}
    assert decoded.encode(8) == data


def test_tagged_fields_are_written_only_when_they_differ_from_their_default():
    assert ApiVersionsResponse().encode(3).endswith(b"\x00\x00\x00\x00\x00")  # no tags at all
    assert ApiVersionsResponse(finalized_features_epoch=-1, zk_migration_ready=False).encode(3) == \
        ApiVersionsResponse().encode(3)
    assert ApiVersionsResponse(zk_migration_ready=True).encode(3).endswith(b"\x01\x03\x01\x01")

    default_state = FetchRequest.ReplicaState()
    assert FetchRequest(replica_state=default_state).encode(15) == FetchRequest().encode(15)
    moved = FetchRequest(replica_state=FetchRequest.ReplicaState(replica_id=1, replica_epoch=2)).encode(15)
    assert moved.endswith(b"\x01\x01\x0d" + struct.pack(">iq", 1, 2) + b"\x00")
    assert FetchRequest(cluster_id="c").encode(12).endswith(b"\x01\x00\x02\x02c")

    result = CreateTopicsResponse.CreatableTopicResult
    plain = CreateTopicsResponse(topics=[result(name="t")]).encode(5)
    tagged = CreateTopicsResponse(topics=[result(name="t", topic_config_error_code=40)]).encode(5)
    assert len(tagged) == len(plain) + 4 and b"\x01\x00\x02\x00\x28" in tagged


def test_tagged_fields_do_not_exist_outside_flexible_versions():
    msg = ApiVersionsResponse(zk_migration_ready=True, finalized_features_epoch=9)
    assert msg.encode(2) == ApiVersionsResponse().encode(2)
    assert ApiVersionsResponse.decode(msg.encode(2), 2) == ApiVersionsResponse()


def test_uuids_are_most_significant_half_first():
    topic_id = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    msg = FetchRequest(topics=[FetchRequest.FetchTopic(topic_id=topic_id)])
    assert bytes.fromhex("00112233445566778899aabbccddeeff") in msg.encode(13)
    assert FetchRequest.decode(msg.encode(13), 13).topics[0].topic_id == topic_id


def test_api_versions_request_bodies():
    assert ApiVersionsRequest().encode(2) == b""
    assert ApiVersionsRequest(client_software_name="kafka-python", client_software_version="3.0").encode(3) == \
        b"\x0dkafka-python\x043.0\x00"
    assert framing.encode_request(ApiVersionsRequest(), 3, 1, "c")[4:14] == struct.pack(">hhih", 18, 3, 1, 1)
