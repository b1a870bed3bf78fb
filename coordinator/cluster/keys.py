"""Where cluster mode keeps things in etcd: the one declaration of the key layout.

    nodes/<node-id>                           -> "host:port" (advertised, its first listener), then a line
                                                 "NAME=host:port" per listener; under the node's lease
    seen/<node-id>                            -> "host:port" (advertised), without a lease: written at each
                                                 registration, deleted by a graceful stop, so `cohort cluster
                                                 status` can tell a node whose lease lapsed from one that left
    owner/<p>                                 -> "<node-id>", under the owner's lease; epoch = create revision
    w/<p>                                     -> the partition's write fence: every write transaction for p
                                                 compares its mod revision; written at each load and when a
                                                 write's outcome is in doubt (see cluster/store.py)
    load/<p>                                  -> the owner's partition lifecycle state ("loading", "loaded",
                                                 "releasing"), under its lease (for `cohort cluster status`)
    o/<p>/<group>/<topic>/<partition>         -> offset commit value      (record types 0, 1)
    g/<p>/<group>                             -> group metadata value     (record type 2)
    t/0/<topic>                               -> topic registry value     (record type 100; cluster-wide,
                                                 not part of partition 0's data: see cluster/node.py)
    t/0/<topic>/<partition>                   -> reported end offset value (record type 105; with the
                                                 topic registry, under the same watch)
    s/<hex of the record key>                 -> SCRAM credential / ACL binding value (record types 101,
                                                 102; cluster-wide like t/0/, see cluster/node.py)
    r/<p>/<hex of the record key>             -> any other record type's value

Values are the local log's record values (`cohort.coordinator.records.types`), offset commits packed into
fewer bytes (`cohort.coordinator.cluster.values`, read back byte for byte); the record key is rebuilt
from the etcd key on load. Group and topic names are percent-encoded so that a "/" in a
name cannot be confused with a separator, and the keys stay readable with `etcdctl get --prefix`.
"""
from __future__ import annotations

import struct
from urllib.parse import quote, unquote

from cohort.coordinator.contracts.partition_lifecycle import PartitionLifecycle
from cohort.coordinator.records.types import (
    GROUP_METADATA_KEY_TYPE,
    OFFSET_COMMIT_KEY_TYPES,
    SECURITY_KEY_TYPES,
    TOPIC_KEY_TYPE,
    END_OFFSET_KEY_TYPE,
    EndOffsetTombstone,
    GroupMetadataTombstone,
    OffsetCommitTombstone,
    TopicTombstone,
    encode_record,
)

NODES = b"nodes/"
SEEN = b"seen/"
OWNERS = b"owner/"
LOADS = b"load/"
WRITES = b"w/"
# What an owner publishes at load/<p>: the names of its partition lifecycle states while it holds the key.
LOAD_STATES = tuple(state.value for state in (PartitionLifecycle.LOADING, PartitionLifecycle.LOADED,
                                              PartitionLifecycle.FAILED, PartitionLifecycle.RELEASING))
DATA_PREFIXES = (b"o/", b"g/", b"t/", b"r/")
TOPICS = b"t/0/"
SECURITY = b"s/"

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def node_key(node_id: int) -> bytes:
    return NODES + str(node_id).encode()


def seen_key(node_id: int) -> bytes:
    return SEEN + str(node_id).encode()


def owner_key(partition: int) -> bytes:
    return OWNERS + str(partition).encode()


def write_fence_key(partition: int) -> bytes:
    return WRITES + str(partition).encode()


def load_key(partition: int) -> bytes:
    return LOADS + str(partition).encode()


def id_of(key: bytes, prefix: bytes) -> int | None:
    """The number after `prefix` in `nodes/<id>`, `seen/<id>`, `owner/<p>` or `load/<p>`, or None if it is not one."""
    tail = key[len(prefix):]
    return int(tail) if key.startswith(prefix) and tail.isdigit() else None


def partition_prefixes(partition: int) -> list[bytes]:
    """The etcd prefixes holding partition `partition`'s records (the topic registry is not one)."""
    return [kind + str(partition).encode() + b"/" for kind in DATA_PREFIXES if kind != b"t/"]


def _name(text: str) -> bytes:
    return quote(text, safe="").encode()


def _read_string(key: bytes, at: int) -> tuple[str, int]:
    (length,) = _INT16.unpack_from(key, at)
    end = at + 2 + length
    if length < 0 or end > len(key):
        raise ValueError("truncated string")
    return key[at + 2:end].decode("utf-8"), end


def etcd_key(partition: int, record_key: bytes) -> bytes:
    """The etcd key of a record key of the offsets log (Kafka's __consumer_offsets key layout)."""
    p = str(partition).encode()
    try:
        (rtype,) = _INT16.unpack_from(record_key)
        if rtype in OFFSET_COMMIT_KEY_TYPES:
            group, at = _read_string(record_key, 2)
            topic, at = _read_string(record_key, at)
            if len(record_key) == at + 4:
                (index,) = _INT32.unpack_from(record_key, at)
                return b"o/%s/%s/%s/%d" % (p, _name(group), _name(topic), index)
        elif rtype == GROUP_METADATA_KEY_TYPE:
            group, at = _read_string(record_key, 2)
            if at == len(record_key):
                return b"g/%s/%s" % (p, _name(group))
        elif rtype == TOPIC_KEY_TYPE:
            name, at = _read_string(record_key, 2)
            if at == len(record_key):
                return b"t/%s/%s" % (p, _name(name))
        elif rtype == END_OFFSET_KEY_TYPE:
            topic, at = _read_string(record_key, 2)
            if len(record_key) == at + 4:
                (index,) = _INT32.unpack_from(record_key, at)
                return b"t/%s/%s/%d" % (p, _name(topic), index)
        elif rtype in SECURITY_KEY_TYPES:
            return SECURITY + record_key.hex().encode()
    except (struct.error, ValueError, UnicodeDecodeError):
        pass
    return b"r/%s/%s" % (p, record_key.hex().encode())


def record_key(key: bytes) -> bytes:
    """The offsets-log record key an etcd data key stands for (inverse of `etcd_key`)."""
    kind, _, rest = key.partition(b"/")
    if kind == b"s":
        return bytes.fromhex(rest.decode())
    _, _, path = rest.partition(b"/")
    if kind == b"o":
        group, topic, index = path.split(b"/")
        return encode_record(OffsetCommitTombstone(unquote(group.decode()), unquote(topic.decode()), int(index)))[0]
    if kind == b"g":
        return encode_record(GroupMetadataTombstone(unquote(path.decode())))[0]
    if kind == b"t":
        name, _, index = path.partition(b"/")  # a name is percent-encoded: "/" only before a partition
        if index:
            return encode_record(EndOffsetTombstone(unquote(name.decode()), int(index)))[0]
        return encode_record(TopicTombstone(unquote(name.decode())))[0]
    if kind == b"r":
        return bytes.fromhex(path.decode())
    raise ValueError(f"not a Cohort data key: {key!r}")
