"""Typed records of the offsets log and their byte layouts.

The layouts follow Kafka's ``__consumer_offsets`` topic (reference §4): a key is
an int16 record type followed by the key struct, a value is an int16 version
followed by the value struct, and a ``None`` value is a tombstone.  Keeping
Kafka's layout means a record can be read by anyone who knows Kafka's format,
and that compaction (latest value per key) has Kafka's meaning.

Record types:

* 0 and 1: offset commit (group, topic, partition).  We write type 1 with value
  v3, or v1 when the commit carries an expire timestamp (exactly what Kafka
  does; v1 has no leader epoch, so the epoch of such a commit is not kept).
* 2: group metadata (group), value v3.
* 100: Cohort's topic registry (topic name), value v0 = topic id + partitions.
  Kafka keeps topics elsewhere; 100 is far from Kafka's own types (0-15).
* 101: a SCRAM credential (user, mechanism), value v0 = salt, stored key,
  server key, iterations (Kafka's UserScramCredentialRecord; never the password).
* 102: an ACL binding (the whole binding is the key: a binding exists or not),
  value v0 is empty; deleting the binding writes a tombstone.

Every value layout is declared once, as a field list with version ranges, and
the per-version ``construct`` structs are derived from it.  Offset commits are
the hot record (millions of them at load time, one per committed partition on
the write path), so they also have a ``struct``-based fast path.  The fast path
is checked against the declared layout by property tests, and any input it
does not recognise falls back to the declared layout, which gives the precise
error.

Conventions: ``-1`` means "none" for leader epochs, expire timestamps and the
group state timestamp, as on the wire; ``protocol_type == ""`` means none.
"""
from __future__ import annotations

import struct
import sys
import uuid
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress, groupby
from operator import itemgetter, not_

from cohort.protocol.errors import EncodeError, ProtocolError
from cohort.protocol.schema import BYTES, INT32, INT64, STRING, Array, F, message
from cohort.protocol.schema import Struct as SchemaStruct

from construct import (
    Bytes,
    Construct,
    ConstructError,
    ExprAdapter,
    FocusedSeq,
    GreedyBytes,
    If,
    Int8sb,
    Int16sb,
    Int32sb,
    Int64sb,
    PascalString,
    Prefixed,
    PrefixedArray,
    Rebuild,
    Struct,
    this,
)

__all__ = [
    "OFFSET_COMMIT_KEY_TYPES",
    "GROUP_METADATA_KEY_TYPE",
    "TOPIC_KEY_TYPE",
    "OffsetCommitRecord",
    "OffsetCommitTombstone",
    "GroupMemberRecord",
    "GroupMetadataRecord",
    "GroupMetadataTombstone",
    "TopicRecord",
    "TopicTombstone",
    "ScramCredentialRecord",
    "ScramCredentialTombstone",
    "AclRecord",
    "AclTombstone",
    "Record",
    "RecordDecodeError",
    "encode_record",
    "encode_offset_commit",
    "decode_record",
    "decode_records",
    "decode_for_load",
    "OffsetCommitRun",
    "record_type",
]

OFFSET_COMMIT_KEY_TYPES = (0, 1)
GROUP_METADATA_KEY_TYPE = 2
TOPIC_KEY_TYPE = 100
SCRAM_CREDENTIAL_KEY_TYPE = 101
ACL_KEY_TYPE = 102
_OFFSET_COMMIT_WRITE_TYPE = 1


class RecordDecodeError(ValueError):
    """A key or value that is not a record we know: unknown type or version, or bad bytes."""


# --------------------------------------------------------------------------------------
# Typed records
# --------------------------------------------------------------------------------------
@dataclass(slots=True)
class OffsetCommitRecord:
    group: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(slots=True)
class OffsetCommitTombstone:
    group: str
    topic: str
    partition: int


@dataclass(slots=True)
class GroupMemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupMetadataRecord:
    group: str
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[GroupMemberRecord] = field(default_factory=list)


