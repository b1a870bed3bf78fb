"""How cluster mode stores a record value in etcd: offset commits packed, everything else as the log has it.

Why: every acknowledged commit leaves one revision in etcd's history until compaction, about 17 bytes
of revision, 16 of bolt's element header, some 15 of protobuf and the key and value themselves. An offset
commit's value in the log's record format is 24 bytes (v3, no metadata) of mostly zero bytes: a version,
an int64 offset, an int32 leader epoch, the metadata's length and an int64 timestamp. Packed, each
integer takes only the bytes it needs, so the value is about 9 bytes (bench/etcd_space_bench.py).

Packed layout (a record value's first byte is 0x00, its int16 version's high byte, so 0x80 and up is
free to mark it), a 16-bit header then the integers, big-endian in the fewest bytes:

    bits 15-14  11
    bit  13     value version: 0 for 1, 1 for 3
    bit  12     commit timestamp counted from 2020-01-01T00:00Z (five bytes until 2054), not plus one
    bits 11-8   bytes of offset + 1
    version 3:  bits 7-5 bytes of leader epoch + 1, bits 4-1 bytes of the commit timestamp, bit 0 zero
    version 1:  bits 7-4 bytes of the commit timestamp, bits 3-0 bytes of expire timestamp + 1
    offset + 1, leader epoch + 1 (version 3), commit timestamp, expire timestamp + 1 (version 1)
    metadata (UTF-8, the rest)

Integers are stored plus one so that Kafka's "none" (-1) takes no byte. A value this cannot pack
exactly (another version, an integer below -1) is stored as it is; `from_etcd` gives the log's bytes back
exactly, so everything past the store sees record values byte for byte. It also reads the earlier packed
layout (first byte 0x81 or 0x83: a byte of version, two of lengths, timestamps plus one from 1970), which
etcd may still hold.
"""
from __future__ import annotations

import struct

_OFFSETS = b"o/"
_PACKED = 0x80
_LAYOUT = 0xC000  # the header's top two bits; 0x80-0xBF as the first byte is the earlier layout
_V3 = 0x2000
_FROM_2020 = 0x1000
MS_2020 = 1_577_836_800_000  # 2020-01-01T00:00:00Z in ms since 1970
_V3_HEAD = struct.Struct(">hqih")  # version, offset, leader epoch, metadata length
_V1_HEAD = struct.Struct(">hqh")  # version, offset, metadata length
_HEADER = struct.Struct(">H")
_INT64 = struct.Struct(">q")
_TWO_INT64 = struct.Struct(">qq")


def _size(n: int) -> int:
    return (n.bit_length() + 7) >> 3


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
    header = _LAYOUT
    if commit >= MS_2020:
        header |= _FROM_2020
        c = commit - MS_2020
    else:
        c = commit + 1
    o, e, x = offset + 1, epoch + 1, expire + 1
    lo, le, lc, lx = _size(o), _size(e), _size(c), _size(x)
    if version == 3:
        header |= _V3 | lo << 8 | le << 5 | lc << 1
        fields = (o.to_bytes(lo, "big"), e.to_bytes(le, "big"), c.to_bytes(lc, "big"))
    else:
        header |= lo << 8 | lc << 4 | lx
        fields = (o.to_bytes(lo, "big"), c.to_bytes(lc, "big"), x.to_bytes(lx, "big"))
    return b"".join((_HEADER.pack(header), *fields, metadata))


def from_etcd(stored: bytes) -> bytes:
    """The record value the bytes `stored` in etcd stand for (the inverse of `for_etcd`)."""
    if not stored or stored[0] < _PACKED:
        return stored
    if stored[0] >= _LAYOUT >> 8:
        (header,) = _HEADER.unpack_from(stored)
        version, lo = (3 if header & _V3 else 1), header >> 8 & 15
        le, lc, lx = (header >> 5 & 7, header >> 1 & 15, 0) if version == 3 else (0, header >> 4 & 15, header & 15)
        commit_from, at = (MS_2020 if header & _FROM_2020 else -1), 2
    else:  # the earlier layout: 0x80 | version, lengths (offset << 4 | epoch, commit << 4 | expire)
        version, lo, le, lc, lx = stored[0] & 0x7F, stored[1] >> 4, stored[1] & 15, stored[2] >> 4, stored[2] & 15
        commit_from, at = -1, 3
    numbers = []
    for size in (lo, le, lc, lx):
        numbers.append(int.from_bytes(stored[at:at + size], "big"))
        at += size
    offset, epoch, commit, expire = numbers[0] - 1, numbers[1] - 1, numbers[2] + commit_from, numbers[3] - 1
    metadata = stored[at:]
    if version == 3:
        return b"".join((_V3_HEAD.pack(3, offset, epoch, len(metadata)), metadata, _INT64.pack(commit)))
    if version == 1:
        return b"".join((_V1_HEAD.pack(1, offset, len(metadata)), metadata, _TWO_INT64.pack(commit, expire)))
    raise ValueError(f"not a packed offset commit value (version {version})")
