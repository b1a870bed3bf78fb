"""The consumer protocol carried inside JoinGroup metadata and SyncGroup assignments.

For protocol type "consumer" the bytes are an int16 version followed by a
non-flexible struct. The coordinator treats them as opaque, but reads the
subscribed topics (for OffsetDelete and offset expiry); clients encode and
decode them for their assignors.
"""
from __future__ import annotations

import struct

from cohort.protocol.errors import ProtocolError
from cohort.protocol.schema import F, Array, Struct, message, INT32, STRING, BYTES

ConsumerProtocolSubscription = message("ConsumerProtocolSubscription", None, "0-3", "none", [
    F("topics", Array(STRING)),
    F("user_data", BYTES, nullable="0+", default=None),
    F("owned_partitions", Array(Struct("TopicPartition", [
        F("topic", STRING, "1+"),
        F("partitions", Array(INT32), "1+"),
    ])), "1+"),
    F("generation_id", INT32, "2+", default=-1),
    F("rack_id", STRING, "3+", nullable="3+", default=None),
])

ConsumerProtocolAssignment = message("ConsumerProtocolAssignment", None, "0-3", "none", [
    F("assigned_partitions", Array(Struct("TopicPartition", [
        F("topic", STRING),
        F("partitions", Array(INT32)),
    ]))),
    F("user_data", BYTES, nullable="0+", default=None),
])

_VERSION = struct.Struct(">h")


def _encode(msg, version: int) -> bytes:
    return _VERSION.pack(version) + msg.encode(version)


def _decode(cls, data: bytes):
    if len(data) < 2:
        raise ProtocolError(f"{cls.__name__}: missing version prefix")
    (version,) = _VERSION.unpack_from(data)
    if version < 0:
        raise ProtocolError(f"{cls.__name__}: negative version {version}")
    # Kafka reads a newer version with the newest layout it knows: later
    # versions only append fields.
    return cls.decode(data, min(version, cls.MAX_VERSION), pos=2)


def encode_subscription(sub, version: int = 3) -> bytes:
    return _encode(sub, version)


def decode_subscription(data: bytes):
    return _decode(ConsumerProtocolSubscription, bytes(data))


def encode_assignment(assignment, version: int = 3) -> bytes:
    return _encode(assignment, version)


def decode_assignment(data: bytes):
    return _decode(ConsumerProtocolAssignment, bytes(data))
