"""`GroupCoordinator`: one node's group coordinator, composed the way Kafka's `GroupCoordinatorShard` is.

* `partitions` (`partition_runtime.PartitionRuntime`, Kafka's `CoordinatorRuntime`): which offsets
  partitions this node serves (the `Ownership`'s listener: `acquired`, `lost`, `serve_until`), their
  load and release, and every append (answered once durable);
* `group_manager` (`group_manager.GroupManager`): classic and consumer groups, the group APIs;
* `offsets_manager` (`offsets_manager.OffsetsManager`): committed offsets, the offset APIs, KIP-211 expiry;
* `reports` (`reports.GroupReports`): the operator journal, offset history, health and lag.

The server's dispatch table calls the managers' request methods, each as ``method(request,
api_version, RequestContext)``; they never see bytes or sockets, and `responses` shapes what only
depends on the api_version. This class is what the parts share: the groups (one map per kind, a
group id in at most one), the `OffsetsTable`, and the replay of a partition's records into them
(`replay_chunk`, `replay`: the shard side the partition runtime calls while loading).
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from cohort.coordinator.contracts.store import Store
from cohort.coordinator.groups.tracked_groups import TrackedGroups
from cohort.coordinator.groups.classic.engine import ClassicGroup
from cohort.coordinator.groups.consumer.engine import ConsumerGroup
from cohort.coordinator.groups.group_manager import GroupManager
from cohort.coordinator.groups.offsets.manager import OffsetsManager
from cohort.coordinator.groups.offsets.table import OffsetsTable
from cohort.coordinator.groups.runtime.partition import PartitionRuntime
from cohort.coordinator.groups.reports.group_reports import GroupReports
from cohort.coordinator.groups.runtime.scheduler import LoopScheduler, Scheduler
from cohort.coordinator.records.types import (
    RECORD_TYPES,
    GroupJournalRecord,
    GroupJournalTombstone,
    GroupMetadataRecord,
    GroupMetadataTombstone,
    OffsetCommitRecord,
    OffsetCommitRun,
    OffsetCommitSourceRecord,
    OffsetCommitSourceTombstone,
    OffsetCommitTombstone,
    Record,
    decode_for_load,
)
from cohort.protocol.errors import ErrorCode
from cohort.protocol.partitioning import partition_for as _partition_for

log = logging.getLogger("cohort.coordinator")
E = ErrorCode

# Records of KIP-848 consumer groups (Kafka's key types 3-8), records and tombstones: replayed into the group.
CONSUMER_GROUP_RECORDS = frozenset(cls for key in (3, 5, 6, 7, 8) if key in RECORD_TYPES
                                   for cls in (RECORD_TYPES[key].record, RECORD_TYPES[key].tombstone))
# Records that only the log's history reads (never live state).
_HISTORY_ONLY = (OffsetCommitSourceRecord, OffsetCommitSourceTombstone)
# A group record's type, the first part of its key in `durable_groups` (the member id is the second).
_RECORD_KEY_TYPE = {cls: key for key, rt in RECORD_TYPES.items() if key in (2, 3, 5, 6, 7, 8)
                    for cls in (rt.record, rt.tombstone)}


class GroupCoordinator:
    """Every group and the committed offsets of one coordinator node: the parts, and the replay into them."""

    __slots__ = ("config", "metrics", "scheduler", "offsets", "partition_for", "partitions", "reports",
                 "group_manager", "offsets_manager", "_groups", "_consumer_groups", "_other_records", "durable_groups")

    def __init__(
        self,
        config,
        store: Store,
        offsets: OffsetsTable | None = None,
        *,
        scheduler: Scheduler | None = None,
        other_records: Callable[[Record], None] | None = None,
        metrics=None,
    ) -> None:
        """`other_records` receives replayed records that are not about groups (the topic registry);
        `metrics` (coordinator.metrics.CoordinatorMetrics) counts rebalances, expiries and loads."""
        self.config = config
        self.metrics = metrics
        self.scheduler: Scheduler = scheduler or LoopScheduler()
        self.offsets = offsets if offsets is not None else OffsetsTable()
        self._other_records = other_records
        self._groups: dict[str, ClassicGroup] = TrackedGroups()
        self._consumer_groups: dict[str, ConsumerGroup] = TrackedGroups()
        # group id -> its group records as durable (record key -> record): what a group whose write failed
        # is rebuilt from (the last durable point).
        self.durable_groups: dict[str, dict[tuple, Record]] = {}
        self.partition_for = functools.lru_cache(maxsize=65536)(self._partition_for)
        self.partitions = PartitionRuntime(store, config.offsets_topic_num_partitions, self, metrics)
        self.reports = GroupReports(config, self.scheduler, store, self.offsets, self.partition_for,
                                    self.partitions.error, self.partitions.loaded, self._groups, self._consumer_groups,
                                    self.partitions.write)
        self.group_manager = GroupManager(config, self.scheduler, metrics, self.partitions, self.partition_for,
                                          self.offsets, self.reports, self._groups, self._consumer_groups,
                                          self.durable_groups, self.replay)
        self.offsets_manager = OffsetsManager(config, self.scheduler, metrics, store, self.partitions,
                                              self.partition_for, self.offsets, self.reports, self.group_manager,
                                              self._groups, self._consumer_groups)

    # -- the request API (what the server's dispatch table calls) and the read API -------------
    # Each delegates to the manager that answers it, as Kafka's shard does; the dispatch table takes the
    # managers' methods themselves (`handlers.RequestHandlers`), so a request pays no extra call.
    def join_group(self, req, version: int, ctx):
        return self.group_manager.join_group(req, version, ctx)

    def sync_group(self, req, version: int, ctx):
        return self.group_manager.sync_group(req, version, ctx)

    def heartbeat(self, req, version: int, ctx):
        return self.group_manager.heartbeat(req, version, ctx)

    def leave_group(self, req, version: int, ctx):
        return self.group_manager.leave_group(req, version, ctx)

    def describe_groups(self, req, version: int, ctx):
        return self.group_manager.describe_groups(req, version, ctx)

    def list_groups(self, req, version: int, ctx):
        return self.group_manager.list_groups(req, version, ctx)

    def delete_groups(self, req, version: int, ctx):
        return self.group_manager.delete_groups(req, version, ctx)

    def consumer_group_heartbeat(self, req, version: int, ctx):
        return self.group_manager.consumer_group_heartbeat(req, version, ctx)

    def consumer_group_describe(self, req, version: int, ctx):
        return self.group_manager.consumer_group_describe(req, version, ctx)

    def offset_commit(self, req, version: int, ctx):
        return self.offsets_manager.offset_commit(req, version, ctx)

    def offset_fetch(self, req, version: int, ctx):
        return self.offsets_manager.offset_fetch(req, version, ctx)

    def offset_delete(self, req, version: int, ctx):
        return self.offsets_manager.offset_delete(req, version, ctx)

    def watch_topics(self, registry) -> None:
        self.group_manager.watch_topics(registry)

    def group(self, group_id: str) -> ClassicGroup | None:
        return self.group_manager.group(group_id)

    def groups(self) -> list[ClassicGroup]:
        return self.group_manager.groups()

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        return self.group_manager.consumer_group(group_id)

    def consumer_groups(self) -> list[ConsumerGroup]:
        return self.group_manager.consumer_groups()

    def high_watermark(self, topic: str, partition: int) -> int:
        return self.offsets_manager.high_watermark(topic, partition)

    def forget_topic(self, topic: str) -> None:
        self.offsets_manager.forget_topic(topic)

    def expire_offsets(self):
        return self.offsets_manager.expire_offsets()

    def reset_offsets(self, group_id: str, offsets: dict[tuple[str, int], int], ctx):
        return self.offsets_manager.reset_offsets(group_id, offsets, ctx)

    def _partition_for(self, group_id: str) -> int:
        """The offsets partition that owns `group_id` (Kafka's hash rule)."""
        return _partition_for(group_id, self.config.offsets_topic_num_partitions)

    async def load(self, *, start_retention: bool = True) -> None:
        """Open the store and load every partition (a single node without an `Ownership`); raises
        `LogLoadError` if some failed (those answer NOT_COORDINATOR, the rest serve normally)."""
        try:
            await self.partitions.load_all()
        finally:
            if start_retention:
                self.start_retention()

    def start_retention(self) -> None:
        """KIP-211 offset expiry every `offsets.retention.check.interval.ms`, and health sampling (idempotent)."""
        self.reports.start_health_sampling()
        self.offsets_manager.start_retention()

    def shutdown(self) -> None:
        """Cancel every timer and answer every parked JoinGroup/SyncGroup (NOT_COORDINATOR)."""
        self.partitions.close()
        self.reports.shutdown()
        self.offsets_manager.shutdown()
        self.group_manager.shutdown()

    # -- the shard side of the partition runtime: what a partition's records mean --------------
    def replay_chunk(self, records: list[tuple[bytes, bytes]], loaded_groups: set[str]) -> None:
        """Replay a chunk of a partition's live records (each key once, commits column-wise: `decode_for_load`)."""
        groups = self._groups
        for item in decode_for_load(records):
            if type(item) is OffsetCommitRun:
                if item.group not in groups and item.group not in self._consumer_groups:
                    self.group_manager.simple_group(item.group)
                loaded_groups.add(item.group)
                self.offsets_manager.apply_run(item)
            else:
                self.replay(item)
                group_id = getattr(item, "group", None)
                if group_id is not None:
                    loaded_groups.add(group_id)

    def replay_durable(self, records: list[Record]) -> None:
        """Records a write made durable: the same replay as the load's, except that a group's own records
        (made by its engine, which holds them already) only become its last durable point."""
        for record in records:
            kind = type(record)
            if kind is GroupMetadataRecord or kind in CONSUMER_GROUP_RECORDS:
                self._remember(record)
            else:
                self.replay(record)

    def _remember(self, record: Record) -> None:
        """Keep a group record as the group's last durable point (a tombstone forgets its key)."""
        group_id = record.group
        kind = type(record)
        key = (_RECORD_KEY_TYPE[kind], getattr(record, "member_id", None))
        if kind.__name__.endswith("Tombstone"):
            kept = self.durable_groups.get(group_id)
            if kept is not None:
                kept.pop(key, None)
                if kind is GroupMetadataTombstone:
                    kept.pop((_RECORD_KEY_TYPE[GroupMetadataRecord], None), None)
                if not kept:
                    del self.durable_groups[group_id]
        else:
            kept = self.durable_groups.get(group_id)
            if kept is None:
                kept = self.durable_groups[group_id] = {}
            kept[key] = record

    def replay(self, record: Record) -> None:
        """Apply one record read back from the log (no writes, no timers)."""
        if type(record) is OffsetCommitRecord:
            if record.group not in self._groups and record.group not in self._consumer_groups:
                self.group_manager.simple_group(record.group)
            self.offsets_manager.apply_commit(record)
        elif type(record) is OffsetCommitTombstone:
            self.offsets.delete(record.group, record.topic, record.partition)
        elif type(record) is GroupMetadataRecord:
            self._remember(record)
            group = self._groups.get(record.group)
            if group is None:
                group = self._groups[record.group] = self.group_manager.new_group(record.group)
            self.group_manager.runtime.load(group, record)
        elif type(record) is GroupMetadataTombstone:
            self._remember(record)
            group = self._groups.get(record.group)
            if group is not None:
                self.group_manager.drop_group(group)
        elif type(record) in CONSUMER_GROUP_RECORDS:
            self._remember(record)
            self.group_manager.replay_consumer_group_record(record)
        elif type(record) is GroupJournalRecord:
            self.reports.journal.apply(record)
        elif type(record) is GroupJournalTombstone:
            self.reports.journal.forget([record.group])
        elif type(record) in _HISTORY_ONLY:
            pass  # read back by the offset history, not kept in memory
        elif self._other_records is not None:
            self._other_records(record)

    def partition_replayed(self, partition: int, loaded_groups: set[str]) -> None:
        """Every record of `partition` is replayed: its groups' timers start."""
        runtime = self.group_manager.runtime
        for group_id in loaded_groups:
            group = self._groups.get(group_id) or self._consumer_groups.get(group_id)
            if group is not None:
                runtime.load_completed(group)

    def partition_lost(self, partition: int) -> None:
        """Another node coordinates `partition` now: answer its parked requests NOT_COORDINATOR and
        forget its groups and offsets."""
        runtime = self.group_manager.runtime
        for group_id in [g for g in self._groups if self.partition_for(g) == partition]:
            runtime.unload(self._groups.pop(group_id), E.NOT_COORDINATOR)
        for group_id in [g for g in self._consumer_groups if self.partition_for(g) == partition]:
            runtime.unload(self._consumer_groups.pop(group_id), E.NOT_COORDINATOR)
        for group_id in [g for g in self.durable_groups if self.partition_for(g) == partition]:
            del self.durable_groups[group_id]
        self.offsets_manager.forget_partition(partition)
        self.reports.forget_partition(partition)
