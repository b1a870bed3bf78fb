"""Which offsets partition owns a group: Kafka's `Utils.abs(groupId.hashCode()) % partitions`."""
from __future__ import annotations

_MIN_INT = -(1 << 31)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: 31*h + c over UTF-16 code units, wrapping at 32 bits."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int = 50) -> int:
    """The coordinator partition of `group_id` (Kafka's `Utils.abs`: MIN_VALUE maps to 0)."""
    h = java_string_hash(group_id)
    return (0 if h == _MIN_INT else abs(h)) % num_partitions
