"""Record layouts: every typed record survives encode → decode; the fast paths agree with the declarations."""
from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.coordinator.records.types import (
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
    encode_record_generic,
    encode_group_metadata_in_slices,
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
@given(any_record)
def test_fast_encoding_matches_the_generic_codec_of_the_declarations(rec):
    assert encode_record(rec) == encode_record_generic(rec)


@given(st.builds(GroupMetadataRecord, group=names, protocol_type=names, generation=int32,
                 protocol=st.one_of(st.none(), names), leader=st.one_of(st.none(), names),
                 current_state_timestamp=int64, members=st.lists(members, max_size=12)),
       st.integers(1, 5))
def test_a_group_record_encoded_in_slices_is_byte_for_byte_the_record_encoded_at_once(rec, per_slice):
    returned = []

    def encoding():
        returned.append((yield from encode_group_metadata_in_slices(rec, per_slice)))

    steps = sum(1 for _ in encoding())
    assert returned == [encode_record(rec)]
    # it pauses between slices: one step per slice beyond what one slice holds
    assert steps == (0 if len(rec.members) <= per_slice else -(-len(rec.members) // per_slice))


def _outcome(decode, key, value):
    try:
        return decode(key, value)
    except RecordDecodeError:
        return RecordDecodeError


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s.encode())) + s.encode()


key_bodies = st.one_of(
    st.binary(max_size=30),
    st.builds(_string, names),  # a group metadata or topic key
    st.builds(lambda g, t, p: _string(g) + _string(t) + struct.pack(">i", p), names, names, int32),  # offset commit
)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([0, 1, 2, 100]), key_bodies, st.integers(-1, 5), st.binary(max_size=40), st.booleans())
def test_fast_decoding_matches_the_generic_codec_of_the_declarations(rtype, key_body, version, value_body, tombstone):
    from cohort.coordinator.records.types import RECORD_TYPES

    key = struct.pack(">h", rtype) + key_body
    value = None if tombstone else struct.pack(">h", version) + value_body
    assert _outcome(decode_record, key, value) == _outcome(RECORD_TYPES[rtype].decode_generic, key, value)
    # and on the bytes of real records, cut anywhere
    real_key, real_value = encode_record(OffsetCommitRecord("g", "t", 1, 2, 3, value_body.hex(), 4))
    cut = len(value_body) % (len(real_value) + 1)
    assert (_outcome(decode_record, real_key, real_value[:cut])
            == _outcome(RECORD_TYPES[1].decode_generic, real_key, real_value[:cut]))


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
        (b"\x00\x63\x00\x01g", b"", "unknown record type 99"),
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
    from cohort.coordinator.records.types import OffsetCommitRun

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
    from cohort.coordinator.records.types import decode_for_load

    pairs = [encode_record(r) for r in recs]
    expected = [decode_record(k, v) for k, v in pairs]
    assert list(decode_records(pairs)) == expected
    # Each key is once in a replay, so the column-wise path may reorder: compare as multisets.
    assert sorted(map(repr, _flatten(decode_for_load(pairs)))) == sorted(map(repr, expected))


def test_column_wise_load_reports_bad_records_like_record_by_record_decoding():
    from cohort.coordinator.records.types import decode_for_load

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


# Bytes written before the layouts were declared once (construct layouts and their struct twins): the
# derived codecs must write and read exactly these, for every record type and written value version.
GOLDEN_RECORDS = [
    (OffsetCommitRecord("payments", "orders", 7, 1234567, 5, "", 1700000000000),
     "000100087061796d656e747300066f726465727300000007",
     "0003000000000012d6870000000500000000018bcfe56800"),
    (OffsetCommitRecord("payments", "orders", 7, 1234567, 5, "checkpoint-42", 1700000000000),
     "000100087061796d656e747300066f726465727300000007",
     "0003000000000012d68700000005000d636865636b706f696e742d34320000018bcfe56800"),
    (OffsetCommitRecord("\u00fcn\u00ef", "t", 2147483647, -1, -1, "m", -1, 1800000000000),
     "00010005c3bc6ec3af0001747fffffff",
     "0001ffffffffffffffff00016dffffffffffffffff000001a3185c5000"),
    (OffsetCommitTombstone("payments", "orders", 7), "000100087061796d656e747300066f726465727300000007", None),
    (GroupMetadataTombstone("payments"), "000200087061796d656e7473", None),
    (TopicRecord("orders", uuid.UUID("12345678-9abc-def0-1234-56789abcdef0"), 12),
     "006400066f7264657273", "0000123456789abcdef0123456789abcdef00000000c"),
    (TopicTombstone("orders"), "006400066f7264657273", None),
]


