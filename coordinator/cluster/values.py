"""How cluster mode stores a record value in etcd: offset commits packed, everything else as the log has it.

Why: every acknowledged commit leaves one revision in etcd's history until compaction, about 17 bytes
of revision, 16 of bolt's element header, some 15 of protobuf and the key and value themselves. An offset
commit's value in the log's record format is 24 bytes (v3, no metadata) of mostly zero bytes: a version,
an int64 offset, an int32 leader epoch, the metadata's length and an int64 timestamp. Packed, each
integer takes only the bytes it needs, so the value is about 12 bytes (bench/etcd_space_bench.py).

Packed layout (a record value's first byte is 0x00, its int16 version's high byte, so 0x80 and up is
free to mark it):

    0x80 | value version (1 or 3)
    lengths: offset << 4 | leader epoch      (bytes each integer takes; 0 for -1)
    lengths: commit timestamp << 4 | expire timestamp
    offset + 1, leader epoch + 1, commit timestamp + 1, expire timestamp + 1   (big-endian, minimal)
    metadata (UTF-8, the rest)

Integers are stored plus one so that Kafka's "none" (-1) takes no byte. A value this cannot pack
exactly (another version, an integer below -1) is stored as it is; `unpack` gives the log's bytes back
exactly, so everything past the store sees record values byte for byte.
"""
from __future__ import annotations

import struct

_OFFSETS = b"o/"
_PACKED = 0x80
_V3_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_V1_HEAD = struct.Struct(">hqh")  # version, offset, metadata length
_INT64 = struct.Struct(">q")
_TWO_INT64 = struct.Struct(">qq")


def for_etcd(etcd_key: bytes, value: bytes) -> bytes:
    """The bytes etcd keeps for the record value `value` stored at `etcd_key`."""
    if etcd_key[:2] != _OFFSETS or len(value) < 20 or value[0] != 0:
        return value
    version = value[1]
    if version == 3:
        _, offset, epoch, length = _V3_HEAD.unpack_from(value)
        if length < 0 or len(value) != 24 + length:
            return value
        (commit,) = _INT64.unpack_from(value, 16 + length)
        metadata, expire = value[16:16 + length], -1
    elif version == 1:
        _, offset, length = _V1_HEAD.unpack_from(value)
        if length < 0 or len(value) != 28 + length:
            return value
        commit, expire = _TWO_INT64.unpack_from(value, 12 + length)
        metadata, epoch = value[12:12 + length], -1
    else:
        return value
    if min(offset, epoch, commit, expire) < -1:
        return value
    o, e, c, x = offset + 1, epoch + 1, commit + 1, expire + 1
    lo, le, lc, lx = (o.bit_length() + 7) >> 3, (e.bit_length() + 7) >> 3, (c.bit_length() + 7) >> 3, \
        (x.bit_length() + 7) >> 3
    return b"".join((bytes((_PACKED | version, lo << 4 | le, lc << 4 | lx)), o.to_bytes(lo, "big"),
                     e.to_bytes(le, "big"), c.to_bytes(lc, "big"), x.to_bytes(lx, "big"), metadata))


def from_etcd(stored: bytes) -> bytes:
    """The record value the bytes `stored` in etcd stand for (the inverse of `for_etcd`)."""
    if not stored or stored[0] < _PACKED:
        return stored
    version = stored[0] & 0x7F
    lo, le, lc, lx = stored[1] >> 4, stored[1] & 15, stored[2] >> 4, stored[2] & 15
    at = 3
    offset = int.from_bytes(stored[at:at + lo], "big") - 1
    at += lo
    epoch = int.from_bytes(stored[at:at + le], "big") - 1
    at += le
    commit = int.from_bytes(stored[at:at + lc], "big") - 1
    at += lc
    expire = int.from_bytes(stored[at:at + lx], "big") - 1
    metadata = stored[at + lx:]
    if version == 3:
        return b"".join((_V3_HEAD.pack(3, offset, epoch, len(metadata)), metadata, _INT64.pack(commit)))
    if version == 1:
        return b"".join((_V1_HEAD.pack(1, offset, len(metadata)), metadata, _TWO_INT64.pack(commit, expire)))
    raise ValueError(f"not a packed offset commit value (version {version})")
