"""`ClusterNode`: what `cohort serve --cluster` plugs into the server instead of the local offsets log.

It owns the etcd connection, the `EtcdStore` and the `EtcdOwnership`, and is the ownership's
listener: `acquired(p, epoch)` loads p's records from etcd into the group coordinator (its groups
answer COORDINATOR_LOAD_IN_PROGRESS meanwhile), `lost(p)` makes the coordinator forget p's groups
(parked requests answer NOT_COORDINATOR). Toward the coordinator it offers the few calls it makes of
its log (`open`, `append`, `partition_state`, `close`), so the coordinator's write path is unchanged:
every append is a fenced etcd transaction.

The topic registry is cluster-wide, not owned: its records sit under `t/0/` (where a single node's
partition 0 keeps them), every node reads and watches them, and any node creates a topic with a
create-if-absent transaction. So every node answers Metadata itself and is the controller.
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

from cohort.coordinator.cluster import keys
from cohort.coordinator.cluster.etcd import (
    EtcdClient,
    EtcdUnavailable,
    compare_create_revision,
    op_delete,
    op_put,
    op_range,
)
from cohort.coordinator.cluster.metrics import ClusterCollector
from cohort.coordinator.cluster.ownership import EtcdOwnership
from cohort.coordinator.cluster.store import EtcdStore
from cohort.coordinator.config import CoordinatorConfig, parse_cluster_url
from cohort.coordinator.log import PartitionState, StorageError
from cohort.coordinator.ownership import Node
from cohort.coordinator.records import TOPIC_KEY_TYPE, decode_record, encode_record, record_type
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.cluster")

CLUSTER_ID_KEY = b"cluster/id"
TOPICS = keys.partition_prefixes(0)[2]  # t/0/


class ClusterNode:
    def __init__(self, config: CoordinatorConfig, local: Node, metrics=None) -> None:
        self.num_partitions = config.offsets_topic_num_partitions
        self.etcd = EtcdClient(parse_cluster_url(config.cluster))
        self.store = EtcdStore(self.etcd, self.num_partitions)
        self.ownership = EtcdOwnership(self.etcd, local, store=self.store, num_partitions=self.num_partitions,
                                       lease_ttl_ms=config.cluster_lease_ttl_ms)
        self.metrics = metrics
        self.groups = None  # the GroupCoordinator, set by `attach`
        self.topics = None  # the TopicRegistry, set by `attach`
        self._topics_watch: asyncio.Task | None = None
        self._replay = None
        self._loaded: set[int] = set()
        self._failed: dict[int, str] = {}
        self._loads: dict[int, asyncio.Task] = {}
        if metrics is not None:
            metrics.registry.register(ClusterCollector(self.store, self.ownership))

    # --- set-up ------------------------------------------------------------------------------------

    async def connect(self) -> str:
        """Reach etcd and return the cluster id (created by the first node ever started)."""
        await self.store.open()
        candidate = f"cohort-{uuid.uuid4().hex[:22]}".encode()
        await self.etcd.txn([compare_create_revision(CLUSTER_ID_KEY, 0)], [op_put(CLUSTER_ID_KEY, candidate)])
        kvs, _, _ = await self.etcd.range(CLUSTER_ID_KEY)
        return kvs[0].value.decode()

    def attach(self, groups, topics) -> None:
        self.groups = groups
        self.topics = topics

    async def start(self) -> None:
        revision = await self._read_topics()
        self._topics_watch = asyncio.create_task(self._watch_topics(revision), name="cluster-topics-watch")
        await self.ownership.start(self)

    # --- the topic registry (cluster-wide) ----------------------------------------------------------

    def _apply_topic(self, key: bytes, value: bytes | None) -> None:
        record_key = keys.record_key(key)
        self.topics.apply(decode_record(record_key, value))

    async def _read_topics(self) -> int:
        _, _, revision = await self.etcd.range(TOPICS, limit=1)
        async for page in self.etcd.range_prefix(TOPICS, revision=revision):
            for kv in page:
                self._apply_topic(kv.key, kv.value)
        return revision

    async def _watch_topics(self, revision: int) -> None:
        while True:
            try:
                async for events in self.etcd.watch_prefix(TOPICS, revision + 1):
                    for kind, kv in events:
                        revision = max(revision, kv.mod_revision)
                        self._apply_topic(kv.key, None if kind == 1 else kv.value)
            except EtcdUnavailable as exc:
                log.info("topic watch interrupted (%s); reading the registry again", exc)
            await asyncio.sleep(0.5)
            try:
                revision = await self._read_topics()
            except EtcdUnavailable:
                pass

    async def persist_topics(self, records) -> None:
        """Write topic records to etcd; a new topic only if no other node created it first."""
        try:
            for record in records:
                record_key, value = encode_record(record)
                key = keys.etcd_key(0, record_key)
                if value is None:
                    await self.etcd.txn([], [op_delete(key)])
                elif self.topics.get(record.name) is not None:
                    await self.etcd.txn([], [op_put(key, value)])
                else:
                    created, _, responses = await self.etcd.txn(
                        [compare_create_revision(key, 0)], [op_put(key, value)], [op_range(key)])
                    if not created:
                        existing = responses[0].response_range.kvs
                        if existing:
                            self._apply_topic(key, existing[0].value)
                        raise StorageError(f"topic {record.name} was created by another node",
                                           ErrorCode.TOPIC_ALREADY_EXISTS)
        except EtcdUnavailable as exc:
            raise StorageError(f"topic registry: {exc}", ErrorCode.REQUEST_TIMED_OUT) from exc

    # --- the coordinator's view of its log ------------------------------------------------------------

    async def open(self, on_partition_loaded=None) -> None:
        """Nothing is loaded at start: partitions arrive as this node wins them."""
        self._replay = on_partition_loaded

    async def append(self, partition: int, records) -> None:
        await self.store.append(partition, records)

    def partition_state(self, partition: int) -> PartitionState:
        if partition in self._loaded:
            return PartitionState.LOADED
        if partition in self._failed:
            return PartitionState.FAILED
        return PartitionState.LOADING

    def partition_error(self, partition: int) -> str | None:
        return self._failed.get(partition)

    def segments(self, partition: int) -> list:
        return []

    async def close(self) -> None:
        """Hand every partition over (graceful: no lease wait), then disconnect."""
        try:
            await self.ownership.stop()
        except EtcdUnavailable as exc:
            log.warning("could not hand partitions over (etcd unreachable: %s); they move after the lease TTL", exc)
        for task in [*self._loads.values(), *([self._topics_watch] if self._topics_watch else [])]:
            task.cancel()
        await self.store.close()
        await self.etcd.close()

    # --- OwnershipListener -------------------------------------------------------------------------

    def acquired(self, partition: int, epoch: int) -> None:
        self._failed.pop(partition, None)
        self._loaded.discard(partition)
        if self.groups is not None:
            self.groups.begin_load(partition)
        self._loads[partition] = asyncio.create_task(self._load(partition, epoch), name=f"cluster-load-{partition}")

    def lost(self, partition: int) -> None:
        task = self._loads.pop(partition, None)
        if task is not None:
            task.cancel()
        self._loaded.discard(partition)
        self._failed.pop(partition, None)
        if self.groups is not None:
            self.groups.unload_partition(partition)

    async def _load(self, partition: int, epoch: int) -> None:
        started = time.perf_counter()
        try:
            while True:
                records: list[tuple[bytes, bytes]] = []
                try:
                    async for chunk in self.store.load(partition, epoch):
                        records.extend(chunk)
                    break
                except StorageError as exc:
                    if exc.error_code != ErrorCode.COORDINATOR_NOT_AVAILABLE or self.ownership.epoch(partition) != epoch:
                        # Lost meanwhile: not served here; the ownership decides what follows.
                        log.warning("partition %d: load refused: %s", partition, exc)
                        self._failed[partition] = str(exc)
                        return
                    log.info("partition %d: load waits for etcd (%s)", partition, exc)
                    await asyncio.sleep(0.5)
            # Topic records are applied from the registry's own watch, never from a partition snapshot.
            records = [(k, v) for k, v in records if record_type(k) != TOPIC_KEY_TYPE]
            if self._replay is not None:
                self._replay(partition, records)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("partition %d: records could not be replayed", partition)
            self._failed[partition] = f"{type(exc).__name__}: {exc}"
            return
        finally:
            if self._loads.get(partition) is asyncio.current_task():
                del self._loads[partition]
        self._loaded.add(partition)
        log.info("partition %d loaded from etcd: %d records in %.0f ms", partition, len(records),
                 (time.perf_counter() - started) * 1000)