@pytest.mark.parametrize("record, key, value", GOLDEN_RECORDS, ids=lambda x: type(x).__name__ if not isinstance(x, str) else "")
def test_every_record_type_keeps_its_exact_bytes(record, key, value):
    golden = (bytes.fromhex(key), None if value is None else bytes.fromhex(value))
    assert encode_record(record) == golden
    assert encode_record_generic(record) == golden
    assert decode_record(*golden) == record


OFFSET_COMMIT_KEY = "000100036772700002747000000003"  # type 1: ("grp", "tp", 3)
# OffsetCommitValue of offset 99, metadata "md", commit timestamp 1234 (leader epoch 4, expire 5678 where held).
GOLDEN_OFFSET_COMMIT_VALUES = {
    0: ("0000000000000000006300026d6400000000000004d2", OffsetCommitRecord("grp", "tp", 3, 99, -1, "md", 1234)),
    1: ("0001000000000000006300026d6400000000000004d2000000000000162e",
        OffsetCommitRecord("grp", "tp", 3, 99, -1, "md", 1234, 5678)),
    2: ("0002000000000000006300026d6400000000000004d2", OffsetCommitRecord("grp", "tp", 3, 99, -1, "md", 1234)),
    3: ("00030000000000000063000000040002" "6d6400000000000004d2", OffsetCommitRecord("grp", "tp", 3, 99, 4, "md", 1234)),
    # v4: v3 in compact form (metadata length as unsigned varint N+1) and an empty tagged-field section.
    4: ("000400000000000000630000000403" "6d6400000000000004d200", OffsetCommitRecord("grp", "tp", 3, 99, 4, "md", 1234)),
}


@pytest.mark.parametrize("version", sorted(GOLDEN_OFFSET_COMMIT_VALUES))
def test_every_offset_commit_value_version_decodes(version):
    value, expected = GOLDEN_OFFSET_COMMIT_VALUES[version]
    for key_type in (0, 1):  # the two key types share one layout
        key = bytes.fromhex(f"000{key_type}" + OFFSET_COMMIT_KEY[4:])
        assert decode_record(key, bytes.fromhex(value)) == expected
        assert list(decode_records([(key, bytes.fromhex(value))])) == [expected]


def test_offset_commit_v4_skips_unknown_tagged_fields_like_kafka():
    value = bytes.fromhex("000400000000000000630000000403" "6d6400000000000004d2" "01" "05" "02" "abcd")
    assert decode_record(bytes.fromhex(OFFSET_COMMIT_KEY), value) == GOLDEN_OFFSET_COMMIT_VALUES[4][1]