@dataclass(slots=True)
class GroupMetadataTombstone:
    group: str


@dataclass(slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    partitions: int


@dataclass(slots=True)
class TopicTombstone:
    name: str


@dataclass(slots=True)
class ScramCredentialRecord:
    user: str
    mechanism: int  # Kafka's ScramMechanism code: 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(slots=True)
class ScramCredentialTombstone:
    user: str
    mechanism: int


@dataclass(slots=True)
class AclRecord:
    # Kafka's wire codes (AclBinding): resource type, pattern type, operation, permission type
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


@dataclass(slots=True)
class AclTombstone:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


Record = (
    OffsetCommitRecord
    | OffsetCommitTombstone
    | GroupMetadataRecord
    | GroupMetadataTombstone
    | TopicRecord
    | TopicTombstone
    | ScramCredentialRecord
    | ScramCredentialTombstone
    | AclRecord
    | AclTombstone
)


# --------------------------------------------------------------------------------------
# Layout building blocks (Kafka's non-flexible encoding)
# --------------------------------------------------------------------------------------
KafkaString = PascalString(Int16sb, "utf8")
"""int16 length + UTF-8 bytes."""

_nullable_string_bytes = FocusedSeq(
    "data",
    "length" / Rebuild(Int16sb, lambda ctx: -1 if ctx.data is None else len(ctx.data)),
    "data" / If(this.length >= 0, Bytes(lambda ctx: max(ctx.length, 0))),
)
NullableKafkaString = ExprAdapter(
    _nullable_string_bytes,
    decoder=lambda obj, ctx: None if obj is None else obj.decode("utf-8"),
    encoder=lambda obj, ctx: None if obj is None else obj.encode("utf-8"),
)
"""int16 length (-1 = null) + UTF-8 bytes."""

KafkaBytes = Prefixed(Int32sb, GreedyBytes)
"""int32 length + bytes."""

UuidBytes = ExprAdapter(
    Bytes(16),
    decoder=lambda obj, ctx: uuid.UUID(bytes=bytes(obj)),
    encoder=lambda obj, ctx: obj.bytes,
)

ANY = range(0, 32767)


def _versions(first: int, last: int | None = None) -> range:
    return range(first, 32767 if last is None else last + 1)


@dataclass(frozen=True, slots=True)
class _Field:
    """One field of a declared layout, present in `versions`, else `default` on decode."""

    name: str
    layout: Construct | "_Layout"
    versions: range = ANY
    default: object = None


@dataclass(frozen=True, slots=True)
class _Layout:
    """A struct declared once with per-field version ranges (Kafka's JSON schema idea)."""

    name: str
    fields: tuple[_Field, ...]
    versions: range
    array: bool = False  # used as a field: an int32-counted array of this struct

    def struct(self, version: int) -> Construct:
        parts = []
        for f in self.fields:
            if version not in f.versions:
                continue
            sub = f.layout.struct(version) if isinstance(f.layout, _Layout) else f.layout
            if isinstance(f.layout, _Layout) and f.layout.array:
                sub = PrefixedArray(Int32sb, sub)
            parts.append(f.name / sub)
        return Struct(*parts)

    def defaults(self, version: int) -> dict[str, object]:
        return {f.name: f.default for f in self.fields if version not in f.versions}


# Keys: the layout is the same for every key version of a type.
_KEY_LAYOUTS: dict[int, Construct] = {
    0: Struct("group" / KafkaString, "topic" / KafkaString, "partition" / Int32sb),
    1: Struct("group" / KafkaString, "topic" / KafkaString, "partition" / Int32sb),
    GROUP_METADATA_KEY_TYPE: Struct("group" / KafkaString),
    TOPIC_KEY_TYPE: Struct("name" / KafkaString),
    SCRAM_CREDENTIAL_KEY_TYPE: Struct("user" / KafkaString, "mechanism" / Int8sb),
    ACL_KEY_TYPE: Struct(
        "resource_type" / Int8sb, "resource_name" / KafkaString, "pattern_type" / Int8sb,
        "principal" / KafkaString, "host" / KafkaString, "operation" / Int8sb, "permission" / Int8sb,
    ),
}
_ACL_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission")

OFFSET_COMMIT_VALUE = _Layout(
    "OffsetCommitValue",
    (
        _Field("offset", Int64sb),
        _Field("leader_epoch", Int32sb, _versions(3), -1),
        _Field("metadata", KafkaString),
        _Field("commit_timestamp", Int64sb),
        _Field("expire_timestamp", Int64sb, _versions(1, 1), -1),
    ),
    versions=_versions(0, 3),
)

# Kafka's GroupMetadataValue.json (versions 0-3, not flexible), declared with the protocol layer's
# schema machinery: its encoder and decoder are generated (a 10 000-member record is one of the
# largest things the coordinator writes; construct took ~0.2 s to build one).
GroupMetadataValue = message("GroupMetadataValue", None, "0-3", "none", [
    F("protocol_type", STRING),
    F("generation", INT32),
    F("protocol", STRING, nullable="0+", default=None),
    F("leader", STRING, nullable="0+", default=None),
    F("current_state_timestamp", INT64, "2+", default=-1),
    F("members", Array(SchemaStruct("MemberMetadata", [
        F("member_id", STRING),
        F("group_instance_id", STRING, "3+", nullable="3+", default=None),
        F("client_id", STRING),
        F("client_host", STRING),
        F("rebalance_timeout", INT32, "1+", default=-1),
        F("session_timeout", INT32),
        F("subscription", BYTES),
        F("assignment", BYTES),
    ]))),
])
_MemberMetadata = GroupMetadataValue.SCHEMA.struct.fields[-1].type.element.cls

TOPIC_VALUE = _Layout(
    "TopicValue",
    (
        _Field("topic_id", UuidBytes),
        _Field("partitions", Int32sb),
    ),
    versions=_versions(0, 0),
)

SCRAM_CREDENTIAL_VALUE = _Layout(
    "ScramCredentialValue",
    (
        _Field("salt", KafkaBytes),
        _Field("stored_key", KafkaBytes),
        _Field("server_key", KafkaBytes),
        _Field("iterations", Int32sb),
    ),
    versions=_versions(0, 0),
)

ACL_VALUE = _Layout("AclValue", (), versions=_versions(0, 0))

_VALUE_LAYOUTS: dict[int, _Layout] = {
    0: OFFSET_COMMIT_VALUE,
    1: OFFSET_COMMIT_VALUE,
    TOPIC_KEY_TYPE: TOPIC_VALUE,
    SCRAM_CREDENTIAL_KEY_TYPE: SCRAM_CREDENTIAL_VALUE,
    ACL_KEY_TYPE: ACL_VALUE,
}

# Derived once: (layout name, version) -> compiled construct.
_VALUE_STRUCTS: dict[tuple[str, int], Construct] = {
    (layout.name, v): layout.struct(v)
    for layout in (OFFSET_COMMIT_VALUE, TOPIC_VALUE, SCRAM_CREDENTIAL_VALUE, ACL_VALUE)
    for v in layout.versions
}

_GROUP_METADATA_WRITE_VERSION = 3
_TOPIC_WRITE_VERSION = 0

_INT16 = struct.Struct(">h")


# --------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------
def _build(construct: Construct, obj: dict, what: str) -> bytes:
    try:
        return construct.build(obj)
    except (ConstructError, UnicodeError, OverflowError, struct.error) as exc:
        raise ValueError(f"cannot encode {what}: {exc}") from None


def _value(layout: _Layout, version: int, obj: dict) -> bytes:
    return _INT16.pack(version) + _build(_VALUE_STRUCTS[(layout.name, version)], obj, layout.name)


def encode_record(rec: Record) -> tuple[bytes, bytes | None]:
    """Encode a typed record as (key, value); a tombstone has value None."""
    if type(rec) is OffsetCommitRecord:
        return _encode_offset_commit_fast(rec)
    if type(rec) is OffsetCommitTombstone:
        return _offset_commit_key(rec.group, rec.topic, rec.partition), None
    if type(rec) is GroupMetadataRecord:
        key = _INT16.pack(GROUP_METADATA_KEY_TYPE) + _build(
            _KEY_LAYOUTS[GROUP_METADATA_KEY_TYPE], {"group": rec.group}, "GroupMetadataKey"
        )
        try:
            value = _INT16.pack(_GROUP_METADATA_WRITE_VERSION) + GroupMetadataValue(
                protocol_type=rec.protocol_type, generation=rec.generation, protocol=rec.protocol,
                leader=rec.leader, current_state_timestamp=rec.current_state_timestamp,
                members=[_MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                         m.rebalance_timeout, m.session_timeout, bytes(m.subscription),
                                         bytes(m.assignment)) for m in rec.members],
            ).encode(_GROUP_METADATA_WRITE_VERSION)
        except EncodeError as exc:
            raise ValueError(f"cannot encode GroupMetadataValue: {exc}") from None
        return key, value
    if type(rec) is GroupMetadataTombstone:
        return _INT16.pack(GROUP_METADATA_KEY_TYPE) + _build(
            _KEY_LAYOUTS[GROUP_METADATA_KEY_TYPE], {"group": rec.group}, "GroupMetadataKey"
        ), None
    if type(rec) is TopicRecord:
        key = _topic_key(rec.name)
        value = _value(
            TOPIC_VALUE, _TOPIC_WRITE_VERSION, {"topic_id": rec.topic_id, "partitions": rec.partitions}
        )
        return key, value
    if type(rec) is TopicTombstone:
        return _topic_key(rec.name), None
    if type(rec) is ScramCredentialRecord or type(rec) is ScramCredentialTombstone:
        key = _INT16.pack(SCRAM_CREDENTIAL_KEY_TYPE) + _build(
            _KEY_LAYOUTS[SCRAM_CREDENTIAL_KEY_TYPE], {"user": rec.user, "mechanism": rec.mechanism},
            "ScramCredentialKey")
        if type(rec) is ScramCredentialTombstone:
            return key, None
        return key, _value(SCRAM_CREDENTIAL_VALUE, 0, {"salt": bytes(rec.salt), "stored_key": bytes(rec.stored_key),
                                                       "server_key": bytes(rec.server_key),
                                                       "iterations": rec.iterations})
    if type(rec) is AclRecord or type(rec) is AclTombstone:
        key = _INT16.pack(ACL_KEY_TYPE) + _build(
            _KEY_LAYOUTS[ACL_KEY_TYPE], {name: getattr(rec, name) for name in _ACL_FIELDS}, "AclKey")
        return key, None if type(rec) is AclTombstone else _value(ACL_VALUE, 0, {})
    raise TypeError(f"not a record: {rec!r}")


