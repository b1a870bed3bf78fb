"""Lag: how far a group's committed offset is behind the end of its partition's data, and its recent past.

Every lag Cohort's server computes (the console's group list and topics, the lag history) comes from
`LogEnds.end_offset`, so what "the end of a partition" means is decided in one place. Cohort holds no
records: the end it knows is the highest offset any group committed (the high watermark ListOffsets and
Fetch answer), cluster-wide where peers report theirs. A partition with no known end (a topic outside
the registry) has an unknown lag (None), never 0.
"""
from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable

# Samples kept per group: an hour at the health sampler's usual 15 s.
LAG_HISTORY_SAMPLES = 240


class LogEnds:
    """Where each partition's data ends as this node knows it (None: unknown)."""

    __slots__ = ("_local", "_topic_exists", "_reported_by_peers", "_refresh_peers")

    def __init__(self, local_high_watermark: Callable[[str, int], int],
                 topic_exists: Callable[[str], bool] | None = None,
                 reported_by_peers: Callable[[str, int], int] | None = None,
                 refresh_peers: Callable[[Iterable[tuple[str, int]]], None] | None = None) -> None:
        self._local = local_high_watermark
        self._topic_exists = topic_exists
        self._reported_by_peers = reported_by_peers
        self._refresh_peers = refresh_peers

    def refresh_soon(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Ask the peers for these partitions' ends in the background (what they report is cached, so a
        page shown again, or refreshed, has them)."""
        if self._refresh_peers is not None:
            self._refresh_peers(partitions)

    def end_offset(self, topic: str, partition: int) -> int | None:
        if self._topic_exists is not None and not self._topic_exists(topic):
            return None
        end = self._local(topic, partition)
        if self._reported_by_peers is not None:
            end = max(end, self._reported_by_peers(topic, partition))
        return end


def partition_lag(committed: int, end: int | None) -> int | None:
    """Messages between the committed offset and the end; None when either is unknown (offset -1: none)."""
    if end is None or committed < 0:
        return None
    return max(0, end - committed)


def topic_lags(offsets: Iterable[tuple[str, int, int]], log_ends: LogEnds) -> dict[str, tuple[int, int | None]]:
    """Per topic of (topic, partition, committed offset) rows: (partitions, summed lag or None if none known)."""
    out: dict[str, tuple[int, int | None]] = {}
    for topic, partition, committed in offsets:
        count, total = out.get(topic, (0, None))
        lag = partition_lag(committed, log_ends.end_offset(topic, partition))
        out[topic] = (count + 1, total if lag is None else (lag if total is None else total + lag))
    return out


def total_lag(lags: Iterable[int | None]) -> int | None:
    """The sum of the known lags; None when none is known."""
    known = [lag for lag in lags if lag is not None]
    return sum(known) if known else None


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
        samples.extend((now_ms, -1 if lag is None else lag))
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
