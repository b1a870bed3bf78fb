"""The offsets log's record types, their typed records and codecs.

The layouts follow Kafka's ``__consumer_offsets`` topic (group-coordinator's record schemas): a key is
an int16 record type followed by the key struct, a value is an int16 version
followed by the value struct, and a ``None`` value is a tombstone.  Keeping
Kafka's layout means a record can be read by anyone who knows Kafka's format,
and that compaction (latest value per key) has Kafka's meaning.

Each key and value layout is declared once, in `layouts`; `RECORD_TYPES`
below says which record type uses which, and everything else is derived
(`codecs.RecordType`): the typed record and tombstone classes (key
fields, then value fields), a generated codec for every version, a faster
generated codec for flat records (offset commits: one per committed partition
on the write path, millions at load time), and the byte positions the
column-wise start-up loader (`decode_for_load`) reads.  Adding a record type
is one key and one value declaration plus one line in `RECORD_TYPES`.

Written versions are Kafka's: an offset commit under key type 1 with value v3,
or v1 when it carries an expire timestamp (v1 has no leader epoch, so the
epoch of such a commit is not kept); group metadata v3; topics v0.

Conventions: ``-1`` means "none" for leader epochs, expire timestamps and the
group state timestamp, as on the wire; ``protocol_type == ""`` means none.
"""
from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import compress, groupby
from operator import itemgetter, not_

from cohort.coordinator.records.codecs import RecordDecodeError, RecordType, fixed_layout
from cohort.coordinator.records.layouts import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    TopicKey,
    TopicValue,
    EndOffsetKey,
    EndOffsetValue,
    ScramCredentialKey,
    ScramCredentialValue,
    AclKey,
    AclValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    GroupJournalKey,
    GroupJournalValue,
    OffsetCommitSourceKey,
    OffsetCommitSourceValue,
)

# --------------------------------------------------------------------------------------
# The registry: record type (a key's int16 prefix; its key declaration's versions) -> RecordType.
# Arguments: key and value declarations, value versions written (preferred first), typed class names.
# --------------------------------------------------------------------------------------
RECORD_TYPES: dict[int, RecordType] = {type_id: rt for rt in (
    # types 0 and 1; written as type 1 with value v3, or v1 when the commit carries an expire timestamp
    RecordType(OffsetCommitKey, OffsetCommitValue, (3, 1), "OffsetCommitRecord", "OffsetCommitTombstone"),
    # type 2; value v3
    RecordType(GroupMetadataKey, GroupMetadataValue, (3,), "GroupMetadataRecord", "GroupMetadataTombstone",
               nested={"MemberMetadata": "GroupMemberRecord"}),
    # KIP-848 consumer groups: types 3 (group epoch), 5 (member), 6 and 7 (target assignment), 8 (member's
    # current assignment); value v0 each
    RecordType(ConsumerGroupMetadataKey, ConsumerGroupMetadataValue, (0,), "ConsumerGroupMetadataRecord",
               "ConsumerGroupMetadataTombstone"),
    RecordType(ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue, (0,),
               "ConsumerGroupMemberMetadataRecord", "ConsumerGroupMemberMetadataTombstone",
               nested={"ClassicProtocol": "ClassicProtocolRecord"}),
    RecordType(ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue, (0,),
               "ConsumerGroupTargetAssignmentMetadataRecord", "ConsumerGroupTargetAssignmentMetadataTombstone"),
    RecordType(ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue, (0,),
               "ConsumerGroupTargetAssignmentMemberRecord", "ConsumerGroupTargetAssignmentMemberTombstone",
               nested={"TopicPartition": "TargetTopicPartitions"}),
    RecordType(ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue, (0,),
               "ConsumerGroupCurrentMemberAssignmentRecord", "ConsumerGroupCurrentMemberAssignmentTombstone",
               nested={"TopicPartitions": "CurrentTopicPartitions"}),
    # type 100 (Cohort's topic registry); value v0
    RecordType(TopicKey, TopicValue, (0,), "TopicRecord", "TopicTombstone"),
    # type 105 (a topic partition's end offset as its source reported it; with the topic registry); value v0
    RecordType(EndOffsetKey, EndOffsetValue, (0,), "EndOffsetRecord", "EndOffsetTombstone"),
    # type 101 (a SCRAM credential); value v0
    RecordType(ScramCredentialKey, ScramCredentialValue, (0,), "ScramCredentialRecord", "ScramCredentialTombstone"),
    # type 102 (an ACL binding: the key is the binding); value v0
    RecordType(AclKey, AclValue, (0,), "AclRecord", "AclTombstone"),
    # type 103 (an entry of a group's operator journal: a rebalance or an admin action); value v0
    RecordType(GroupJournalKey, GroupJournalValue, (0,), "GroupJournalRecord", "GroupJournalTombstone",
               nested={"JournalMember": "JournalMemberRecord", "PartitionMove": "PartitionMoveRecord"}),
    # type 104 (who made the offset commits after it in the same append: the offset history); value v0
    RecordType(OffsetCommitSourceKey, OffsetCommitSourceValue, (0,), "OffsetCommitSourceRecord",
               "OffsetCommitSourceTombstone"),
) for type_id in rt.type_ids}

