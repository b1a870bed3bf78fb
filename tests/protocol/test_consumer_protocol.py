"""The consumer protocol inside JoinGroup metadata and SyncGroup assignments:
version prefix, newer versions read with the newest layout we know, bad bytes
refused clearly."""
from __future__ import annotations

import struct

import pytest

from cohort.protocol.consumer_protocol import (
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, decode_assignment, decode_subscription,
    encode_assignment, encode_subscription,
)
from cohort.protocol.errors import ProtocolError

TopicPartition = ConsumerProtocolSubscription.TopicPartition


def test_subscription_round_trips_in_every_version_and_drops_what_the_version_lacks():
    sub = ConsumerProtocolSubscription(topics=["a", "b"], user_data=b"u",
                                       owned_partitions=[TopicPartition(topic="a", partitions=[0, 2])],
                                       generation_id=4, rack_id="r1")
    assert decode_subscription(encode_subscription(sub, 3)) == sub
    v0 = decode_subscription(encode_subscription(sub, 0))
    assert (v0.topics, v0.user_data, v0.owned_partitions, v0.generation_id, v0.rack_id) == (
        ["a", "b"], b"u", [], -1, None)
    assert encode_subscription(sub, 1)[:2] == b"\x00\x01"


def test_a_newer_version_is_read_with_the_newest_layout_we_know():
    # Later versions only append fields: a v9 subscription reads as v3 plus ignored bytes.
    sub = ConsumerProtocolSubscription(topics=["t"], generation_id=2, rack_id="rack")
    data = struct.pack(">h", 9) + sub.encode(3) + b"future fields"
    assert decode_subscription(data) == sub
    assignment = ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic="t", partitions=[1])])
    assert decode_assignment(encode_assignment(assignment, 3)) == assignment
    assert decode_assignment(struct.pack(">h", 5) + assignment.encode(3) + b"\x00") == assignment


@pytest.mark.parametrize("data, match", [
    (b"", "missing version prefix"),
    (b"\x00", "missing version prefix"),
    (b"\xff\xff" + b"\x00\x00\x00\x00", "negative version -1"),
    (b"\x00\x00\x00\x00\x00\x05\x00\x01", "ConsumerProtocolSubscription v0: .*runs past the end"),
    (b"\x00\x00\x7f\xff\xff\xff", "runs past the end"),
])
def test_bad_subscription_bytes_are_a_protocol_error(data, match):
    with pytest.raises(ProtocolError, match=match):
        decode_subscription(data)


def test_bad_assignment_bytes_are_a_protocol_error():
    with pytest.raises(ProtocolError, match="ConsumerProtocolAssignment v3"):
        decode_assignment(b"\x00\x03\x00\x00\x00\x01\x00")
