"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) against Kafka's JSON.

kafka-python has no KIP-848 messages, so these bytes are laid out by hand from
ConsumerGroupHeartbeatRequest/Response.json and ConsumerGroupDescribeRequest/
Response.json (Kafka 4.0: heartbeat v1 adds SubscribedTopicRegex, describe v1
adds each member's MemberType): every version is flexible, so strings and
arrays are compact (length + 1, 0 = null), a nullable struct has an int8
marker (-1 null, 1 present), and every struct ends with its tagged fields.
"""
from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, strategies as st

from declared_messages import all_versions, codec_settings, message_strategy
from cohort.protocol.errors import ProtocolError
from cohort.protocol.messages import (
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

TOPIC_ID = uuid.UUID("0123456789abcdef0123456789abcdef")
NO_TAGS = b"\x00"


def compact(text: str | None) -> bytes:
    return b"\x00" if text is None else bytes([len(text.encode()) + 1]) + text.encode()


def i32(*values: int) -> bytes:
    return b"".join(struct.pack(">i", v) for v in values)


def test_heartbeat_join_request_as_librdkafka_sends_it():
    request = ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=300000,
        subscribed_topic_names=["t"], subscribed_topic_regex="", topic_partitions=[])
    expected_v1 = (compact("g") + compact("m") + i32(0) + compact(None) + compact(None) + i32(300000)
                   + b"\x02" + compact("t") + compact("") + compact(None) + b"\x01" + NO_TAGS)
    assert request.encode(1) == expected_v1
    assert ConsumerGroupHeartbeatRequest.decode(expected_v1, 1) == request
    # v0 has no regex field at all
    request.subscribed_topic_regex = None
    expected_v0 = (compact("g") + compact("m") + i32(0) + compact(None) + compact(None) + i32(300000)
                   + b"\x02" + compact("t") + compact(None) + b"\x01" + NO_TAGS)
    assert request.encode(0) == expected_v0


def test_heartbeat_request_defaults_are_nulls_meaning_unchanged():
    request = ConsumerGroupHeartbeatRequest.decode(compact("g") + compact("m") + i32(7) + b"\x00" * 2 + i32(-1)
                                                   + b"\x00" * 4 + NO_TAGS, 1)
    assert (request.instance_id, request.rack_id, request.subscribed_topic_names, request.subscribed_topic_regex,
            request.server_assignor, request.topic_partitions, request.rebalance_timeout_ms) == (
        None, None, None, None, None, None, -1)
    assert request == ConsumerGroupHeartbeatRequest(group_id="g", member_id="m", member_epoch=7)


def test_heartbeat_response_with_and_without_an_assignment():
    Assignment = ConsumerGroupHeartbeatResponse.HeartbeatAssignment
    Topic = Assignment.HeartbeatAssignedTopicPartitions
    response = ConsumerGroupHeartbeatResponse(
        member_id="m", member_epoch=5, heartbeat_interval_ms=5000,
        assignment=Assignment(topic_partitions=[Topic(topic_id=TOPIC_ID, partitions=[0, 1])]))
    expected = (i32(0) + struct.pack(">h", 0) + compact(None) + compact("m") + i32(5, 5000)
                + b"\x01" + b"\x02" + TOPIC_ID.bytes + b"\x03" + i32(0, 1) + NO_TAGS + NO_TAGS + NO_TAGS)
    for version in (0, 1):
        assert response.encode(version) == expected
        assert ConsumerGroupHeartbeatResponse.decode(expected, version) == response
    fenced = ConsumerGroupHeartbeatResponse(error_code=110, error_message="fenced", member_epoch=-1)
    assert fenced.encode(1) == (i32(0) + struct.pack(">h", 110) + compact("fenced") + compact(None) + i32(-1, 0)
                                + b"\xff" + NO_TAGS)


def test_describe_request_and_a_member_in_both_versions():
    assert ConsumerGroupDescribeRequest(group_ids=["g"], include_authorized_operations=True).encode(1) == (
        b"\x02" + compact("g") + b"\x01" + NO_TAGS)
    Group = ConsumerGroupDescribeResponse.DescribedConsumerGroup
    Member = Group.DescribedConsumerGroupMember
    Assignment = Member.DescribedAssignment
    Topic = Assignment.DescribedTopicPartitions
    member = Member(member_id="m", member_epoch=3, client_id="c", client_host="/127.0.0.1",
                    subscribed_topic_names=["t"],
                    assignment=Assignment(topic_partitions=[Topic(topic_id=TOPIC_ID, topic_name="t", partitions=[2])]),
                    target_assignment=Assignment(), member_type=1)
    response = ConsumerGroupDescribeResponse(groups=[Group(
        group_id="g", group_state="Stable", group_epoch=3, assignment_epoch=3, assignor_name="uniform",
        members=[member])])
    member_v0 = (compact("m") + compact(None) + compact(None) + i32(3) + compact("c") + compact("/127.0.0.1")
                 + b"\x02" + compact("t") + compact(None)
                 + b"\x02" + TOPIC_ID.bytes + compact("t") + b"\x02" + i32(2) + NO_TAGS + NO_TAGS
                 + b"\x01" + NO_TAGS)
    def body(member_bytes: bytes) -> bytes:
        return (i32(0) + b"\x02" + struct.pack(">h", 0) + compact(None) + compact("g") + compact("Stable")
                + i32(3, 3) + compact("uniform") + b"\x02" + member_bytes + NO_TAGS
                + i32(-2147483648) + NO_TAGS + NO_TAGS)
    assert response.encode(0) == body(member_v0)
    assert response.encode(1) == body(member_v0 + struct.pack(">b", 1))
    assert ConsumerGroupDescribeResponse.decode(body(member_v0 + b"\x01"), 1) == response
    member.member_type = -1  # v0 carries no member type: it reads back as Kafka's default
    assert ConsumerGroupDescribeResponse.decode(body(member_v0), 0) == response


@pytest.mark.parametrize("cls", [ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
                                 ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse])
@codec_settings(60)
@given(data=st.data())
def test_every_version_round_trips(cls, data):
    for version in all_versions(cls):
        message = data.draw(message_strategy(cls, version), label=f"v{version}")
        encoded = message.encode(version)
        assert cls.decode(encoded, version) == message
        # every strict prefix is malformed, never a crash
        cut = data.draw(st.integers(0, len(encoded) - 1), label="cut")
        with pytest.raises(ProtocolError):
            cls.decode(encoded[:cut], version)