__all__ = [
    "RECORD_TYPES",
    "OFFSET_COMMIT_KEY_TYPES",
    "GROUP_METADATA_KEY_TYPE",
    "TOPIC_KEY_TYPE",
    "SECURITY_KEY_TYPES",
    "OFFSET_COMMIT_SOURCE_KEY_TYPE",
    "OffsetCommitRecord",
    "OffsetCommitTombstone",
    "GroupMemberRecord",
    "GroupMetadataRecord",
    "GroupMetadataTombstone",
    "TopicRecord",
    "TopicTombstone",
    "END_OFFSET_KEY_TYPE",
    "EndOffsetRecord",
    "EndOffsetTombstone",
    "ScramCredentialRecord",
    "ScramCredentialTombstone",
    "AclRecord",
    "AclTombstone",
    "ConsumerGroupMetadataRecord",
    "ConsumerGroupMetadataTombstone",
    "ConsumerGroupMemberMetadataRecord",
    "ConsumerGroupMemberMetadataTombstone",
    "ConsumerGroupTargetAssignmentMetadataRecord",
    "ConsumerGroupTargetAssignmentMetadataTombstone",
    "ConsumerGroupTargetAssignmentMemberRecord",
    "ConsumerGroupTargetAssignmentMemberTombstone",
    "ConsumerGroupCurrentMemberAssignmentRecord",
    "ConsumerGroupCurrentMemberAssignmentTombstone",
    "TargetTopicPartitions",
    "CurrentTopicPartitions",
    "CONSUMER_GROUP_KEY_TYPES",
    "ClassicMemberMetadata",
    "ClassicProtocolRecord",
    "GroupJournalRecord",
    "GroupJournalTombstone",
    "JournalMemberRecord",
    "PartitionMoveRecord",
    "OffsetCommitSourceRecord",
    "OffsetCommitSourceTombstone",
    "Record",
    "RecordDecodeError",
    "encode_record",
    "encode_offset_commit",
    "encode_group_metadata_in_slices",
    "decode_record",
    "decode_records",
    "decode_for_load",
    "OffsetCommitRun",
    "record_type",
]

_OFFSET_COMMIT = RECORD_TYPES[1]
_GROUP_METADATA = RECORD_TYPES[2]
_TOPIC = RECORD_TYPES[100]
OFFSET_COMMIT_KEY_TYPES = _OFFSET_COMMIT.type_ids
GROUP_METADATA_KEY_TYPE = _GROUP_METADATA.write_type
TOPIC_KEY_TYPE = _TOPIC.write_type
END_OFFSET_KEY_TYPE = RECORD_TYPES[105].write_type
SECURITY_KEY_TYPES = frozenset({RECORD_TYPES[101].write_type, RECORD_TYPES[102].write_type})  # credentials, ACLs
OFFSET_COMMIT_SOURCE_KEY_TYPE = RECORD_TYPES[104].write_type

