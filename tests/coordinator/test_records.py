"""Record layouts: every typed record survives encode → decode; the fast paths agree with the declarations."""
from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.coordinator.records import (
    AclRecord,
    AclTombstone,
    GroupMemberRecord,
    GroupMetadataRecord,
    GroupMetadataTombstone,
    OffsetCommitRecord,
    OffsetCommitTombstone,
    RecordDecodeError,
    ScramCredentialRecord,
    ScramCredentialTombstone,
    TopicRecord,
    TopicTombstone,
    decode_record,
    decode_records,
    encode_offset_commit_declared,
    encode_record,
    record_type,
)

names = st.text(max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)

# Value v1 (written when an expire timestamp is set) has no leader epoch, so such commits carry none.
offset_commits = st.one_of(
    st.builds(OffsetCommitRecord, group=names, topic=names, partition=int32, offset=int64,
              leader_epoch=int32, metadata=names, commit_timestamp=int64, expire_timestamp=st.just(-1)),
    st.builds(OffsetCommitRecord, group=names, topic=names, partition=int32, offset=int64,
              leader_epoch=st.just(-1), metadata=names, commit_timestamp=int64, expire_timestamp=int64),
)
members = st.builds(
    GroupMemberRecord,
    member_id=names, group_instance_id=st.one_of(st.none(), names), client_id=names, client_host=names,
    rebalance_timeout=int32, session_timeout=int32, subscription=st.binary(max_size=64),
    assignment=st.binary(max_size=64),
)
group_metadata = st.builds(
    GroupMetadataRecord,
    group=names, protocol_type=names, generation=int32, protocol=st.one_of(st.none(), names),
    leader=st.one_of(st.none(), names), current_state_timestamp=int64, members=st.lists(members, max_size=4),
)
any_record = st.one_of(
    offset_commits,
    st.builds(OffsetCommitTombstone, group=names, topic=names, partition=int32),
    group_metadata,
    st.builds(GroupMetadataTombstone, group=names),
    st.builds(TopicRecord, name=names, topic_id=st.uuids(), partitions=int32),
    st.builds(TopicTombstone, name=names),
)
int8 = st.integers(-128, 127)
security_records = st.one_of(
    st.builds(ScramCredentialRecord, user=names, mechanism=int8, salt=st.binary(max_size=64),
              stored_key=st.binary(max_size=64), server_key=st.binary(max_size=64), iterations=int32),
    st.builds(ScramCredentialTombstone, user=names, mechanism=int8),
    st.builds(AclRecord, resource_type=int8, resource_name=names, pattern_type=int8, principal=names, host=names,
              operation=int8, permission=int8),
    st.builds(AclTombstone, resource_type=int8, resource_name=names, pattern_type=int8, principal=names,
              host=names, operation=int8, permission=int8),
)
any_record = st.one_of(any_record, security_records)


@settings(max_examples=300, deadline=None)
@given(any_record)
def test_every_record_survives_encode_then_decode(rec):
    key, value = encode_record(rec)
    assert decode_record(key, value) == rec
    assert list(decode_records([(key, value)])) == [rec]


@settings(max_examples=300, deadline=None)
@given(offset_commits)
def test_offset_commit_fast_encoding_matches_the_declared_layout(rec):
    assert encode_record(rec) == encode_offset_commit_declared(rec)


def test_offset_commit_uses_value_v3_or_v1_with_an_expire_timestamp_like_kafka():
    key, v3 = encode_record(OffsetCommitRecord("g", "t", 0, 42, 7, "", 1000))
    _, v1 = encode_record(OffsetCommitRecord("g", "t", 0, 42, 7, "", 1000, 5000))
    assert record_type(key) == 1
    assert struct.unpack_from(">h", v3)[0] == 3
    assert struct.unpack_from(">h", v1)[0] == 1
    # v1 has no leader epoch: it comes back as "none", as in Kafka.
    assert decode_record(key, v1).leader_epoch == -1
    assert decode_record(key, v1).expire_timestamp == 5000


def test_kafka_written_bytes_decode():
    # OffsetCommitKey type 1 ("grp", "tp", 3) and an OffsetCommitValue v3 built by hand from Kafka's schema.
    key = b"\x00\x01" + b"\x00\x03grp" + b"\x00\x02tp" + b"\x00\x00\x00\x03"
    value = b"\x00\x03" + struct.pack(">qi", 99, 4) + b"\x00\x02md" + struct.pack(">q", 1234)
    assert decode_record(key, value) == OffsetCommitRecord("grp", "tp", 3, 99, 4, "md", 1234, -1)
    # Old value versions: v0 (offset, metadata, commit timestamp) under key type 0.
    key0 = b"\x00\x00" + key[2:]
    value0 = b"\x00\x00" + struct.pack(">q", 5) + b"\x00\x00" + struct.pack(">q", 77)
    assert decode_record(key0, value0) == OffsetCommitRecord("grp", "tp", 3, 5, -1, "", 77, -1)


