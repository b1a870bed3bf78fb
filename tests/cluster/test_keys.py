"""The etcd key layout: every record key of the offsets log maps to one readable etcd key and back."""
from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from cohort.coordinator.cluster import keys
from cohort.coordinator.records.types import (
    GroupMetadataTombstone,
    OffsetCommitTombstone,
    TopicTombstone,
    encode_record,
)

names = st.text(min_size=0, max_size=40)
partitions = st.integers(min_value=0, max_value=49)


@given(partitions, names, names, st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_offset_commit_keys_round_trip_under_o_slash_partition(p, group, topic, index):
    record_key = encode_record(OffsetCommitTombstone(group, topic, index))[0]
    etcd_key = keys.etcd_key(p, record_key)
    assert etcd_key.startswith(b"o/%d/" % p)
    assert etcd_key.count(b"/") == 4  # "/" inside names is escaped
    assert keys.record_key(etcd_key) == record_key


@given(partitions, names)
def test_group_and_topic_keys_round_trip(p, name):
    group_key = encode_record(GroupMetadataTombstone(name))[0]
    topic_key = encode_record(TopicTombstone(name))[0]
    assert keys.etcd_key(p, group_key).startswith(b"g/%d/" % p)
    assert keys.etcd_key(p, topic_key).startswith(b"t/%d/" % p)
    assert keys.record_key(keys.etcd_key(p, group_key)) == group_key
    assert keys.record_key(keys.etcd_key(p, topic_key)) == topic_key


@given(partitions, st.integers(min_value=3, max_value=99), st.binary(max_size=30))
def test_unknown_record_types_are_kept_verbatim(p, rtype, tail):
    record_key = struct.pack(">h", rtype) + tail
    assert keys.etcd_key(p, record_key).startswith(b"r/%d/" % p)
    assert keys.record_key(keys.etcd_key(p, record_key)) == record_key


def test_readable_layout():
    record_key = encode_record(OffsetCommitTombstone("billing/eu", "orders", 3))[0]
    assert keys.etcd_key(7, record_key) == b"o/7/billing%2Feu/orders/3"
    assert keys.owner_key(7) == b"owner/7" and keys.node_key(2) == b"nodes/2"
