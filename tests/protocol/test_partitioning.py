"""The coordinator partition of a group: Kafka's Utils.abs(groupId.hashCode()) % partitions."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from declared_messages import codec_settings
from cohort.protocol.partitioning import java_string_hash, partition_for


@pytest.mark.parametrize("group_id, hash_code, partition", [
    ("", 0, 0),
    ("a", 97, 47),
    ("my-group", -1906497762, 12),
    ("test-group", 627841412, 12),
    ("console-consumer-12345", 158455506, 6),
    ("groupé", -1237460406, 6),
    ("g😀", 1871882, 32),  # outside the BMP: two UTF-16 code units
    ("polygenelubricants", -2147483648, 0),  # MIN_VALUE: Utils.abs gives 0, Math.abs would not
])
def test_reference_vectors(group_id, hash_code, partition):
    assert java_string_hash(group_id) == hash_code
    assert partition_for(group_id, 50) == partition


@codec_settings()
@given(st.text(max_size=40), st.integers(1, 1000))
def test_partition_is_in_range_and_matches_the_java_rule(group_id, partitions):
    h = 0
    for unit in [int.from_bytes(group_id.encode("utf-16-be")[i:i + 2], "big")
                 for i in range(0, len(group_id.encode("utf-16-be")), 2)]:
        h = (h * 31 + unit) % (1 << 32)  # Java int arithmetic, kept unsigned here
    signed = h - (1 << 32) if h >= 1 << 31 else h
    expected = (0 if signed == -(1 << 31) else abs(signed)) % partitions
    assert partition_for(group_id, partitions) == expected
    assert 0 <= partition_for(group_id, partitions) < partitions
