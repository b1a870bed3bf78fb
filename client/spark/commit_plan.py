"""What the `cohort` sink commits for one micro-batch, decided without Spark or sockets.

Spark replays a micro-batch under the same batch id after a crash between the
sink's commit and the checkpoint's ``commits/N`` file (measured: the same batch
was committed twice with identical content).  The sink therefore stamps every
offset it commits with a *commit marker* (the Spark query id and the batch id)
in the committed metadata, and before committing batch N it reads the group's
committed offsets back:

* a marker of the same query with a batch id >= N means batch N already took
  effect: the batch is skipped (exactly-once effect by batch id);
* a marker of another query means another Spark query owns the group: refused,
  unless the sink was told to take the group over, in which case the other
  query's partitions are re-stamped (same offsets) so the group has one owner;
* a committed offset is never moved backwards: a partition whose committed
  offset is already ahead keeps it (and gets the new marker).

Everything here is a plain function over plain values so it is tested without
Spark (tests/spark/test_commit_plan.py).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cohort.client.topic_partition import TopicPartition

__all__ = [
    "CommitMarker",
    "CommittedOffset",
    "BatchCommitPlan",
    "QueryConflict",
    "next_offsets",
    "merge_next_offsets",
    "plan_batch_commit",
]

_MARKER_PREFIX = "cohort-spark:"
_MAX_PARTITION = 2**31 - 1


@dataclass(frozen=True, slots=True)
class CommitMarker:
    """The (query id, batch id) stamped on every offset the sink commits."""

    query_id: str
    batch_id: int

    def encode(self) -> str:
        # Compact and prefixed, so a consumer reading the metadata sees where it came from,
        # and far below Kafka's default offset.metadata.max.bytes (4096).
        body = json.dumps({"query": self.query_id, "batch": self.batch_id}, separators=(",", ":"))
        return _MARKER_PREFIX + body

    @classmethod
    def decode(cls, metadata: str | None) -> "CommitMarker | None":
        """The marker in `metadata`, or None when the metadata is not one of ours."""
        if not metadata or not metadata.startswith(_MARKER_PREFIX):
            return None
        try:
            body = json.loads(metadata[len(_MARKER_PREFIX):])
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        query, batch = body.get("query"), body.get("batch")
        if not isinstance(query, str) or not isinstance(batch, int) or isinstance(batch, bool):
            return None
        return cls(query, batch)


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A committed offset as OffsetFetch returns it."""

    offset: int
    metadata: str | None = None


class QueryConflict(Exception):
    """Another Spark query's commits own the group, and take-over was not allowed."""


@dataclass(frozen=True, slots=True)
class BatchCommitPlan:
    """The decision for one batch: skip it, or commit `offsets` (all stamped with `marker`)."""

    marker: CommitMarker
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    skipped_replay_of: int | None = None  # the stored batch id that makes this batch a replay
    held_back: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)  # tp -> (batch, committed)
    taken_over_from: frozenset[str] = frozenset()

    @property
    def skip(self) -> bool:
        return self.skipped_replay_of is not None


def next_offsets(rows: Iterable[tuple[str, int, int]]) -> dict[TopicPartition, int]:
    """max(offset) + 1 per (topic, partition): Kafka's committed offset is the next one to read.

    Rows are (topic, partition, offset).  A null or negative field is bad input, not
    something to skip silently: it raises ValueError naming the row.
    """
    best: dict[TopicPartition, int] = {}
    for topic, partition, offset in rows:
        if topic is None or partition is None or offset is None:
            raise ValueError(f"row with a null topic, partition or offset: {(topic, partition, offset)!r}")
        if partition < 0 or offset < 0:
            raise ValueError(f"row with a negative partition or offset: {(topic, partition, offset)!r}")
        if partition > _MAX_PARTITION:
            raise ValueError(f"row with a partition beyond Kafka's int32 range: {(topic, partition, offset)!r}")
        tp = TopicPartition(topic, int(partition))
        candidate = int(offset) + 1
        if candidate > best.get(tp, -1):
            best[tp] = candidate
    return best


def merge_next_offsets(per_task: Iterable[Mapping[TopicPartition, int] | None]) -> dict[TopicPartition, int]:
    """Merge the tasks' maps with a max per partition (several tasks may see one partition)."""
    merged: dict[TopicPartition, int] = {}
    for offsets in per_task:
        if not offsets:
            continue
        for tp, offset in offsets.items():
            if offset > merged.get(tp, -1):
                merged[tp] = offset
    return merged


def plan_batch_commit(
    group: str,
    query_id: str,
    batch_id: int,
    batch_offsets: Mapping[TopicPartition, int],
    committed: Mapping[TopicPartition, CommittedOffset],
    allow_query_takeover: bool = False,
) -> BatchCommitPlan:
    """Decide what batch `batch_id` of query `query_id` commits to `group`.

    `committed` is the group's committed offsets as read back just before the commit.
    Raises QueryConflict when another Spark query's markers are present and take-over
    is not allowed.
    """
    marker = CommitMarker(query_id, batch_id)
    ours: list[int] = []
    foreign: dict[TopicPartition, CommitMarker] = {}
    for tp, current in committed.items():
        stored = CommitMarker.decode(current.metadata)
        if stored is None:
            continue
        if stored.query_id == query_id:
            ours.append(stored.batch_id)
        else:
            foreign[tp] = stored

    if foreign and not allow_query_takeover:
        other = sorted({m.query_id for m in foreign.values()})
        last = max(m.batch_id for m in foreign.values())
        raise QueryConflict(
            f"consumer group {group!r} holds offsets committed by another Spark query "
            f"({', '.join(other)}, up to batch {last}); this query is {query_id}. "
            "Use a separate group per query, or set option allowQueryTakeover=true "
            "to let this query take the group over (offsets still never move backwards)."
        )

    if ours and batch_id <= max(ours):
        return BatchCommitPlan(marker=marker, skipped_replay_of=max(ours))

    offsets: dict[TopicPartition, int] = {}
    held_back: dict[TopicPartition, tuple[int, int]] = {}
    for tp, offset in batch_offsets.items():
        current = committed.get(tp)
        if current is not None and current.offset > offset:
            held_back[tp] = (offset, current.offset)
            offsets[tp] = current.offset
        else:
            offsets[tp] = offset
    # Re-stamp the previous owner's partitions (same offsets) so the group has one owner.
    for tp in foreign:
        offsets.setdefault(tp, committed[tp].offset)
    return BatchCommitPlan(
        marker=marker,
        offsets=offsets,
        held_back=held_back,
        taken_over_from=frozenset(m.query_id for m in foreign.values()),
    )
