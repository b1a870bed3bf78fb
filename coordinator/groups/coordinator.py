"""`GroupCoordinator`: one node's group coordinator (Kafka's `GroupCoordinatorService` and what it composes).

* `partitions` (`runtime.partition.PartitionRuntime`, Kafka's `CoordinatorRuntime`): which offsets
  partitions this node serves (the `Ownership`'s listener: `acquired`, `lost`, `serve_until`), their
  load and release, one shard per served partition (`shard.GroupCoordinatorShard`: its groups, offsets and
  last durable group records, made when the partition loads, dropped when it goes), and every write;
* `group_manager` (`group_manager.GroupManager`): classic and consumer groups, the group APIs;
* `offsets_manager` (`offsets.manager.OffsetsManager`): committed offsets, the offset APIs, KIP-211 expiry;
* `reports` (`reports.group_reports.GroupReports`): the operator journal, offset history, health and lag.

The server's dispatch table calls the managers' request methods, each as ``method(request,
api_version, RequestContext)``; they never see bytes or sockets, and `responses` shapes what only
depends on the api_version. The managers reach a group through the views of `shard_views`, which take
its id to the shard of its partition (Kafka's hash rule).
"""
from __future__ import annotations

import functools
from collections.abc import Callable

from cohort.coordinator.contracts.store import Store
from cohort.coordinator.groups.classic.engine import ClassicGroup
from cohort.coordinator.groups.consumer.engine import ConsumerGroup
from cohort.coordinator.groups.group_manager import GroupManager
from cohort.coordinator.groups.offsets.manager import OffsetsManager
from cohort.coordinator.groups.runtime.partition import PartitionRuntime
from cohort.coordinator.groups.reports.group_reports import GroupReports
from cohort.coordinator.groups.runtime.scheduler import LoopScheduler, Scheduler
from cohort.coordinator.groups.shard import GroupCoordinatorShard
from cohort.coordinator.groups.shard_views import ShardGroups, ShardOffsets
from cohort.coordinator.records.types import Record
from cohort.protocol.partitioning import partition_for as _partition_for


class GroupCoordinator:
    """Every group and the committed offsets of one coordinator node: the runtime, its shards, the managers."""

    __slots__ = ("config", "metrics", "scheduler", "offsets", "partition_for", "partitions", "reports",
                 "group_manager", "offsets_manager", "_groups", "_consumer_groups", "_other_records",
                 "durable_groups")

    def __init__(
        self,
        config,
        store: Store,
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
        self._other_records = other_records
        self.partition_for = functools.lru_cache(maxsize=65536)(self._partition_for)
        # The runtime makes each partition's shard when it loads the partition (`_new_shard`) and drops it when
        # the partition goes; the views take a group id to its shard.
        self.partitions = PartitionRuntime(store, config.offsets_topic_num_partitions, self._new_shard, metrics)
        shards = self.partitions.shards
        self._groups = ShardGroups(shards, self.partition_for, "groups")
        self._consumer_groups = ShardGroups(shards, self.partition_for, "consumer_groups")
        self.durable_groups = ShardGroups(shards, self.partition_for, "durable_groups")
        self.offsets = ShardOffsets(shards, self.partition_for)
        self.reports = GroupReports(config, self.scheduler, store, self.offsets, self.partition_for,
                                    self.partitions.error, self.partitions.loaded, self._groups, self._consumer_groups,
                                    self.partitions.write)
        self.group_manager = GroupManager(config, self.scheduler, metrics, self.partitions, self.partition_for,
                                          self.offsets, self.reports, self._groups, self._consumer_groups,
                                          self.durable_groups, self.replay)
        self.offsets_manager = OffsetsManager(config, self.scheduler, metrics, store, self.partitions,
                                              self.partition_for, self.offsets, self.reports, self.group_manager,
                                              self._groups, self._consumer_groups)

    def _new_shard(self, partition: int) -> GroupCoordinatorShard:
        """The shard of an offsets partition the runtime starts to load (Kafka's `CoordinatorShardBuilder`)."""
        return GroupCoordinatorShard(partition, self, self._groups.stored, self._consumer_groups.stored,
                                     self.offsets.new_group_listener())

    def replay(self, record: Record) -> None:
        """Replay one record of a group into its partition's shard (a group rebuilt after a failed write)."""
        shard = self.partitions.shards[self.partition_for(record.group)]
        if shard is not None:
            shard.replay(record)

    def other_record(self, record: Record) -> None:
        """A replayed record that is not about groups (the topic registry's)."""
        if self._other_records is not None:
            self._other_records(record)

    # -- the request API (what the server's dispatch table calls) and the read API -------------
    # Each delegates to the manager that answers it, as Kafka's service does; the dispatch table takes the
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