def test_group_metadata_v0_defaults_the_fields_it_lacks():
    member_v0 = (b"\x00\x02m1" + b"\x00\x01c" + b"\x00\x01h" + struct.pack(">i", 10000)
                 + struct.pack(">i", 1) + b"s" + struct.pack(">i", 1) + b"a")
    value = (b"\x00\x00" + b"\x00\x08consumer" + struct.pack(">i", 3) + b"\x00\x05range" + b"\x00\x02m1"
             + struct.pack(">i", 1) + member_v0)
    rec = decode_record(b"\x00\x02\x00\x01g", value)
    assert rec == GroupMetadataRecord("g", "consumer", 3, "range", "m1", -1,
                                      [GroupMemberRecord("m1", None, "c", "h", -1, 10000, b"s", b"a")])


@pytest.mark.parametrize(
    "key, value, message",
    [
        (b"\x00", None, "too short"),
        (b"\x00\x07\x00\x01g", b"", "unknown record type 7"),
        (b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00", b"\x00\x03", "bad key"),
        (b"\x00\x02\x00\x01g", b"\x00\x09", "unsupported value version 9"),
        (b"\x00\x02\x00\x01g", b"\x00", "value too short"),
        (b"\x00\x02\x00\x05g", None, "bad key"),
        (b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00",
         b"\x00\x03" + struct.pack(">qi", 1, 1) + b"\x00\x00" + struct.pack(">q", 1) + b"junk", "trailing"),
        (b"\x00\x64\x00\x01t", b"\x00\x00" + uuid.uuid4().bytes, "bad TopicValue"),
        (b"\x00\x01\x00\x02\xff\xfe\x00\x01t\x00\x00\x00\x00",
         b"\x00\x03" + struct.pack(">qi", 1, 1) + b"\x00\x00" + struct.pack(">q", 1), "bad key"),
    ],
)
def test_bad_bytes_raise_a_clear_decode_error(key, value, message):
    with pytest.raises(RecordDecodeError, match=message):
        decode_record(key, value)
    with pytest.raises(RecordDecodeError, match=message):
        list(decode_records([(key, value)]))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40), st.one_of(st.none(), st.binary(max_size=40)))
def test_random_bytes_either_decode_or_raise_decode_error(key, value):
    try:
        a = decode_record(key, value)
    except RecordDecodeError:
        with pytest.raises(RecordDecodeError):
            list(decode_records([(key, value)]))
    else:
        assert list(decode_records([(key, value)])) == [a]


def test_load_path_shares_one_string_per_group_and_topic_name():
    pairs = [encode_record(OffsetCommitRecord("group-a", "topic-b", p, p)) for p in range(3)]
    recs = list(decode_records(pairs))
    assert recs[0].group is recs[2].group and recs[0].topic is recs[1].topic


def test_encoding_a_field_that_does_not_fit_is_a_value_error():
    with pytest.raises(ValueError, match="OffsetCommit"):
        encode_record(OffsetCommitRecord("g", "t", 2**31, 0))
    with pytest.raises(ValueError, match="GroupMetadataValue"):
        encode_record(GroupMetadataRecord("g", "c", 2**40, None, None))
    with pytest.raises(TypeError):
        encode_record("not a record")


def _flatten(items):
    from cohort.coordinator.records import OffsetCommitRun

    out = []
    for item in items:
        out.extend(item.records() if isinstance(item, OffsetCommitRun) else [item])
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.builds(OffsetCommitRecord, group=st.sampled_from(["g", "h"]), topic=st.sampled_from(["t", "u"]),
              partition=st.integers(0, 5), offset=st.integers(0, 2**40), leader_epoch=st.integers(-1, 9),
              metadata=st.sampled_from(["", "", "", "md"]), commit_timestamp=st.integers(-1, 2**41),
              expire_timestamp=st.sampled_from([-1, -1, 123])),
    st.builds(GroupMetadataRecord, group=st.sampled_from(["g", "h"]), protocol_type=st.just("consumer"),
              generation=st.integers(0, 5), protocol=st.none(), leader=st.none()),
    st.builds(TopicRecord, name=st.sampled_from(["t", "u"]), topic_id=st.uuids(), partitions=st.integers(1, 9)),
    st.builds(ScramCredentialRecord, user=st.sampled_from(["t", "u"]), mechanism=st.integers(1, 2),
              salt=st.binary(min_size=16, max_size=16), stored_key=st.binary(min_size=1, max_size=2),
              server_key=st.binary(max_size=2), iterations=st.integers(4096, 9999)),
    st.builds(AclRecord, resource_type=st.just(3), resource_name=st.sampled_from(["g", "h"]), pattern_type=st.just(3),
              principal=st.just("User:a"), host=st.just("*"), operation=st.integers(2, 8), permission=st.just(3)),
), max_size=30))
def test_column_wise_load_decodes_exactly_what_record_by_record_decoding_does(recs):
    from cohort.coordinator.records import decode_for_load

    pairs = [encode_record(r) for r in recs]
    expected = [decode_record(k, v) for k, v in pairs]
    assert list(decode_records(pairs)) == expected
    # Each key is once in a replay, so the column-wise path may reorder: compare as multisets.
    assert sorted(map(repr, _flatten(decode_for_load(pairs)))) == sorted(map(repr, expected))


