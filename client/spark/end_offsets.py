"""Reading a streaming source's progress offsets the way Spark's Kafka source reports them.

A Kafka-shaped source reports ``endOffset`` as JSON ``{"topic": {"0": 123, "1": 456}}``
where each number is the next offset to read, which is exactly what a consumer
group commits.  Spark's listener hands these over as JSON *strings*, and the first
batch's ``startOffset`` is the string ``"None"`` (classic PySpark builds it with
``str()``), so both the string and the parsed forms are accepted here.

Plain functions, tested without Spark (tests/spark/test_end_offsets.py).
"""
from __future__ import annotations

import json
from collections.abc import Mapping

from cohort.client.topic_partition import TopicPartition

__all__ = ["NotKafkaShaped", "parse_kafka_offsets", "forward_only"]


class NotKafkaShaped(ValueError):
    """The offset is not a {topic: {partition: offset}} map (some other kind of source)."""


def parse_kafka_offsets(offset: str | Mapping | None) -> dict[TopicPartition, int] | None:
    """{TopicPartition: offset} from a source offset, or None when there is no offset yet.

    None, "None", "null" and "" mean no offset (the first batch's start).  Anything that
    is not a Kafka-shaped map raises NotKafkaShaped.  Negative offsets (Kafka's -1/-2
    "latest"/"earliest" sentinels in a starting offset) are left out: they are not
    positions a group can commit.
    """
    if offset is None:
        return None
    if isinstance(offset, str):
        text = offset.strip()
        if text in ("", "None", "null"):
            return None
        try:
            offset = json.loads(text)
        except ValueError as exc:
            raise NotKafkaShaped(f"offset is not JSON: {text[:80]!r}") from exc
        if offset is None:
            return None
    if not isinstance(offset, Mapping) or not offset:
        raise NotKafkaShaped(f"offset is not a non-empty JSON object: {str(offset)[:80]!r}")
    result: dict[TopicPartition, int] = {}
    for topic, partitions in offset.items():
        if not isinstance(topic, str) or not isinstance(partitions, Mapping):
            raise NotKafkaShaped(f"offset entry {topic!r} is not a topic mapped to partitions")
        for partition, position in partitions.items():
            try:
                number = int(partition)
            except (TypeError, ValueError):
                raise NotKafkaShaped(f"partition {partition!r} of topic {topic!r} is not a number") from None
            if isinstance(position, bool) or not isinstance(position, int):
                raise NotKafkaShaped(f"offset of {topic}-{partition} is not an integer: {position!r}")
            if number < 0:
                raise NotKafkaShaped(f"negative partition {number} in topic {topic!r}")
            if position >= 0:
                result[TopicPartition(topic, number)] = position
    return result


def forward_only(
    wanted: Mapping[TopicPartition, int], committed: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """The part of `wanted` that moves a partition forward: never commit an offset backwards."""
    return {tp: offset for tp, offset in wanted.items() if offset > committed.get(tp, -1)}