def _topic_key(name: str) -> bytes:
    return _INT16.pack(TOPIC_KEY_TYPE) + _build(_KEY_LAYOUTS[TOPIC_KEY_TYPE], {"name": name}, "TopicKey")


def _offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    prefix = _KEY_PREFIXES.get((group, topic))
    if prefix is None:
        prefix = _offset_commit_key_prefix(group, topic)
    try:
        return prefix + _INT32.pack(partition)
    except struct.error as exc:
        raise ValueError(f"cannot encode OffsetCommitKey: {exc}") from None


def _offset_commit_key_prefix(group: str, topic: str) -> bytes:
    """The key bytes before the partition number, kept for the next commit of the same (group, topic)."""
    g = group.encode("utf-8")
    t = topic.encode("utf-8")
    if len(g) > 32767 or len(t) > 32767:
        raise ValueError("cannot encode OffsetCommitKey: group or topic longer than 32767 bytes")
    prefix = b"".join((_INT16.pack(_OFFSET_COMMIT_WRITE_TYPE), _INT16.pack(len(g)), g, _INT16.pack(len(t)), t))
    if len(_KEY_PREFIXES) >= _KEY_PREFIX_CACHE_SIZE:
        _KEY_PREFIXES.clear()  # bounded; a busy (group, topic) is back after its next commit
    _KEY_PREFIXES[(group, topic)] = prefix
    return prefix