# The typed records, derived from the declarations (fields: the key's, then the value's).
OffsetCommitRecord = _OFFSET_COMMIT.record
OffsetCommitTombstone = _OFFSET_COMMIT.tombstone
GroupMetadataRecord = _GROUP_METADATA.record
GroupMetadataTombstone = _GROUP_METADATA.tombstone
GroupMemberRecord = _GROUP_METADATA.nested["MemberMetadata"]
TopicRecord = _TOPIC.record
TopicTombstone = _TOPIC.tombstone
EndOffsetRecord = RECORD_TYPES[105].record
EndOffsetTombstone = RECORD_TYPES[105].tombstone
ScramCredentialRecord = RECORD_TYPES[101].record
ScramCredentialTombstone = RECORD_TYPES[101].tombstone
AclRecord = RECORD_TYPES[102].record
AclTombstone = RECORD_TYPES[102].tombstone
ConsumerGroupMetadataRecord = RECORD_TYPES[3].record
ConsumerGroupMetadataTombstone = RECORD_TYPES[3].tombstone
ConsumerGroupMemberMetadataRecord = RECORD_TYPES[5].record
ConsumerGroupMemberMetadataTombstone = RECORD_TYPES[5].tombstone
ConsumerGroupTargetAssignmentMetadataRecord = RECORD_TYPES[6].record
ConsumerGroupTargetAssignmentMetadataTombstone = RECORD_TYPES[6].tombstone
ConsumerGroupTargetAssignmentMemberRecord = RECORD_TYPES[7].record
ConsumerGroupTargetAssignmentMemberTombstone = RECORD_TYPES[7].tombstone
ConsumerGroupCurrentMemberAssignmentRecord = RECORD_TYPES[8].record
ConsumerGroupCurrentMemberAssignmentTombstone = RECORD_TYPES[8].tombstone
TargetTopicPartitions = RECORD_TYPES[7].nested["TopicPartition"]
CurrentTopicPartitions = RECORD_TYPES[8].nested["TopicPartitions"]
CONSUMER_GROUP_KEY_TYPES = (3, 5, 6, 7, 8)
ClassicMemberMetadata = RECORD_TYPES[5].nested["ClassicMemberMetadata"]
ClassicProtocolRecord = RECORD_TYPES[5].nested["ClassicProtocol"]
GroupJournalRecord = RECORD_TYPES[103].record
GroupJournalTombstone = RECORD_TYPES[103].tombstone
JournalMemberRecord = RECORD_TYPES[103].nested["JournalMember"]
PartitionMoveRecord = RECORD_TYPES[103].nested["PartitionMove"]
OffsetCommitSourceRecord = RECORD_TYPES[104].record
OffsetCommitSourceTombstone = RECORD_TYPES[104].tombstone

Record = (
    OffsetCommitRecord
    | OffsetCommitTombstone
    | GroupMetadataRecord
    | GroupMetadataTombstone
    | TopicRecord
    | TopicTombstone
    | EndOffsetRecord
    | EndOffsetTombstone
    | ScramCredentialRecord
    | ScramCredentialTombstone
    | AclRecord
    | AclTombstone
    | ConsumerGroupMetadataRecord
    | ConsumerGroupMetadataTombstone
    | ConsumerGroupMemberMetadataRecord
    | ConsumerGroupMemberMetadataTombstone
    | ConsumerGroupTargetAssignmentMetadataRecord
    | ConsumerGroupTargetAssignmentMetadataTombstone
    | ConsumerGroupTargetAssignmentMemberRecord
    | ConsumerGroupTargetAssignmentMemberTombstone
    | ConsumerGroupCurrentMemberAssignmentRecord
    | ConsumerGroupCurrentMemberAssignmentTombstone
    | GroupJournalRecord
    | GroupJournalTombstone
    | OffsetCommitSourceRecord
    | OffsetCommitSourceTombstone
)

