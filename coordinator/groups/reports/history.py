"""A group's offset history, read back from the log: every commit within `offsets.history.retention.ms`.

Compaction keeps every record younger than the history window (then the latest per key, as Kafka), so
the log itself is the history; nothing is kept in memory. The storage hands over the records of the
group's keys, oldest first, with the time each batch was appended (`Store.history`); this module turns
them into commit events and answers "what had the group committed at time T" (the undo of a reset).

Who made a commit comes from the type-104 source record written just before the commits of each
OffsetCommit request (same append, same timestamp). Only the local log keeps history: in cluster mode
etcd holds the latest value per key and nothing else, and the report says so.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cohort.coordinator.records.types import (
    OFFSET_COMMIT_KEY_TYPES,
    OFFSET_COMMIT_SOURCE_KEY_TYPE,
    OffsetCommitRecord,
    OffsetCommitSourceRecord,
    OffsetCommitSourceTombstone,
    OffsetCommitTombstone,
    decode_record,
    encode_record,
)


@dataclass(slots=True, frozen=True)
class CommitEvent:
    """One commit (or deletion: `offset` None) of one partition, with who made it when known."""

    time_ms: int           # the commit's timestamp (the coordinator's clock); a deletion: when the log took it
    topic: str
    partition: int
    offset: int | None
    metadata: str
    member_id: str | None  # None: not recorded (history off at the time, or a deletion)
    client_id: str | None
    client_host: str | None
    generation: int | None  # -1: a commit outside group management (admin tool, simple consumer)

    def to_json(self) -> dict:
        return {"time_ms": self.time_ms, "topic": self.topic, "partition": self.partition, "offset": self.offset,
                "metadata": self.metadata, "member_id": self.member_id, "client_id": self.client_id,
                "client_host": self.client_host, "generation": self.generation}


# The record types whose history compaction keeps (offset commits and who made them), as key prefixes.
HISTORY_KEY_PREFIXES = tuple(t.to_bytes(2, "big", signed=True)
                             for t in (*OFFSET_COMMIT_KEY_TYPES, OFFSET_COMMIT_SOURCE_KEY_TYPE))


def group_key_prefixes(group: str) -> tuple[bytes, ...]:
    """The key prefixes of a group's commits and commit sources (a key is int16 type, then the group)."""
    source_key, _ = encode_record(OffsetCommitSourceTombstone(group))
    return (source_key, *(t.to_bytes(2, "big", signed=True) + source_key[2:] for t in OFFSET_COMMIT_KEY_TYPES))


def commit_events(group: str, records: Iterable[tuple[int, bytes, bytes | None]], *, topic: str | None = None,
                  partition: int | None = None, since_ms: int | None = None) -> list[CommitEvent]:
    """(append time, key, value) of the group's keys, oldest first -> its commit events, oldest first."""
    events: list[CommitEvent] = []
    source: OffsetCommitSourceRecord | None = None
    for time_ms, key, value in records:
        rec = decode_record(key, value)
        kind = type(rec)
        if kind is OffsetCommitSourceRecord:
            source = rec
            continue
        if kind not in (OffsetCommitRecord, OffsetCommitTombstone) or rec.group != group:
            continue
        if (topic is not None and rec.topic != topic) or (partition is not None and rec.partition != partition):
            continue
        at = rec.commit_timestamp if kind is OffsetCommitRecord and rec.commit_timestamp >= 0 else time_ms
        if since_ms is not None and at < since_ms:
            continue
        if kind is OffsetCommitTombstone:
            events.append(CommitEvent(at, rec.topic, rec.partition, None, "", None, None, None, None))
            continue
        # The group's last source record before this commit: the coordinator writes one when the committer
        # changes (and after every load), so it names who made every commit up to the next one.
        by = source
        events.append(CommitEvent(
            at, rec.topic, rec.partition, rec.offset, rec.metadata,
            by.member_id if by else None, by.client_id if by else None, by.client_host if by else None,
            by.generation if by else None))
    return events


def offsets_at(events: Iterable[CommitEvent], when_ms: int) -> dict[tuple[str, int], int | None]:
    """What each partition's committed offset was at `when_ms` (None: it had none, or it was deleted)."""
    at: dict[tuple[str, int], int | None] = {}
    for e in events:
        key = (e.topic, e.partition)
        if e.time_ms <= when_ms:
            at[key] = e.offset
        else:
            at.setdefault(key, None)
    return at