# (group, topic) -> encoded key prefix: the same few pairs commit again and again.
_KEY_PREFIXES: dict[tuple[str, str], bytes] = {}
_KEY_PREFIX_CACHE_SIZE = 16384
_INT32 = struct.Struct(">i")
_OC_V3_NO_METADATA = struct.Struct(">hqihq")  # version, offset, leader epoch, metadata length 0, commit timestamp
_OC_V3_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_OC_V1_HEAD = struct.Struct(">hqh")  # version, offset, metadata length
_INT64 = struct.Struct(">q")
_INT64x2 = struct.Struct(">qq")


def encode_offset_commit(group: str, topic: str, partition: int, offset: int, leader_epoch: int, metadata: str,
                         commit_timestamp: int, expire_timestamp: int) -> tuple[bytes, bytes]:
    """(key, value) of an `OffsetCommitRecord` with these fields, without building the record (the commit path).

    struct-based twin of the declared OffsetCommit layout (v3, or v1 with an
    expire timestamp); raises ValueError for what the layout cannot hold.
    """
    key = _offset_commit_key(group, topic, partition)
    try:
        if expire_timestamp == -1:
            if not metadata:
                return key, _OC_V3_NO_METADATA.pack(3, offset, leader_epoch, 0, commit_timestamp)
            md = metadata.encode("utf-8")
            if len(md) > 32767:
                raise ValueError("cannot encode OffsetCommitValue: metadata longer than 32767 bytes")
            return key, _OC_V3_HEAD.pack(3, offset, leader_epoch, len(md)) + md + _INT64.pack(commit_timestamp)
        md = metadata.encode("utf-8")
        if len(md) > 32767:
            raise ValueError("cannot encode OffsetCommitValue: metadata longer than 32767 bytes")
        return key, _OC_V1_HEAD.pack(1, offset, len(md)) + md + _INT64x2.pack(commit_timestamp, expire_timestamp)
    except struct.error as exc:
        raise ValueError(f"cannot encode OffsetCommitValue: {exc}") from None