_ENCODERS = {cls: encode for rt in RECORD_TYPES.values()
             for cls, encode in ((rt.record, rt.encode), (rt.tombstone, rt.encode_tombstone))}

_DECODERS = {t: rt.decoder(t) for t, rt in RECORD_TYPES.items()}  # type -> decoder(key, value, names)
_INT16 = struct.Struct(">h")
_DECODERS_BY_PREFIX = {_INT16.pack(t): decode for t, decode in _DECODERS.items()}  # a key's first two bytes


# --------------------------------------------------------------------------------------
# Encoding and decoding
# --------------------------------------------------------------------------------------
def encode_record(rec: Record) -> tuple[bytes, bytes | None]:
    """Encode a typed record as (key, value); a tombstone has value None.  ValueError if a field does not fit."""
    encoder = _ENCODERS.get(type(rec))
    if encoder is None:
        raise TypeError(f"not a record: {rec!r}")
    return encoder(rec)


# A GroupMetadata value v0-3 ends with its members array: an int32 count, then each member.
_MEMBERS_SPLICE = (_GROUP_METADATA.value_fields[-1].name == "members"
                   and all(v < GroupMetadataValue.SCHEMA.flexible.low for v in _GROUP_METADATA.write_versions))
_INT32 = struct.Struct(">i")


def encode_group_metadata_in_slices(rec: GroupMetadataRecord, members_per_slice: int):
    """`encode_record(rec)` a slice of members per step: a generator that yields between slices
    and returns (key, value), so a 10 000-member record never holds the event loop for long.

    Each slice is encoded as a record of those members alone; its members' bytes are what
    follows the slice record's own head and count.
    """
    members = rec.members
    if not _MEMBERS_SPLICE or len(members) <= members_per_slice:
        return encode_record(rec)
    key, head = encode_record(replace(rec, members=[]))
    parts = [head[:-_INT32.size], _INT32.pack(len(members))]
    for start in range(0, len(members), members_per_slice):
        _, value = encode_record(replace(rec, members=members[start:start + members_per_slice]))
        parts.append(value[len(head):])
        yield
    return key, b"".join(parts)


encode_offset_commit = _OFFSET_COMMIT.encode_fields
"""encode_offset_commit(group, topic, partition, offset, leader_epoch, metadata, commit_timestamp,
expire_timestamp) -> (key, value): an `OffsetCommitRecord` without building one (the commit path)."""


_GENERIC_ENCODERS = {cls: encode for rt in RECORD_TYPES.values()
                     for cls, encode in ((rt.record, rt.encode_generic), (rt.tombstone, rt.encode_tombstone))}


def encode_record_generic(rec: Record) -> tuple[bytes, bytes | None]:
    """`encode_record` through the generic generated codec: what the fast encoders are held to."""
    encoder = _GENERIC_ENCODERS.get(type(rec))
    if encoder is None:
        raise TypeError(f"not a record: {rec!r}")
    return encoder(rec)


def record_type(key: bytes) -> int:
    """The record type of a key (its int16 prefix)."""
    if len(key) < 2:
        raise RecordDecodeError(f"record key too short ({len(key)} bytes)")
    return _INT16.unpack_from(key)[0]


def decode_record(key: bytes, value: bytes | None, names: dict | None = None) -> Record:
    """Decode one (key, value) into a typed record; RecordDecodeError if it is not one we know.

    `names` (bytes -> str), when given, shares the key's strings with earlier calls.
    """
    if type(key) is not bytes:
        key = bytes(key)  # the generated decoders read bytes
    rtype = record_type(key)
    decode = _DECODERS.get(rtype)
    if decode is None:
        raise RecordDecodeError(f"unknown record type {rtype}")
    return decode(key, value, {} if names is None else names)


