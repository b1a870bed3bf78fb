"""The (topic, partition) pair every part of the client speaks in."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """One partition of one topic; orders by topic name, then partition number."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def partitions_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Group partitions the way Kafka's wire structures do: topic → sorted partition numbers."""
    grouped: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        grouped[tp.topic].append(tp.partition)
    return {topic: sorted(numbers) for topic, numbers in sorted(grouped.items())}


def flatten_partitions(by_topic: Iterable[tuple[str, Iterable[int]]]) -> list[TopicPartition]:
    """The inverse of `partitions_by_topic`, from (topic, partitions) pairs."""
    return [TopicPartition(topic, p) for topic, numbers in by_topic for p in numbers]