def _encode_offset_commit_fast(rec: OffsetCommitRecord) -> tuple[bytes, bytes]:
    return encode_offset_commit(rec.group, rec.topic, rec.partition, rec.offset, rec.leader_epoch, rec.metadata,
                                rec.commit_timestamp, rec.expire_timestamp)


def encode_offset_commit_declared(rec: OffsetCommitRecord) -> tuple[bytes, bytes]:
    """The same encoding as `encode_record`, through the declared layout (used to check the fast path)."""
    key = _INT16.pack(_OFFSET_COMMIT_WRITE_TYPE) + _build(
        _KEY_LAYOUTS[1], {"group": rec.group, "topic": rec.topic, "partition": rec.partition}, "OffsetCommitKey"
    )
    version = 3 if rec.expire_timestamp == -1 else 1
    value = _value(
        OFFSET_COMMIT_VALUE,
        version,
        {
            "offset": rec.offset,
            "leader_epoch": rec.leader_epoch,
            "metadata": rec.metadata,
            "commit_timestamp": rec.commit_timestamp,
            "expire_timestamp": rec.expire_timestamp,
        },
    )
    return key, value


# --------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------
def record_type(key: bytes) -> int:
    """The record type of a key (its int16 prefix)."""
    if len(key) < 2:
        raise RecordDecodeError(f"record key too short ({len(key)} bytes)")
    return _INT16.unpack_from(key)[0]


_EXACT: dict[int, Construct] = {}


def _exact(construct: Construct) -> Construct:
    found = _EXACT.get(id(construct))
    if found is None:
        found = _EXACT[id(construct)] = Struct("body" / construct, "rest" / GreedyBytes)
    return found