def decode_records(pairs: Iterable[tuple[bytes, bytes | None]]) -> Iterator[Record]:
    """Decode many (key, value) pairs, the load path: one str object per distinct group and topic name."""
    names: dict[bytes, str] = {}
    decoders = _DECODERS_BY_PREFIX
    for key, value in pairs:
        if type(key) is bytes and (decode := decoders.get(key[:2])) is not None:
            yield decode(key, value, names)
        else:  # an error to report, or a view to copy first
            yield decode_record(key, value)


# --------------------------------------------------------------------------------------
# Column-wise load path
# --------------------------------------------------------------------------------------
@dataclass(slots=True)
class OffsetCommitRun:
    """Offset commits of one (group, topic) with metadata "", column-wise: the bulk load unit.

    Row i is the commit of `partitions[i]`; `slots[4*i : 4*i + 4]` holds its
    offset, leader epoch, commit timestamp and expire timestamp as int64, the
    very layout `OffsetsTable` keeps, so a run can become table state in one
    copy.
    """

    group: str
    topic: str
    partitions: Sequence[int]
    slots: array

    @property
    def offsets(self) -> array:
        return self.slots[0::4]

    def records(self) -> Iterator[OffsetCommitRecord]:
        s = self.slots
        for i, p in enumerate(self.partitions):
            yield OffsetCommitRecord(self.group, self.topic, p, s[4 * i], s[4 * i + 1], "", s[4 * i + 2],
                                     s[4 * i + 3])


# What the column-wise path reads, derived from the declarations: the value version Kafka writes for a
# commit without expire timestamp, with every string empty (metadata ""), and the key's trailing partition.
_RUN_SLOTS = ("offset", "leader_epoch", "commit_timestamp", "expire_timestamp")  # OffsetCommitRun.slots order
_RUN_VALUE = fixed_layout(OffsetCommitValue, _OFFSET_COMMIT.write_versions[0])
_RUN_DEFAULTS = {f.name: f.default for f in _OFFSET_COMMIT.value_fields}
_PARTITION_FIELD = _OFFSET_COMMIT.key_fields[-1]
_PARTITION_WIDTH = struct.calcsize(_PARTITION_FIELD.type.fmtstr)
_PARTITION_CODE = _PARTITION_FIELD.type.fmtstr[1:]
# OffsetCommitRun's shape: the key's head is (group, topic), its fixed-width tail the partition.
assert [f.name for f in _OFFSET_COMMIT.key_fields] == ["group", "topic", "partition"]
assert all(name in _RUN_DEFAULTS for name in _RUN_SLOTS)

_KEY_PREFIX = itemgetter(slice(0, -_PARTITION_WIDTH))
_KEY_PARTITION = itemgetter(slice(-_PARTITION_WIDTH, None))
_RUN_KEY_HEADS = {t: _OFFSET_COMMIT.key_head_decoder(t) for t in OFFSET_COMMIT_KEY_TYPES}  # -> (group, topic)
_FIRST = itemgetter(0)
_SECOND = itemgetter(1)
_IS_RUN_SIZE = _RUN_VALUE.size.__eq__
_ONLY_RUN_SIZE = {_RUN_VALUE.size}
_RUN_MARKERS = tuple(byte for _, byte in _RUN_VALUE.markers).__eq__
_SIGN_BYTE = bytes(0 if b < 0x80 else 0xFF for b in range(256))  # top byte of an int -> its sign extension


