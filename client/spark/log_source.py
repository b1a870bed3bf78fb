"""``spark.read.format("cohort-log").load(DATA_DIR)``: the offsets log as a DataFrame.

Commit history is already on disk, one record per commit, so ordinary Spark
analytics answer operator questions: commit rate per group over time, when a
group's offset went backwards, which groups went idle.  The source is read-only
and safe while the server runs: it reads each segment as a snapshot through the
storage layer's own reader (`cohort.coordinator.log.segments.read_segment`, which
stops at an unfinished write) and decodes with `cohort.coordinator.records.types`, so the
on-disk format is defined in exactly one place.

One Spark partition per (non-empty) segment file.  A segment that compaction replaced
between planning and reading yields nothing (its surviving records are in the
segment that replaced it); a read racing compaction can see a record twice,
and (log_partition, log_offset) identifies it.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

__all__ = ["CohortLogSource", "LOG_SCHEMA", "LOG_COLUMNS", "log_rows", "record_columns", "LogReadError"]

LOG_SCHEMA = (
    "log_partition int, log_offset long, segment string, record_type string, is_tombstone boolean, "
    "group string, topic string, partition int, committed_offset long, leader_epoch int, "
    "metadata string, commit_timestamp timestamp, expire_timestamp timestamp, "
    "generation int, protocol string, members int, topic_partitions int, error string"
)
"""One row per record.  record_type is offset-commit, group-metadata, consumer-group, topic, end-offset
(a partition's reported end offset, in committed_offset, reported at commit_timestamp), journal,
commit-source, scram-credential or acl (the names
`cohort log dump` uses), or undecodable with the reason in `error`; columns that do not
apply to a record type are null.  Timestamps are null when the record has none (-1 on
disk); for group metadata, commit_timestamp holds the group's state timestamp."""


class LogReadError(ValueError):
    """The path is not a Cohort data directory, or a record cannot be decoded."""


def _timestamp(ms: int) -> datetime | None:
    return None if ms < 0 else datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


LOG_COLUMNS = tuple(column.split()[0] for column in LOG_SCHEMA.split(","))


def record_columns(rec) -> dict:
    """The non-null columns of one decoded record (everything but the log position)."""
    from cohort.coordinator.records.types import (
        GroupMetadataRecord,
        GroupMetadataTombstone,
        OffsetCommitRecord,
        OffsetCommitTombstone,
        TopicRecord,
        TopicTombstone,
    )

    if isinstance(rec, OffsetCommitRecord):
        return dict(record_type="offset-commit", is_tombstone=False, group=rec.group, topic=rec.topic,
                    partition=rec.partition, committed_offset=rec.offset, leader_epoch=rec.leader_epoch,
                    metadata=rec.metadata, commit_timestamp=_timestamp(rec.commit_timestamp),
                    expire_timestamp=_timestamp(rec.expire_timestamp))
    if isinstance(rec, OffsetCommitTombstone):
        return dict(record_type="offset-commit", is_tombstone=True, group=rec.group, topic=rec.topic,
                    partition=rec.partition)
    if isinstance(rec, GroupMetadataRecord):
        return dict(record_type="group-metadata", is_tombstone=False, group=rec.group,
                    commit_timestamp=_timestamp(rec.current_state_timestamp), generation=rec.generation,
                    protocol=rec.protocol, members=len(rec.members))
    if isinstance(rec, GroupMetadataTombstone):
        return dict(record_type="group-metadata", is_tombstone=True, group=rec.group)
    if isinstance(rec, TopicRecord):
        return dict(record_type="topic", is_tombstone=False, topic=rec.name, topic_partitions=rec.partitions)
    if isinstance(rec, TopicTombstone):
        return dict(record_type="topic", is_tombstone=True, topic=rec.name)
    name = type(rec).__name__
    if name == "GroupJournalRecord":  # a rebalance or admin action; generation = the generation/epoch after it
        return dict(record_type="journal", is_tombstone=False, group=rec.group,
                    commit_timestamp=_timestamp(rec.ended_ms), generation=rec.epoch_after)
    if name == "OffsetCommitSourceRecord":  # who made the commits that follow it (the offset history)
        return dict(record_type="commit-source", is_tombstone=False, group=rec.group,
                    commit_timestamp=_timestamp(rec.commit_timestamp), generation=rec.generation)
    if name in ("GroupJournalTombstone", "OffsetCommitSourceTombstone"):
        return dict(record_type="journal" if name.startswith("GroupJournal") else "commit-source",
                    is_tombstone=True, group=rec.group)
    if name.startswith(("ScramCredential", "Acl")):  # present, never their contents (salts, keys, principals)
        return dict(record_type="scram-credential" if name.startswith("Scram") else "acl",
                    is_tombstone=name.endswith("Tombstone"))
    if name == "EndOffsetRecord":  # a partition's reported end offset, kept in committed_offset
        return dict(record_type="end-offset", is_tombstone=False, topic=rec.topic, partition=rec.partition,
                    committed_offset=rec.end_offset, commit_timestamp=_timestamp(rec.reported_ms))
    if name == "EndOffsetTombstone":
        return dict(record_type="end-offset", is_tombstone=True, topic=rec.topic, partition=rec.partition)
    if name.startswith("ConsumerGroup"):  # KIP-848 records; generation = the epoch the record carries, if any
        epoch = next((getattr(rec, f) for f in ("epoch", "assignment_epoch", "member_epoch") if hasattr(rec, f)), None)
        return dict(record_type="consumer-group", is_tombstone=name.endswith("Tombstone"), group=rec.group,
                    generation=epoch)
    raise LogReadError(f"no row layout for {name}")  # a record type added without a mapping


def log_rows(log_partition: int, segment: str | Path) -> Iterator[tuple]:
    """The rows of one segment file, in log order (the reader's per-partition work)."""
    # Imported here: this runs in executor processes, which unpickle only the partition.
    from cohort.coordinator.log import read_segment
    from cohort.coordinator.records.types import RecordDecodeError, decode_record

    name = Path(segment).name
    try:
        for log_offset, key, value in read_segment(segment):
            try:
                columns = record_columns(decode_record(key, value))
            except RecordDecodeError as exc:
                # Like `cohort log dump`: show the record rather than hide the rest of the log.
                columns = dict(record_type="undecodable", is_tombstone=value is None, error=str(exc))
            columns.update(log_partition=log_partition, log_offset=log_offset, segment=name)
            yield tuple(columns.get(column) for column in LOG_COLUMNS)
    except FileNotFoundError:
        return  # replaced by compaction since planning; see the module docstring


@dataclass(frozen=True, slots=True)
class SegmentPartition(InputPartition):
    log_partition: int
    path: str


_NO_SEGMENT = SegmentPartition(-1, "")


def _has_data(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:  # compacted away since it was listed
        return False


class CohortLogReader(DataSourceReader):
    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir

    def partitions(self) -> list[SegmentPartition]:
        from cohort.coordinator.log import list_segments

        # Every log partition has an active segment, mostly empty (50 by default): an empty
        # file has no records, and a Spark task per empty file would cost more than the read.
        segments = [SegmentPartition(p, str(path)) for p, path in list_segments(self.data_dir) if _has_data(path)]
        return segments or [_NO_SEGMENT]

    def read(self, partition: SegmentPartition) -> Iterator[tuple]:
        if partition == _NO_SEGMENT:
            return iter(())
        return log_rows(partition.log_partition, partition.path)


class CohortLogSource(DataSource):
    """Read-only batch source over a Cohort data directory (``--data-dir`` of ``cohort serve``)."""

    @classmethod
    def name(cls) -> str:
        return "cohort-log"

    def schema(self) -> str:
        return LOG_SCHEMA

    def reader(self, schema: StructType) -> CohortLogReader:
        path = (self.options.get("path") or "").strip()
        if not path:
            raise LogReadError('cohort-log: give the data directory: spark.read.format("cohort-log").load(DATA_DIR)')
        if not Path(path).is_dir():
            raise LogReadError(f"cohort-log: {path!r} is not a directory (expected the server's --data-dir)")
        from cohort.coordinator.log.segments import PARTITION_DIR_PREFIX

        if not any(child.name.startswith(PARTITION_DIR_PREFIX) for child in Path(path).iterdir()):
            raise LogReadError(
                f"cohort-log: {path!r} holds no {PARTITION_DIR_PREFIX}N directories; is it the server's --data-dir?"
            )
        return CohortLogReader(path)