def _parse_all(construct: Construct, data: bytes, what: str) -> dict:
    try:
        obj = _exact(construct).parse(data)
    except (ConstructError, UnicodeError) as exc:
        raise RecordDecodeError(f"bad {what}: {exc}") from None
    if obj.rest:
        raise RecordDecodeError(f"bad {what}: {len(obj.rest)} unexpected trailing bytes")
    return obj.body


def _decode_group_metadata_value(value: bytes):
    if len(value) < 2:
        raise RecordDecodeError(f"GroupMetadataValue: value too short ({len(value)} bytes)")
    version = _INT16.unpack_from(value)[0]
    if not 0 <= version <= 3:
        raise RecordDecodeError(f"GroupMetadataValue: unsupported value version {version}")
    try:
        decoded, end = GroupMetadataValue.decode(value, version, pos=2, with_end=True)
    except ProtocolError as exc:
        raise RecordDecodeError(str(exc)) from None
    if end != len(value):
        raise RecordDecodeError(f"GroupMetadataValue v{version}: {len(value) - end} bytes left over")
    return decoded


def _decode_value(rtype: int, value: bytes) -> tuple[_Layout, int, dict]:
    layout = _VALUE_LAYOUTS[rtype]
    if len(value) < 2:
        raise RecordDecodeError(f"{layout.name}: value too short ({len(value)} bytes)")
    version = _INT16.unpack_from(value)[0]
    if version not in layout.versions:
        raise RecordDecodeError(f"{layout.name}: unsupported value version {version}")
    obj = _parse_all(_VALUE_STRUCTS[(layout.name, version)], value[2:], f"{layout.name} v{version}")
    for name, default in layout.defaults(version).items():
        obj[name] = default
    return layout, version, obj


def decode_record(key: bytes, value: bytes | None) -> Record:
    """Decode one (key, value) into a typed record; RecordDecodeError if it is not one we know."""
    key = bytes(key)
    rtype = record_type(key)
    key_layout = _KEY_LAYOUTS.get(rtype)
    if key_layout is None:
        raise RecordDecodeError(f"unknown record type {rtype}")
    k = _parse_all(key_layout, key[2:], f"key of record type {rtype}")
    if rtype in OFFSET_COMMIT_KEY_TYPES:
        if value is None:
            return OffsetCommitTombstone(k.group, k.topic, k.partition)
        _, _, v = _decode_value(rtype, bytes(value))
        return OffsetCommitRecord(
            k.group, k.topic, k.partition, v["offset"], v["leader_epoch"], v["metadata"],
            v["commit_timestamp"], v["expire_timestamp"],
        )
    if rtype == GROUP_METADATA_KEY_TYPE:
        if value is None:
            return GroupMetadataTombstone(k.group)
        v = _decode_group_metadata_value(bytes(value))
        return GroupMetadataRecord(
            k.group, v.protocol_type, v.generation, v.protocol, v.leader, v.current_state_timestamp,
            [GroupMemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                               m.session_timeout, bytes(m.subscription), bytes(m.assignment)) for m in v.members],
        )
    if rtype == SCRAM_CREDENTIAL_KEY_TYPE:
        if value is None:
            return ScramCredentialTombstone(k.user, k.mechanism)
        _, _, v = _decode_value(rtype, bytes(value))
        return ScramCredentialRecord(k.user, k.mechanism, bytes(v["salt"]), bytes(v["stored_key"]),
                                     bytes(v["server_key"]), v["iterations"])
    if rtype == ACL_KEY_TYPE:
        fields = [k[name] for name in _ACL_FIELDS]
        if value is None:
            return AclTombstone(*fields)
        _decode_value(rtype, bytes(value))
        return AclRecord(*fields)
    # TOPIC_KEY_TYPE
    if value is None:
        return TopicTombstone(k.name)
    _, _, v = _decode_value(rtype, bytes(value))
    return TopicRecord(k.name, v["topic_id"], v["partitions"])


