"""Lag: how far a group's committed offset is behind the end of its partition's data, and its recent past.

Cohort holds no records, so the end of a partition is what the system that owns the data reported
(ReportEndOffsets: `cohort topics end-offsets set`, the Spark connector), kept with the topic registry.
Every lag the server computes (health, `/metrics`, GroupReport's "lag" report, the CLI's LAG column, the
console's list, topics and lag history) comes from `partition_lag` over `LogEnds.end_offset`, so what
"the end of a partition" means is decided in one place. A partition whose source never reported an end
has an unknown lag (None, shown as `-`), never 0.

Lags are bounded by LAG_MAX (Kafka's largest offset): a partition's lag is at most its reported end, and a sum
over partitions saturates there, so a reported end of 2^63-1 (a wrong or hostile report) never overflows the
64-bit samples, the wire's INT64 fields or a gauge; a saturated total reads "at least this much".
"""
from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cohort.coordinator.server.topics import ReportedEnd

# Samples kept per group: an hour at one every LAG_HISTORY_INTERVAL_MS.
LAG_HISTORY_SAMPLES = 240
# ... taken at most this often (health may be sampled more often).
LAG_HISTORY_INTERVAL_MS = 15_000
# The largest lag any report, sample or gauge carries (Kafka's offsets are signed 64-bit).
LAG_MAX = (1 << 63) - 1


class LogEnds:
    """Where each partition's data ends, as its source reported it (None: no source did)."""

    __slots__ = ("reported_end",)

    def __init__(self, reported_end: Callable[[str, int], ReportedEnd | None] = lambda topic, partition: None) -> None:
        self.reported_end = reported_end

    def end_offset(self, topic: str, partition: int) -> int | None:
        end = self.reported_end(topic, partition)
        return None if end is None else end.end_offset


def partition_lag(committed: int, end_offset: int | None) -> int | None:
    """How many records a group has yet to consume in a partition: the reported end minus its committed
    offset, 0 when it is at or past the end; None when the end is unknown or nothing is committed.

    The one definition of lag: health, `/metrics`, GroupReport's "lag" report and the CLI's LAG column
    all take it from here (through `HealthMonitor.evaluate` or `group_lag`)."""
    if end_offset is None or committed < 0:
        return None
    return min(LAG_MAX, max(0, end_offset - committed))


@dataclass(slots=True, frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int
    end_offset: int | None
    lag: int | None
    end_reported_ms: int | None


def group_lag(offsets: Iterable[tuple[str, int, int]], reported_end: Callable[[str, int], ReportedEnd | None]) -> dict:
    """A group's lag as one JSON-ready document: per partition (topic, partition, committed offset) its
    reported end and lag, the total over partitions with a known end, and how many have none.
    `reported_end(topic, partition)` gives a `topics.ReportedEnd` or None."""
    partitions = []
    for topic, partition, committed in sorted(offsets):
        end = reported_end(topic, partition)
        end_offset = None if end is None else end.end_offset
        partitions.append(PartitionLag(topic, partition, committed, end_offset, partition_lag(committed, end_offset),
                                       None if end is None else end.reported_ms))
    return {"partitions": [asdict(p) for p in partitions],
            "total_lag": total_lag(p.lag for p in partitions),
            "partitions_without_end": sum(1 for p in partitions if p.lag is None)}


def topic_lags(offsets: Iterable[tuple[str, int, int]], log_ends: LogEnds) -> dict[str, tuple[int, int | None]]:
    """Per topic of (topic, partition, committed offset) rows: (partitions, summed lag or None if none known)."""
    out: dict[str, tuple[int, int | None]] = {}
    for topic, partition, committed in offsets:
        count, total = out.get(topic, (0, None))
        lag = partition_lag(committed, log_ends.end_offset(topic, partition))
        out[topic] = (count + 1, total if lag is None else (lag if total is None else min(LAG_MAX, total + lag)))
    return out


def total_lag(lags: Iterable[int | None]) -> int | None:
    """The sum of the known lags (at most LAG_MAX); None when none is known."""
    known = [lag for lag in lags if lag is not None]
    return min(LAG_MAX, sum(known)) if known else None


class LagHistory:
    """Each group's total lag at the last LAG_HISTORY_SAMPLES samples (time ms, lag; -1 = unknown then)."""

    __slots__ = ("_samples", "capacity")

    def __init__(self, capacity: int = LAG_HISTORY_SAMPLES) -> None:
        self.capacity = capacity
        self._samples: dict[str, array] = {}  # group -> flat [ms, lag, ms, lag, ...] (16 bytes a sample)

    def record(self, group: str, now_ms: int, lag: int | None) -> None:
        samples = self._samples.get(group)
        if samples is None:
            samples = self._samples[group] = array("q")
        samples.extend((now_ms, -1 if lag is None else min(max(lag, 0), LAG_MAX)))
        if len(samples) > 2 * self.capacity:
            del samples[:len(samples) - 2 * self.capacity]

    def of(self, group: str) -> list[tuple[int, int | None]]:
        samples = self._samples.get(group, ())
        return [(samples[i], None if samples[i + 1] < 0 else samples[i + 1]) for i in range(0, len(samples), 2)]

    def groups(self) -> list[str]:
        return list(self._samples)

    def forget(self, groups: Iterable[str]) -> None:
        for group in groups:
            self._samples.pop(group, None)