def test_group_metadata_v4_is_the_flexible_form_of_v3():
    value = bytes.fromhex(
        "0004" "09" + b"consumer".hex() + "00000003" "06" + b"range".hex() + "04" + b"m-1".hex()
        + "000000000000007b" "02"  # current state timestamp 123, one member
        + "04" + b"m-1".hex() + "00" "02" + b"c".hex() + "03" + b"/h".hex() + "00007530" "00002710" "0201" "0202" "00"
        + "00")
    member = GroupMemberRecord("m-1", None, "c", "/h", 30000, 10000, b"\x01", b"\x02")
    expected = GroupMetadataRecord("payments", "consumer", 3, "range", "m-1", 123, [member])
    assert decode_record(encode_record(GroupMetadataTombstone("payments"))[0], value) == expected


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def kafka_offset_commit_value(version: int, offset: int, epoch: int, metadata: str, commit: int, expire: int) -> bytes:
    """Kafka's OffsetCommitValue, stated independently: v0/v2 offset, metadata, commit timestamp; v1 adds the
    expire timestamp; v3 puts the leader epoch after the offset; v4 is v3 compact, with tagged fields."""
    md = metadata.encode()
    if version == 4:
        return struct.pack(">hqi", 4, offset, epoch) + _uvarint(len(md) + 1) + md + struct.pack(">q", commit) + b"\0"
    out = struct.pack(">hq", version, offset) + (struct.pack(">i", epoch) if version == 3 else b"")
    out += struct.pack(">h", len(md)) + md + struct.pack(">q", commit)
    return out + (struct.pack(">q", expire) if version == 1 else b"")


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 4), names, names, int32, int64, int32, names, int64, int64)
def test_offset_commits_follow_kafkas_layout_in_every_version(version, group, topic, partition, offset, epoch,
                                                             metadata, commit, expire):
    g, t = group.encode(), topic.encode()
    key = struct.pack(">hh", 1, len(g)) + g + struct.pack(">h", len(t)) + t + struct.pack(">i", partition)
    value = kafka_offset_commit_value(version, offset, epoch, metadata, commit, expire)
    record = decode_record(key, value)
    assert record == OffsetCommitRecord(group, topic, partition, offset, epoch if version >= 3 else -1, metadata,
                                        commit, expire if version == 1 else -1)
    # Kafka writes v3, or v1 when the commit carries an expire timestamp.
    written = 1 if record.expire_timestamp != -1 else 3
    assert encode_record(record) == (key, kafka_offset_commit_value(written, offset, record.leader_epoch, metadata,
                                                                    commit, record.expire_timestamp))


def test_views_of_bytes_decode_like_bytes():
    key, value = encode_record(OffsetCommitRecord("g", "t", 1, 2, 3, "md", 4))
    assert decode_record(memoryview(key), memoryview(value)) == decode_record(key, value)
    assert list(decode_records([(bytearray(key), memoryview(value))])) == [decode_record(key, value)]


def test_a_new_record_type_is_one_declaration_and_one_registry_line():
    """A record type added the way later ones (credentials, consumer-group members) will be."""
    from dataclasses import fields

    from cohort.coordinator.records.codecs import RecordType
    from cohort.protocol.schema import BYTES as B, INT8, INT32 as I32, STRING as S, Array, F, Struct, message

    key = message("CredentialKey", None, "200", "none", [F("user", S), F("mechanism", INT8)])
    value = message("CredentialValue", None, "0-1", "1+", [
        F("salt", B), F("iterations", I32, default=4096), F("hosts", Array(S), "1+"),
        F("grants", Array(Struct("Grant", [F("topic", S), F("partitions", Array(I32))])), "1+"),
    ])
    flat = RecordType(key, value, (0,), "CredentialRecord", "CredentialTombstone")
    assert flat.type_ids == (200,)
    assert [f.name for f in fields(flat.record)] == ["user", "mechanism", "salt", "iterations", "hosts", "grants"]
    rec = flat.record("alice", 1, b"\x01\x02")
    assert rec.iterations == 4096
    encoded = flat.encode(rec)
    assert encoded == flat.encode_generic(rec)
    assert encoded == (b"\x00\xc8\x00\x05alice\x01", b"\x00\x00\x00\x00\x00\x02\x01\x02\x00\x00\x10\x00")
    assert flat.decoder(200)(*encoded, {}) == rec
    assert flat.decoder(200)(encoded[0], None, {}) == flat.tombstone("alice", 1)
    # A flexible version with an array is written and read through the generic generated codec.
    flexible = RecordType(key, value, (1,), "CredentialRecord", "CredentialTombstone")
    rec = flexible.record("bob", 2, b"s", 10, ["h1", "h2"], [flexible.nested["Grant"]("t", [0, 1])])
    k, v = flexible.encode(rec)
    assert v == (b"\x00\x01" + b"\x02s" + struct.pack(">i", 10) + b"\x03\x03h1\x03h2"
                 + b"\x02" + b"\x02t" + b"\x03" + struct.pack(">ii", 0, 1) + b"\x00" + b"\x00")
    assert flexible.decoder(200)(k, v, {}) == rec
