"""A small Python streaming source that emits Kafka-shaped rows, for examples and tests.

``spark.readStream.format("kafka-shaped")`` produces rows ``(topic, partition,
offset, value)`` for the partitions named by the ``topics`` option
(``"orders:2,payments:1"`` = topic orders with partitions 0-1, payments with 0),
``rowsPerBatch`` rows per partition per micro-batch, up to ``endOffset`` per
partition.  Its offsets have the JSON shape Spark's Kafka source reports
(``{"orders": {"0": 10, "1": 10}}``), so the `CohortOffsetCommitter` listener
treats it exactly like Kafka.  Deterministic, bounded and supports
``trigger(availableNow=True)``, so a query over it ends by itself.

Spark's worker processes import this module by name: put its directory on
``PYTHONPATH`` before the session starts.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

__all__ = ["KafkaShapedSource", "parse_topics"]


def parse_topics(spec: str) -> dict[str, int]:
    """"orders:2,payments:1" -> {"orders": 2, "payments": 1} (partition counts)."""
    topics: dict[str, int] = {}
    for item in spec.split(","):
        name, sep, count = item.strip().rpartition(":")
        if not sep or not name or not count.isdigit() or int(count) < 1:
            raise ValueError(f"kafka-shaped: topics={spec!r}: expected name:partitions[,name:partitions...]")
        topics[name] = int(count)
    return topics


@dataclass(frozen=True, slots=True)
class _Range(InputPartition):
    topic: str
    partition: int
    start: int
    end: int


class _Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, topics: dict[str, int], rows_per_batch: int, end_offset: int) -> None:
        self.topics = topics
        self.rows_per_batch = rows_per_batch
        self.end_offset = end_offset
        self.target: dict | None = None

    def _all(self, value: int) -> dict:
        return {t: {str(p): value for p in range(n)} for t, n in self.topics.items()}

    def initialOffset(self) -> dict:
        return self._all(0)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._all(self.end_offset)

    def latestOffset(self, start: dict, limit) -> dict:
        cap = self.target or self._all(self.end_offset)
        return {
            t: {p: min(start.get(t, {}).get(p, 0) + self.rows_per_batch, cap[t][p]) for p in parts}
            for t, parts in cap.items()
        }

    def partitions(self, start: dict, end: dict) -> list[_Range]:
        return [
            _Range(t, int(p), start.get(t, {}).get(p, 0), stop)
            for t, parts in end.items()
            for p, stop in parts.items()
            if stop > start.get(t, {}).get(p, 0)
        ]

    def read(self, partition: _Range) -> Iterator[tuple]:
        for offset in range(partition.start, partition.end):
            yield partition.topic, partition.partition, offset, f"{partition.topic}-{partition.partition}@{offset}".encode()

    def commit(self, end: dict) -> None:
        pass


class KafkaShapedSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kafka-shaped"

    def schema(self) -> str:
        return "topic string, partition int, offset long, value binary"

    def streamReader(self, schema) -> _Reader:
        return _Reader(
            parse_topics(self.options.get("topics", "events:2")),
            int(self.options.get("rowsPerBatch", "5")),
            int(self.options.get("endOffset", "10")),
        )