_OC_KEY_PREFIX = struct.Struct(">hh")  # type, group length
_OC_V3 = struct.Struct(">qih")  # offset, leader epoch, metadata length (after the version)
_OC_V1 = struct.Struct(">qh")  # offset, metadata length (after the version)


def decode_records(pairs: Iterable[tuple[bytes, bytes | None]]) -> Iterator[Record]:
    """Decode many (key, value) pairs, the load path.

    Offset commits (key type 0/1 with value v1 or v3) take a struct-based fast
    path and share one str object per distinct group and topic name, which
    keeps the in-memory tables small; everything else goes through
    `decode_record`.
    """
    names: dict[bytes, str] = {}
    unpack_prefix = _OC_KEY_PREFIX.unpack_from
    unpack_h = _INT16.unpack_from
    unpack_i = _INT32.unpack_from
    unpack_q = _INT64.unpack_from
    unpack_qq = _INT64x2.unpack_from
    unpack_v3 = _OC_V3.unpack_from
    unpack_v1 = _OC_V1.unpack_from
    for key, value in pairs:
        if value is not None and len(key) >= 10 and len(value) >= 24:
            rtype, glen = unpack_prefix(key)
            if rtype in (0, 1) and glen >= 0:
                tpos = 4 + glen
                tlen = unpack_h(key, tpos)[0] if len(key) >= tpos + 2 else -1
                if tlen >= 0 and len(key) == tpos + 6 + tlen:
                    version = unpack_h(value)[0]
                    if version == 3:
                        offset, epoch, mlen = unpack_v3(value, 2)
                        if mlen >= 0 and len(value) == 24 + mlen:
                            ts = unpack_q(value, 16 + mlen)[0]
                            exp = -1
                        else:
                            version = -1
                    elif version == 1:
                        offset, mlen = unpack_v1(value, 2)
                        epoch = -1
                        if mlen >= 0 and len(value) == 28 + mlen:
                            ts, exp = unpack_qq(value, 12 + mlen)
                        else:
                            version = -1
                    if version == 3 or version == 1:
                        try:
                            gb = key[4:tpos]
                            group = names.get(gb)
                            if group is None:
                                group = names[bytes(gb)] = sys.intern(bytes(gb).decode("utf-8"))
                            tb = key[tpos + 2 : tpos + 2 + tlen]
                            topic = names.get(tb)
                            if topic is None:
                                topic = names[bytes(tb)] = sys.intern(bytes(tb).decode("utf-8"))
                            if mlen == 0:
                                metadata = ""
                            else:
                                start = 16 if version == 3 else 12
                                metadata = bytes(value[start : start + mlen]).decode("utf-8")
                        except UnicodeDecodeError:
                            pass  # the declared layout reports it precisely
                        else:
                            partition = unpack_i(key, tpos + 2 + tlen)[0]
                            yield OffsetCommitRecord(group, topic, partition, offset, epoch, metadata, ts, exp)
                            continue
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

    @property
    def leader_epochs(self) -> array:
        return self.slots[1::4]

    @property
    def commit_timestamps(self) -> array:
        return self.slots[2::4]

    @property
    def expire_timestamps(self) -> array:
        return self.slots[3::4]

    def records(self) -> Iterator[OffsetCommitRecord]:
        s = self.slots
        for i, p in enumerate(self.partitions):
            yield OffsetCommitRecord(self.group, self.topic, p, s[4 * i], s[4 * i + 1], "", s[4 * i + 2],
                                     s[4 * i + 3])


