"""The topic registry: topic names, partition counts and topic ids.

Cohort stores no messages, but consumers only form groups over topics they
can see in Metadata, and admin tools create and delete topics. So the
coordinator keeps the smallest registry that makes those calls truthful: a
name, a partition count and a topic id (a UUID, as Kafka assigns one) per
topic. Partitions hold no records; the server answers ListOffsets and Fetch
for them as for empty logs (see `cohort.coordinator.server.handlers`).

The registry also keeps each partition's **reported end offset**: how far the
partition's data goes, as the system that owns the data (a Spark source, a
shard scanner, `cohort topics end-offsets set`) reported it. It is what
ListOffsets (latest), Fetch's high watermark and every lag figure use; a
partition without a report has no known end. Reports only move forward; an
operator corrects a wrong one (`correct_end_offsets`: a tombstone, then the new
end if any, in one append, so a replay or a restart keeps the correction).

It also keeps **when each end was reported** (`EndOffsetIndex`): ListOffsets by
timestamp T answers the earliest end reported at or after T (every record below
it existed by then), which is what `reset-offsets --to-datetime`/`--by-duration`
and Kafka clients' `offsetsForTimes` get. The index is rebuilt at load from the
`EndOffsetRecord`s the log still holds: compaction keeps every one younger than
`offsets.history.retention.ms` (`END_OFFSET_HISTORY_KEY_PREFIXES`), as it keeps
the offset history.

The registry is persisted through the offsets log as `TopicRecord` /
`TopicTombstone` records (keyed by topic name, so compaction keeps the latest
state of each topic) and `EndOffsetRecord`s (keyed by topic and partition,
carrying the topic id they belong to). Writes follow the coordinator's rule: validate → make a
record → append it (durable) → apply it to memory → answer. All writes go
through one lock, so two concurrent creations of one name (say two Metadata
requests auto-creating it) produce one topic, not two ids.
"""
from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass

from array import array
from bisect import bisect_left

from cohort.coordinator.records.types import (EndOffsetRecord, EndOffsetTombstone, TopicRecord, TopicTombstone,
                                              encode_record)
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.coordinator.server.topics")

# Kafka's topic name rules (`org.apache.kafka.common.internals.Topic`).
TOPIC_NAME_MAX_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
# The coordinator's own log is not a topic clients may create or read.
RESERVED_TOPIC_NAMES = frozenset({"__consumer_offsets", "__transaction_state"})
# A bound on one topic's size: every partition is listed in every Metadata
# response that names the topic, so an absurd count would turn each such
# response into megabytes. Kafka has no hard limit; this one is generous.
MAX_PARTITIONS_PER_TOPIC = 100_000

# The key prefix of end-offset reports: compaction keeps every report younger than offsets.history.retention.ms,
# so the time index survives compaction and restarts as the offset history does.
END_OFFSET_HISTORY_KEY_PREFIXES = (encode_record(EndOffsetTombstone("", 0))[0][:2],)
# Reports kept in memory per partition for ListOffsets by timestamp (the oldest go first past it).
END_OFFSET_INDEX_MAX_REPORTS = 10_000

RegistryRecord = TopicRecord | TopicTombstone | EndOffsetRecord | EndOffsetTombstone
PersistRecords = Callable[[Sequence[RegistryRecord]], Awaitable[None]]