def decode_for_load(pairs: Iterable[tuple[bytes, bytes]]) -> Iterator[OffsetCommitRun | Record]:
    """Decode live records for loading: offset commits column-wise in runs, everything else as records.

    Why: at start-up a coordinator may replay millions of commits, and a
    Python-level step per record costs more than the whole rest of the load.
    Here every per-record step is a C-level one over the whole list (`map`,
    `bytes.join`, strided slice copies, `itertools.groupby`), and Python runs
    once per run of consecutive commits of the same (group, topic) (a consumer
    commits all its partitions together, so they sit together in the log).
    The common value layout (OffsetCommitValue v3, metadata "": 24 bytes) is
    converted to `OffsetsTable`'s int64 slots by copying byte columns; other
    commits (v1, non-empty metadata) and other record types go through
    `decode_records`.  Each key is expected once (the replay's live records),
    so the order in which runs and records come out does not matter.
    """
    pairs = pairs if isinstance(pairs, list) else list(pairs)
    if not pairs:
        return
    size = _RUN_VALUE.size
    values = list(map(_SECOND, pairs))
    try:
        sizes = set(map(len, values))
    except TypeError:  # a None (tombstone) value: not a live record list, take the general path
        yield from decode_records(pairs)
        return
    if sizes != _ONLY_RUN_SIZE:
        fixed = list(map(_IS_RUN_SIZE, map(len, values)))
        yield from decode_records(compress(pairs, map(not_, fixed)))
        pairs = list(compress(pairs, fixed))
        values = list(map(_SECOND, pairs))
    blob = b"".join(values)
    n = len(pairs)
    if not all(blob[pos::size].count(byte) == n for pos, byte in _RUN_VALUE.markers):
        markers = list(map(_RUN_MARKERS, zip(*(blob[pos::size] for pos, _ in _RUN_VALUE.markers))))
        yield from decode_records(compress(pairs, map(not_, markers)))
        pairs = list(compress(pairs, markers))
        blob = b"".join(map(_SECOND, pairs))
        n = len(pairs)
    if not n:
        return
    slots = _values_to_slots(blob, n)
    keys = list(map(_FIRST, pairs))
    try:
        partitions = _ints_struct(n).unpack(b"".join(map(_KEY_PARTITION, keys)))
    except struct.error:  # a key too short to end with a partition: not an offset commit
        yield from decode_records(pairs)
        return
    names: dict[bytes, str] = {}
    pos = 0
    for prefix, same in groupby(map(_KEY_PREFIX, keys)):
        end = pos + len(list(same))
        group_topic = _offset_commit_prefix(prefix, names)
        if group_topic is None:
            yield from decode_records(pairs[pos:end])
        else:
            yield OffsetCommitRun(group_topic[0], group_topic[1], partitions[pos:end], slots[4 * pos : 4 * end])
        pos = end


def _values_to_slots(blob: bytes, n: int) -> array:
    """n concatenated run values (`_RUN_VALUE`) -> int64 (offset, epoch, commit ts, expire ts) x n.

    Each output field is assembled big-endian with strided slice copies
    (narrower fields sign-extended, fields the version lacks filled with their
    declared default), then byte-swapped to the machine's order.
    """
    size = _RUN_VALUE.size
    out = bytearray(32 * n)
    for column, name in enumerate(_RUN_SLOTS):
        base = 8 * column
        where = _RUN_VALUE.fields.get(name)
        if where is None:
            for j, byte in enumerate(struct.pack(">q", _RUN_DEFAULTS[name])):
                out[base + j :: 32] = bytes((byte,)) * n
            continue
        pos, width = where
        if width < 8:
            sign = blob[pos::size].translate(_SIGN_BYTE)
            for j in range(8 - width):
                out[base + j :: 32] = sign
        for j in range(width):
            out[base + 8 - width + j :: 32] = blob[pos + j :: size]
    slots = array("q")
    slots.frombytes(out)
    if sys.byteorder == "little":
        slots.byteswap()
    return slots


def _offset_commit_prefix(prefix: bytes, names: dict[bytes, str]) -> tuple[str, str] | None:
    """(group, topic) if `prefix` is an offset-commit key minus its partition, else None.

    `names` shares decoded names: a group's name recurs in every one of its
    topics' runs, a topic's in every group that commits to it.
    """
    decode_head = _RUN_KEY_HEADS.get(_INT16.unpack_from(prefix)[0]) if len(prefix) >= 2 else None
    return None if decode_head is None else decode_head(prefix, names)


_INTS: dict[int, struct.Struct] = {}


def _ints_struct(n: int) -> struct.Struct:
    s = _INTS.get(n)
    if s is None:
        s = struct.Struct(f">{n}{_PARTITION_CODE}")
        if len(_INTS) < 1024:
            _INTS[n] = s
    return s