_KEY_PREFIX = itemgetter(slice(0, -4))
_KEY_PARTITION = itemgetter(slice(-4, None))
_FIRST = itemgetter(0)
_SECOND = itemgetter(1)
_IS_24 = (24).__eq__
_ONLY_24 = {24}
# Bytes 0-1 (version) and 14-15 (metadata length) of an OffsetCommitValue v3 without metadata.
_V3_EMPTY_MARKERS = (0, 3, 0, 0).__eq__
_SIGN_BYTE = bytes(0 if b < 0x80 else 0xFF for b in range(256))  # top byte of an int32 -> its sign extension


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
    values = list(map(_SECOND, pairs))
    try:
        sizes = set(map(len, values))
    except TypeError:  # a None (tombstone) value: not a live record list, take the general path
        yield from decode_records(pairs)
        return
    if sizes != _ONLY_24:
        fixed = list(map(_IS_24, map(len, values)))
        yield from decode_records(compress(pairs, map(not_, fixed)))
        pairs = list(compress(pairs, fixed))
        values = list(map(_SECOND, pairs))
    blob = b"".join(values)
    n = len(pairs)
    if not (blob[0::24].count(0) == blob[1::24].count(3) == blob[14::24].count(0) == blob[15::24].count(0) == n):
        markers = list(map(_V3_EMPTY_MARKERS, zip(blob[0::24], blob[1::24], blob[14::24], blob[15::24])))
        yield from decode_records(compress(pairs, map(not_, markers)))
        pairs = list(compress(pairs, markers))
        blob = b"".join(map(_SECOND, pairs))
        n = len(pairs)
    if not n:
        return
    slots = _v3_values_to_slots(blob, n)
    keys = list(map(_FIRST, pairs))
    try:
        partitions = _ints_struct(n).unpack(b"".join(map(_KEY_PARTITION, keys)))
    except struct.error:  # a key shorter than 4 bytes: not an offset commit
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


def _v3_values_to_slots(blob: bytes, n: int) -> array:
    """n concatenated 24-byte OffsetCommitValue v3 (metadata "") -> int64 (offset, epoch, commit ts, -1) x n.

    Value layout: version int16 @0, offset int64 @2, leader epoch int32 @10,
    metadata length int16 @14, commit timestamp int64 @16.  Each output field
    is assembled big-endian with strided slice copies, then byte-swapped.
    """
    out = bytearray(32 * n)
    for j in range(8):
        out[j::32] = blob[2 + j :: 24]  # offset
        out[16 + j :: 32] = blob[16 + j :: 24]  # commit timestamp
    sign = blob[10::24].translate(_SIGN_BYTE)
    for j in range(4):
        out[8 + j :: 32] = sign  # leader epoch, sign-extended to 64 bits
        out[12 + j :: 32] = blob[10 + j :: 24]
    none = b"\xff" * n
    for j in range(8):
        out[24 + j :: 32] = none  # expire timestamp: -1
    slots = array("q")
    slots.frombytes(out)
    if sys.byteorder == "little":
        slots.byteswap()
    return slots


def _offset_commit_prefix(prefix: bytes, names: dict[bytes, str]) -> tuple[str, str] | None:
    """(group, topic) if `prefix` is an offset-commit key minus its partition, else None.

    `names` caches decoded names by their bytes: a group's name recurs in every
    one of its topics' runs, a topic's in every group that commits to it.
    """
    if len(prefix) < 6:
        return None
    rtype, glen = _OC_KEY_PREFIX.unpack_from(prefix)
    if rtype not in OFFSET_COMMIT_KEY_TYPES or glen < 0 or len(prefix) < 6 + glen:
        return None
    tlen = _INT16.unpack_from(prefix, 4 + glen)[0]
    if len(prefix) != 6 + glen + tlen:
        return None
    gb = prefix[4 : 4 + glen]
    tb = prefix[6 + glen :]
    try:
        group = names.get(gb)
        if group is None:
            # Interned: one str object per name however many runs, partitions and groups use it.
            group = names[gb] = sys.intern(gb.decode("utf-8"))
        topic = names.get(tb)
        if topic is None:
            topic = names[tb] = sys.intern(tb.decode("utf-8"))
    except UnicodeDecodeError:
        return None
    return group, topic


_INTS: dict[int, struct.Struct] = {}


def _ints_struct(n: int) -> struct.Struct:
    s = _INTS.get(n)
    if s is None:
        s = struct.Struct(f">{n}i")
        if len(_INTS) < 1024:
            _INTS[n] = s
    return s