@dataclass(slots=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int


class EndOffsetIndex:
    """When a partition's end was reported: (report time ms, end offset) pairs in report order, ends only
    growing, at most `capacity` of them (the oldest dropped first) and none older than `retention_ms`."""

    __slots__ = ("times", "ends", "capacity", "retention_ms")

    def __init__(self, capacity: int = END_OFFSET_INDEX_MAX_REPORTS, retention_ms: int = 86_400_000) -> None:
        self.times = array("q")
        self.ends = array("q")
        self.capacity = capacity
        self.retention_ms = retention_ms

    def add(self, reported_ms: int, end_offset: int) -> None:
        if self.times and reported_ms < self.times[-1]:
            reported_ms = self.times[-1]  # a report stamped earlier than one before it (a clock step): in order
        self.times.append(reported_ms)
        self.ends.append(end_offset)
        old = bisect_left(self.times, reported_ms - self.retention_ms) if self.retention_ms > 0 else len(self.times) - 1
        drop = max(old, len(self.times) - self.capacity)
        if drop > 0:
            del self.times[:drop]
            del self.ends[:drop]

    def at_or_after(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(end offset, its report time) of the earliest report at or after `timestamp_ms`; None: no report then."""
        i = bisect_left(self.times, timestamp_ms)
        return None if i == len(self.times) else (self.ends[i], self.times[i])


@dataclass(frozen=True, slots=True)
class ReportedEnd:
    """A partition's end offset as its source last reported it, and when (epoch ms)."""

    end_offset: int
    reported_ms: int


@dataclass(frozen=True, slots=True)
class TopicRefusal:
    """Why a topic operation is refused: the Kafka error for the reply, and a message for humans."""

    error_code: ErrorCode
    message: str


def topic_name_problem(name: str | None) -> str | None:
    """What is wrong with `name` as a topic name (Kafka's rules), or None if it is legal."""
    if name is None or name == "":
        return "Topic name is empty."
    if name in (".", ".."):
        return f"Topic name cannot be '{name}'."
    if len(name) > TOPIC_NAME_MAX_LENGTH:
        return f"Topic name is longer than {TOPIC_NAME_MAX_LENGTH} characters."
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        return f"Topic name '{name}' may contain only ASCII letters, digits, '.', '_' and '-'."
    return None


def _collision_key(name: str) -> str:
    # Kafka refuses names that differ only by '.' versus '_': both map to the
    # same metric names.
    return name.replace(".", "_")


class TopicRegistry:
    """Every topic this coordinator knows, with its one writer path.

    `persist` makes records durable (the server appends them to the offsets
    log); it raises on failure, and then nothing changes in memory.
    """

    def __init__(self, persist: PersistRecords, index_retention_ms: int = 86_400_000) -> None:
        self._persist = persist
        self._index_retention_ms = index_retention_ms
        # (topic, partition) -> when its ends were reported (for the current topic id only)
        self._end_index: dict[tuple[str, int], EndOffsetIndex] = {}
        self._by_name: dict[str, Topic] = {}
        self._by_id: dict[uuid.UUID, Topic] = {}
        self._by_collision_key: dict[str, str] = {}
        self._write_lock = asyncio.Lock()
        # topic name -> partition -> (topic id the report belongs to, the report); read through `reported_end`
        self._ends: dict[str, dict[int, tuple[uuid.UUID, ReportedEnd]]] = {}
        # Called after every applied change (live or replayed): consumer groups follow the registry.
        self.on_change: Callable[[], None] | None = None

    # -- reads ------------------------------------------------------------------
    def get(self, name: str | None) -> Topic | None:
        return self._by_name.get(name) if name is not None else None

    def get_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def __iter__(self) -> Iterator[Topic]:
        return iter(list(self._by_name.values()))

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def reported_end(self, topic: str, partition: int) -> ReportedEnd | None:
        """The partition's reported end offset, or None when its source never reported one."""
        current = self._by_name.get(topic)
        entry = self._ends.get(topic, {}).get(partition) if current is not None else None
        if entry is None or entry[0] != current.topic_id or partition >= current.partitions:
            return None
        return entry[1]

    def end_offset(self, topic: str, partition: int) -> int | None:
        """The partition's reported end offset (None: unknown)."""
        reported = self.reported_end(topic, partition)
        return None if reported is None else reported.end_offset

    def end_offset_at(self, topic: str, partition: int, timestamp_ms: int) -> tuple[int, int] | None:
        """(end offset, report time) of the earliest end reported at or after `timestamp_ms` (None: none was)."""
        if self.reported_end(topic, partition) is None:
            return None
        index = self._end_index.get((topic, partition))
        return None if index is None else index.at_or_after(timestamp_ms)

    def index_reports(self, reports) -> None:
        """Rebuild the time index from every end-offset report the log still holds (oldest first), those of
        each partition's current topic id up to its current end."""
        rebuilt: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for record in reports:
            if not isinstance(record, EndOffsetRecord):
                continue
            current = self.reported_end(record.topic, record.partition)
            entry = self._ends.get(record.topic, {}).get(record.partition)
            if current is not None and entry[0] == record.topic_id and record.end_offset <= current.end_offset:
                rebuilt.setdefault((record.topic, record.partition), []).append((record.reported_ms, record.end_offset))
        for key, pairs in rebuilt.items():
            index = EndOffsetIndex(retention_ms=self._index_retention_ms)
            for reported_ms, end in sorted(set(pairs)):
                if not index.ends or end > index.ends[-1]:
                    index.add(reported_ms, end)
            self._end_index[key] = index

    def reported_ends(self, topic: str) -> dict[int, ReportedEnd]:
        """Every reported end of `topic`'s partitions, by partition."""
        current = self._by_name.get(topic)
        if current is None:
            return {}
        return {p: end for p, (topic_id, end) in self._ends.get(topic, {}).items()
                if topic_id == current.topic_id and p < current.partitions}

    # -- replay / apply -----------------------------------------------------------
    def apply(self, record: RegistryRecord) -> None:
        """Make a durable record the in-memory state (used at load and after each append)."""
        if isinstance(record, (EndOffsetRecord, EndOffsetTombstone)):
            self._apply_end(record)
            return
        old = self._by_name.pop(record.name, None)
        if old is not None:
            self._by_id.pop(old.topic_id, None)
            self._by_collision_key.pop(_collision_key(old.name), None)
        if isinstance(record, TopicRecord):
            topic = Topic(record.name, record.topic_id, record.partitions)
            self._by_name[topic.name] = topic
            self._by_id[topic.topic_id] = topic
            self._by_collision_key[_collision_key(topic.name)] = topic.name
        if self.on_change is not None:
            self.on_change()

    def _apply_end(self, record: EndOffsetRecord | EndOffsetTombstone) -> None:
        by_partition = self._ends.setdefault(record.topic, {})
        key = (record.topic, record.partition)
        if isinstance(record, EndOffsetTombstone):
            by_partition.pop(record.partition, None)
            self._end_index.pop(key, None)
        else:
            old = by_partition.get(record.partition)
            # A report never moves an end back (an older report seen late, e.g. from a watch, is ignored).
            if old is None or old[0] != record.topic_id or old[1].end_offset < record.end_offset:
                if old is None or old[0] != record.topic_id:  # a new topic of that name starts a new index
                    self._end_index[key] = EndOffsetIndex(retention_ms=self._index_retention_ms)
                by_partition[record.partition] = (record.topic_id,
                                                  ReportedEnd(record.end_offset, record.reported_ms))
                self._end_index.setdefault(key, EndOffsetIndex(retention_ms=self._index_retention_ms)).add(
                    record.reported_ms, record.end_offset)
        if not by_partition:
            del self._ends[record.topic]

    # -- validation ----------------------------------------------------------------
    def check_new_topic(self, name: str | None, partitions: int) -> TopicRefusal | None:
        """Would creating `name` with `partitions` partitions be refused, and why."""
        problem = topic_name_problem(name)
        if problem is not None:
            return TopicRefusal(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        assert name is not None
        if name in RESERVED_TOPIC_NAMES:
            return TopicRefusal(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                f"Topic name '{name}' is reserved for Kafka's internal topics.")
        if name in self._by_name:
            return TopicRefusal(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        other = self._by_collision_key.get(_collision_key(name))
        if other is not None:
            return TopicRefusal(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                f"Topic '{name}' collides with existing topic '{other}' ('.' and '_' are equivalent).")
        return self.check_partition_count(partitions)

    @staticmethod
    def check_partition_count(partitions: int) -> TopicRefusal | None:
        if partitions < 1:
            return TopicRefusal(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if partitions > MAX_PARTITIONS_PER_TOPIC:
            return TopicRefusal(ErrorCode.INVALID_PARTITIONS,
                                f"Number of partitions must be at most {MAX_PARTITIONS_PER_TOPIC}.")
        return None

    def check_new_partition_count(self, name: str, count: int) -> TopicRefusal | None:
        """Would growing `name` to `count` partitions be refused, and why (CreatePartitions)."""
        topic = self._by_name.get(name)
        if topic is None:
            return TopicRefusal(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        if count == topic.partitions:
            return TopicRefusal(ErrorCode.INVALID_PARTITIONS, f"Topic already has {count} partitions.")
        if count < topic.partitions:
            return TopicRefusal(ErrorCode.INVALID_PARTITIONS,
                                f"Topic currently has {topic.partitions} partitions, which is higher than the "
                                f"requested {count}.")
        return self.check_partition_count(count)

    # -- writes --------------------------------------------------------------------
    async def create(self, name: str, partitions: int) -> Topic | TopicRefusal:
        """Create a topic (durably) or say why not."""
        async with self._write_lock:
            refusal = self.check_new_topic(name, partitions)
            if refusal is not None:
                return refusal
            record = TopicRecord(name, uuid.uuid4(), partitions)
            await self._persist([record])
            self.apply(record)
        log.info("topic created", extra={"topic": name, "partitions": partitions, "topic_id": str(record.topic_id)})
        return self._by_name[name]

    async def ensure(self, name: str, partitions: int) -> Topic | TopicRefusal:
        """The topic `name`, created with `partitions` if it does not exist yet (auto-creation)."""
        topic = self._by_name.get(name)
        if topic is not None:
            return topic
        result = await self.create(name, partitions)
        if isinstance(result, TopicRefusal) and result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS:
            return self._by_name[name]  # created by a concurrent request while we waited
        return result

    async def delete(self, name: str) -> Topic | TopicRefusal:
        async with self._write_lock:
            topic = self._by_name.get(name)
            if topic is None:
                return TopicRefusal(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
            records: list[RegistryRecord] = [TopicTombstone(name)]
            records += [EndOffsetTombstone(name, p) for p in sorted(self._ends.get(name, {}))]
            await self._persist(records)
            for record in records:
                self.apply(record)
        log.info("topic deleted", extra={"topic": name, "topic_id": str(topic.topic_id)})
        return topic

    async def set_partition_count(self, name: str, count: int) -> Topic | TopicRefusal:
        """Grow a topic to `count` partitions (partition counts only ever increase)."""
        async with self._write_lock:
            refusal = self.check_new_partition_count(name, count)
            if refusal is not None:
                return refusal
            topic = self._by_name[name]
            record = TopicRecord(name, topic.topic_id, count)
            await self._persist([record])
            self.apply(record)
        log.info("topic partitions increased", extra={"topic": name, "partitions": count})
        return self._by_name[name]

    async def report_end_offsets(self, name: str, ends: dict[int, int],
                                 now_ms: int) -> dict[int, ReportedEnd | TopicRefusal]:
        """Record how far `name`'s partitions go (partition -> end offset), durably; per partition the end
        now kept (a report below it changes nothing: ends only move forward) or why it was refused."""
        async with self._write_lock:
            topic = self._by_name.get(name)
            results: dict[int, ReportedEnd | TopicRefusal] = {}
            records = []
            for partition, end in ends.items():
                if topic is None or not 0 <= partition < topic.partitions:
                    results[partition] = TopicRefusal(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                      f"Partition {name}-{partition} does not exist.")
                elif end < 0:
                    results[partition] = TopicRefusal(ErrorCode.INVALID_REQUEST,
                                                      f"End offset {end} of {name}-{partition} is negative.")
                else:
                    current = self.reported_end(name, partition)
                    if current is not None and current.end_offset >= end:
                        results[partition] = current
                    else:
                        records.append(EndOffsetRecord(name, partition, topic.topic_id, end, now_ms))
            if records:
                await self._persist(records)
                for record in records:
                    self.apply(record)
                    results[record.partition] = self.reported_end(name, record.partition)
        if records:
            log.debug("end offsets reported", extra={"topic": name, "partitions": len(records)})
        return results

    async def correct_end_offsets(self, name: str, ends: dict[int, int | None],
                                  now_ms: int) -> dict[int, tuple[ReportedEnd | None, ReportedEnd | None] | TopicRefusal]:
        """An operator's correction: each partition's end set to the given one even when lower (None: removed),
        durably; per partition (the end before, the end now) or why it was refused. Each correction is a
        tombstone followed by the new report in one append, so replay (which never moves an end back) lands
        on the corrected end."""
        async with self._write_lock:
            topic = self._by_name.get(name)
            results: dict[int, tuple[ReportedEnd | None, ReportedEnd | None] | TopicRefusal] = {}
            records: list[RegistryRecord] = []
            before: dict[int, ReportedEnd | None] = {}
            for partition, end in ends.items():
                if topic is None or not 0 <= partition < topic.partitions:
                    results[partition] = TopicRefusal(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                      f"Partition {name}-{partition} does not exist.")
                elif end is not None and end < 0:
                    results[partition] = TopicRefusal(ErrorCode.INVALID_REQUEST,
                                                      f"End offset {end} of {name}-{partition} is negative.")
                else:
                    before[partition] = self.reported_end(name, partition)
                    records.append(EndOffsetTombstone(name, partition))
                    if end is not None:
                        records.append(EndOffsetRecord(name, partition, topic.topic_id, end, now_ms))
            if records:
                await self._persist(records)
                for record in records:
                    self.apply(record)
                for partition, old in before.items():
                    results[partition] = (old, self.reported_end(name, partition))
        return results
