"""`OffsetsTable`: the committed offsets held in memory, what OffsetFetch reads.

A server may hold millions of committed offsets, so the table is built for
memory first: per (group, topic) the partitions' fields live in one int64
`array` indexed by partition number (consumer partitions are small dense
integers), metadata is kept only where it is not "" (it almost never is), and
group and topic names are single shared `str` objects.  That is about 30 bytes
per offset plus a few hundred bytes per (group, topic), instead of the ~300
bytes a dict of small objects would take.  A partition number far beyond the
others goes to a small per-topic dict instead, so a stray huge number cannot
blow up an array.

The table is plain state with one owner (the group coordinator, on the event
loop); it knows nothing of the log.  The write path is: append the records,
then `put`/`delete` here once they are durable.
"""
from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain

from cohort.coordinator.records.types import OffsetCommitRun

__all__ = ["OffsetAndMetadata", "OffsetsTable"]

_ABSENT = -(2**63)  # offset slot of a partition with no committed offset
_DENSE_SLACK = 64
_EMPTY_SLOT = array("q", (_ABSENT, -1, -1, -1))
_RANGES: dict[int, tuple[int, ...]] = {}


def _range_tuple(n: int) -> tuple[int, ...]:
    r = _RANGES.get(n)
    if r is None:
        r = tuple(range(n))
        if n <= 4096:
            _RANGES[n] = r
    return r


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """One committed offset.  -1 means "none" for leader_epoch and expire_timestamp (as on the wire)."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


class _TopicOffsets:
    """The committed offsets of one group for one topic.

    `slots` holds 4 int64 per partition (offset, leader epoch, commit
    timestamp, expire timestamp): one array object instead of four saves a few
    hundred bytes per (group, topic), which matters when topics have few
    partitions.
    """

    __slots__ = ("slots", "metadata", "count", "sparse")

    def __init__(self) -> None:
        self.slots = array("q")
        self.metadata: dict[int, str] | None = None
        self.count = 0
        self.sparse: dict[int, OffsetAndMetadata] | None = None

    def _dense(self, partition: int) -> bool:
        """Whether `partition` lives in `slots`: once in `sparse`, always there (slots may grow past it
        later, and a second copy in the slots would count it twice)."""
        if self.sparse is not None and partition in self.sparse:
            return False
        return 0 <= partition < len(self.slots) // 4 or 0 <= partition <= 2 * self.count + _DENSE_SLACK

    def put(self, partition: int, v: OffsetAndMetadata) -> None:
        if not self._dense(partition):
            if self.sparse is None:
                self.sparse = {}
            if partition not in self.sparse:
                self.count += 1
            self.sparse[partition] = v
            return
        self.put_dense(partition, v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp)

    def put_dense(self, partition: int, offset: int, leader_epoch: int, metadata: str, commit_timestamp: int,
                  expire_timestamp: int) -> None:
        """`put` of a partition `_dense` accepts, from the fields (no OffsetAndMetadata built)."""
        slots = self.slots
        i = 4 * partition
        if i >= len(slots):
            slots.extend(_EMPTY_SLOT * (partition + 1 - len(slots) // 4))
        # item by item (no array built per commit); every caller's values were
        # read from or written to int64 fields already, so none overflows here
        if slots[i] == _ABSENT:
            self.count += 1
        slots[i] = offset
        slots[i + 1] = leader_epoch
        slots[i + 2] = commit_timestamp
        slots[i + 3] = expire_timestamp
        if metadata:
            if self.metadata is None:
                self.metadata = {}
            self.metadata[partition] = metadata
        elif self.metadata is not None:
            self.metadata.pop(partition, None)

    def get(self, partition: int) -> OffsetAndMetadata | None:
        i = 4 * partition
        if 0 <= i < len(self.slots):
            slots = self.slots
            offset = slots[i]
            if offset != _ABSENT:
                md = self.metadata.get(partition, "") if self.metadata is not None else ""
                return OffsetAndMetadata(offset, slots[i + 1], md, slots[i + 2], slots[i + 3])
        if self.sparse is not None:
            return self.sparse.get(partition)
        return None

    def committed(self, partition: int) -> tuple[int, int, str] | None:
        """(offset, leader epoch, metadata) of a partition, or None: what OffsetFetch answers."""
        i = 4 * partition
        slots = self.slots
        if 0 <= i < len(slots):
            offset = slots[i]
            if offset != _ABSENT:
                return offset, slots[i + 1], self.metadata.get(partition, "") if self.metadata is not None else ""
        if self.sparse is not None:
            v = self.sparse.get(partition)
            if v is not None:
                return v.offset, v.leader_epoch, v.metadata
        return None

    def delete(self, partition: int) -> bool:
        i = 4 * partition
        if 0 <= i < len(self.slots) and self.slots[i] != _ABSENT:
            self.slots[i] = _ABSENT
            if self.metadata is not None:
                self.metadata.pop(partition, None)
            self.count -= 1
            return True
        if self.sparse is not None and self.sparse.pop(partition, None) is not None:
            self.count -= 1
            return True
        return False

    def partitions(self) -> Iterator[int]:
        slots = self.slots
        yield from (i // 4 for i in range(0, len(slots), 4) if slots[i] != _ABSENT)
        if self.sparse:
            yield from sorted(self.sparse)

    def timestamps(self) -> Iterator[tuple[int, int, int]]:
        """(partition, commit timestamp, expire timestamp) of every offset, without building objects."""
        slots = self.slots
        for i in range(0, len(slots), 4):
            if slots[i] != _ABSENT:
                yield i // 4, slots[i + 2], slots[i + 3]
        if self.sparse:
            for p in sorted(self.sparse):
                v = self.sparse[p]
                yield p, v.commit_timestamp, v.expire_timestamp


class OffsetsTable:
    """Committed offsets by (group, topic, partition)."""

    __slots__ = ("_groups", "_count", "_on_new_group")

    def __init__(self) -> None:
        self._groups: dict[str, dict[str, _TopicOffsets]] = {}
        self._count = 0
        self._on_new_group = None

    def watch_new_groups(self, listener) -> None:
        """Call `listener(group)` whenever a group gets its first offset (the group overview's index)."""
        self._on_new_group = listener

    def group_count(self) -> int:
        """How many groups have at least one committed offset."""
        return len(self._groups)

    def __len__(self) -> int:
        return self._count

    def _topic(self, group: str, topic: str) -> _TopicOffsets:
        """The group's offsets of `topic`, created empty if it has none."""
        topics = self._groups.get(group)
        if topics is None:
            topics = self._groups[group] = {}
            if self._on_new_group is not None:
                self._on_new_group(group)
        t = topics.get(topic)
        if t is None:
            t = topics[topic] = _TopicOffsets()
        return t

    def put(self, group: str, topic: str, partition: int, value: OffsetAndMetadata) -> None:
        t = self._topic(group, topic)
        before = t.count
        t.put(partition, value)
        self._count += t.count - before

    def put_fields(self, group: str, topic: str, partition: int, offset: int, leader_epoch: int, metadata: str,
                   commit_timestamp: int, expire_timestamp: int) -> None:
        """`put` from the fields: the commit path stores without building an OffsetAndMetadata."""
        topics = self._groups.get(group)
        t = topics.get(topic) if topics is not None else None
        if t is None:
            t = self._topic(group, topic)
        before = t.count
        # (`_dense`'s usual answer inline: a partition already in `slots` of a topic with no sparse ones)
        if (t.sparse is None and 0 <= partition < len(t.slots) // 4) or t._dense(partition):
            t.put_dense(partition, offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)
        else:
            t.put(partition, OffsetAndMetadata(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp))
        self._count += t.count - before

    def get(self, group: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        topics = self._groups.get(group)
        if topics is None:
            return None
        t = topics.get(topic)
        return None if t is None else t.get(partition)

    def committed(self, group: str, topic: str, partitions: list[int]) -> list[tuple[int, int, str] | None]:
        """(offset, leader epoch, metadata) of each of `partitions`, None where none is committed (OffsetFetch)."""
        topics = self._groups.get(group)
        t = None if topics is None else topics.get(topic)
        if t is None:
            return [None] * len(partitions)
        return [t.committed(p) for p in partitions]

    def put_run(self, run: OffsetCommitRun) -> None:
        """Store a column-wise run of commits (`cohort.coordinator.records.types.decode_for_load`), the load path.

        A run that covers partitions 0..n-1 of a topic the table has no offsets
        for yet (the usual case at load time) becomes the topic's slots in one
        C-level step (the table takes over `run.slots`); anything else is
        stored commit by commit.
        """
        topics = self._groups.get(run.group)
        if topics is None:
            topics = self._groups[run.group] = {}
            if self._on_new_group is not None:
                self._on_new_group(run.group)
        n = len(run.partitions)
        if run.topic not in topics and n:
            parts = tuple(run.partitions)
            slots = None
            if parts == (_RANGES.get(n) or _range_tuple(n)):
                slots = run.slots
            else:
                order = sorted(range(n), key=parts.__getitem__)
                if parts[order[0]] == 0 and parts[order[-1]] == n - 1:
                    s = run.slots
                    rows = list(zip(s[0::4], s[1::4], s[2::4], s[3::4]))
                    slots = array("q", chain.from_iterable(map(rows.__getitem__, order)))
            if slots is not None:
                t = topics[run.topic] = _TopicOffsets()
                t.slots = slots
                t.count = n
                self._count += n
                return
        for rec in run.records():
            self.put(rec.group, rec.topic, rec.partition,
                     OffsetAndMetadata(rec.offset, rec.leader_epoch, rec.metadata, rec.commit_timestamp,
                                       rec.expire_timestamp))

    def delete(self, group: str, topic: str, partition: int) -> bool:
        """Forget one offset; False if there was none."""
        topics = self._groups.get(group)
        if topics is None:
            return False
        t = topics.get(topic)
        if t is None or not t.delete(partition):
            return False
        self._count -= 1
        if t.count == 0:
            del topics[topic]
            if not topics:
                del self._groups[group]
        return True

    def has_offsets(self, group: str) -> bool:
        return group in self._groups

    def groups(self) -> list[str]:
        """The groups that have at least one committed offset."""
        return list(self._groups)

    def topics(self, group: str) -> list[str]:
        return list(self._groups.get(group, ()))

    def partitions(self, group: str, topic: str) -> list[int]:
        """The partitions of `topic` the group has an offset for, in order."""
        t = self._groups.get(group, {}).get(topic)
        return sorted(t.partitions()) if t is not None else []

    def group_offsets(self, group: str) -> dict[str, dict[int, OffsetAndMetadata]]:
        """Every offset of a group: {topic: {partition: OffsetAndMetadata}}."""
        out: dict[str, dict[int, OffsetAndMetadata]] = {}
        for topic, t in self._groups.get(group, {}).items():
            out[topic] = {p: t.get(p) for p in t.partitions()}
        return out

    def group_offset_count(self, group: str) -> int:
        return sum(t.count for t in self._groups.get(group, {}).values())

    def delete_group(self, group: str) -> list[tuple[str, int]]:
        """Forget every offset of a group; returns the (topic, partition)s that had one."""
        topics = self._groups.pop(group, None)
        if topics is None:
            return []
        gone = [(topic, p) for topic, t in topics.items() for p in t.partitions()]
        self._count -= len(gone)
        return gone

    def retention_candidates(self, group: str) -> Iterator[tuple[str, int, int, int]]:
        """(topic, partition, commit timestamp, expire timestamp) of a group's offsets, for expiry checks."""
        for topic, t in list(self._groups.get(group, {}).items()):
            for p, cts, ets in t.timestamps():
                yield topic, p, cts, ets

    def items(self) -> Iterator[tuple[str, str, int, OffsetAndMetadata]]:
        """Every (group, topic, partition, offset); don't modify the table while iterating."""
        for group, topics in self._groups.items():
            for topic, t in topics.items():
                for p in t.partitions():
                    yield group, topic, p, t.get(p)