def test_column_wise_load_reports_bad_records_like_record_by_record_decoding():
    from cohort.coordinator.records import decode_for_load

    good = encode_record(OffsetCommitRecord("g", "t", 0, 1))
    bad = (good[0], b"\x00\x07" + good[1][2:])
    with pytest.raises(RecordDecodeError, match="unsupported value version 7"):
        list(decode_for_load([good, bad]))


# Bytes written by the construct layout GroupMetadataValue had before it was declared with the protocol
# schema (generated codec): the new declaration must write and read exactly these.
GOLDEN_GROUP_METADATA = [
    ('000200087061796d656e7473',
     '00030008636f6e73756d657200000007000572616e676500036d2d3100000000000000050000000200036d2d3100087374617469632d310006636c69656e7400092f31302e302e302e31000493e00000afc800000002000100000002000200036d2d32ffff0002633200092f31302e302e302e32ffffffff000027100000000000000003ffffff'),
    ('00020005656d707479',
     '0003000000000000ffffffffffffffffffffffff00000000'),
    ('00020005c3bc6ec3af',
     '00030008636f6e73756d65727fffffff00027272ffff0000018bcfe5680000000001012c787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878787878ffff000000000000000100000002000003e87373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737373737300000000'),
]
GOLDEN_OLD_GROUP_METADATA_VALUES = {
    0: '00000008636f6e73756d657200000003000572616e676500036d2d310000000100036d2d3100016300022f680000271000000001010000000102',
    1: '00010008636f6e73756d657200000003000572616e676500036d2d310000000100036d2d3100016300022f68000075300000271000000001010000000102',
    2: '00020008636f6e73756d657200000003000572616e676500036d2d31000000000000007b0000000100036d2d3100016300022f68000075300000271000000001010000000102',
}


def test_group_metadata_records_keep_their_exact_bytes():
    records = [
        GroupMetadataRecord("payments", "consumer", 7, "range", "m-1", 5, [
            GroupMemberRecord("m-1", "static-1", "client", "/10.0.0.1", 300000, 45000, b"\x00\x01", b"\x00\x02"),
            GroupMemberRecord("m-2", None, "c2", "/10.0.0.2", -1, 10000, b"", b"\xff" * 3)]),
        GroupMetadataRecord("empty", "", 0, None, None, -1, []),
        GroupMetadataRecord("\u00fcn\u00ef", "consumer", 2147483647, "rr", None, 1700000000000, [
            GroupMemberRecord("x" * 300, None, "", "", 1, 2, b"s" * 1000, b"")]),
    ]
    for record, (key, value) in zip(records, GOLDEN_GROUP_METADATA):
        assert encode_record(record) == (bytes.fromhex(key), bytes.fromhex(value))
        assert decode_record(bytes.fromhex(key), bytes.fromhex(value)) == record


def test_older_group_metadata_value_versions_still_load():
    key = encode_record(GroupMetadataTombstone("payments"))[0]
    member = GroupMemberRecord("m-1", None, "c", "/h", -1, 10000, b"\x01", b"\x02")
    expected = {0: GroupMetadataRecord("payments", "consumer", 3, "range", "m-1", -1, [member])}
    with_rebalance = GroupMemberRecord("m-1", None, "c", "/h", 30000, 10000, b"\x01", b"\x02")
    expected[1] = GroupMetadataRecord("payments", "consumer", 3, "range", "m-1", -1, [with_rebalance])
    expected[2] = GroupMetadataRecord("payments", "consumer", 3, "range", "m-1", 123, [with_rebalance])
    for version, value in GOLDEN_OLD_GROUP_METADATA_VALUES.items():
        assert decode_record(key, bytes.fromhex(value)) == expected[version]
