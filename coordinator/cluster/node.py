"""`ClusterNode`: the parts `cohort serve --cluster` gives the server in place of the local log.

The etcd connection, the `EtcdStore` (the node's `Store`), the `EtcdOwnership` (its `Ownership`; the
group coordinator is its listener, as with every other ownership) and the cluster id, kept in etcd
so every node reports the same one.

The topic registry is cluster-wide, not owned: its records sit under `t/0/` (where a single node's
partition 0 keeps them), every node reads and watches them, and any node creates a topic with a
create-if-absent transaction. So every node answers Metadata itself and is the controller.

Credentials and ACL bindings are cluster-wide the same way, under `s/`: every node reads them at start,
follows them with a watch (a change made through any node is in force on every node as soon as etcd
delivers the event, milliseconds; after an interrupted watch, once the node has read them again, retried
every 0.5 s), and any node writes a change with one transaction (last writer wins per user and
mechanism, as on Kafka; an ACL binding is its own key, so concurrent additions never conflict).
"""
from __future__ import annotations

import asyncio
import logging
import time
import uuid

from cohort.coordinator.cluster import keys
from cohort.coordinator.cluster.etcd import (
    EtcdClient,
    EtcdNoSpace,
    EtcdUnavailable,
    compare_create_revision,
    compare_value,
    op_delete,
    op_put,
    op_range,
)
from cohort.coordinator.cluster.metrics import ClusterCollector
from cohort.coordinator.cluster.ownership import EtcdOwnership
from cohort.coordinator.cluster.store import EtcdStore
from cohort.coordinator.config import CoordinatorConfig, parse_cluster_url
from cohort.coordinator.contracts.store import StorageError
from cohort.coordinator.contracts.ownership import Node
from cohort.coordinator.records.types import EndOffsetRecord, decode_record, encode_record
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.cluster")

# How long a starting node waits for etcd to answer (members starting with it, a leader being elected):
# each request's own deadline is short (`cluster.etcd.request.timeout.ms`), a start need not be.
ETCD_START_WAIT_S = 10.0

CLUSTER_ID_KEY = b"cluster/id"
# Seconds before each new load of a partition whose load failed; after the last one it is given up (owner/<p>
# deleted) so that another node may load it.
LOAD_RETRY_DELAYS_S = (0.5, 1.0, 2.0)
# Compare-and-set rounds an end-offset report may lose to other nodes' reports before it gives up.
_END_OFFSET_CAS_ATTEMPTS = 8


class ClusterNode:
    def __init__(self, config: CoordinatorConfig, local: Node, metrics=None) -> None:
        self.etcd = EtcdClient(parse_cluster_url(config.cluster), timeout_s=config.cluster_etcd_request_timeout_ms / 1000)
        self.store = EtcdStore(self.etcd, config.offsets_topic_num_partitions,
                               page_size=config.cluster_etcd_load_page_keys,
                               max_txn_ops=config.cluster_etcd_max_txn_ops,
                               max_request_bytes=config.cluster_etcd_max_request_bytes)
        self.ownership = EtcdOwnership(self.etcd, local, store=self.store,
                                       num_partitions=config.offsets_topic_num_partitions,
                                       lease_ttl_ms=config.cluster_lease_ttl_ms)
        self.topics = None  # the TopicRegistry, from `watch_topics`
        self.load_retry_delays = LOAD_RETRY_DELAYS_S  # for the partition runtime
        self._watches: list[asyncio.Task] = []
        self._closed = False
        if metrics is not None:
            metrics.registry.register(ClusterCollector(self.store, self.ownership))

    async def connect(self) -> str:
        """Reach etcd and return the cluster id (created by the first node ever started)."""
        await self.etcd.connect()
        candidate = f"cohort-{uuid.uuid4().hex[:22]}".encode()
        deadline, waiting = time.monotonic() + ETCD_START_WAIT_S, False
        while True:
            try:
                await self.etcd.txn([compare_create_revision(CLUSTER_ID_KEY, 0)], [op_put(CLUSTER_ID_KEY, candidate)])
                break
            except EtcdNoSpace:
                raise
            except EtcdUnavailable as exc:
                if time.monotonic() >= deadline:
                    raise
                if not waiting:
                    waiting = True
                    log.info("waiting for etcd to answer (at most %gs): %s", ETCD_START_WAIT_S, exc)
                await asyncio.sleep(0.5)
        kvs, _, _ = await self.etcd.range(CLUSTER_ID_KEY)
        return kvs[0].value.decode()

    async def close(self) -> None:
        self._closed = True
        for watch in self._watches:
            watch.cancel()
        if self._watches:
            await asyncio.wait(self._watches, timeout=5)
        await self.etcd.close()

    # --- the topic registry (cluster-wide) ----------------------------------------------------------

    async def watch_topics(self, topics) -> None:
        """Fill `topics` from etcd and keep it current (every node's registry is the same)."""
        self.topics = topics

        def read(records) -> None:
            for record in records:
                topics.apply(record)

        await self._follow(keys.TOPICS, topics.apply, read, "topic registry")

    async def watch_security(self, registry) -> None:
        """Fill the `SecurityRegistry` from etcd and keep it current; its changes are written to etcd."""
        registry.persist = self.persist_security
        # a read replaces the whole state: a binding deleted while the watch was down is gone too
        await self._follow(keys.SECURITY, registry.apply, registry.replace, "credentials and ACLs")

    async def _follow(self, prefix: bytes, apply, read, what: str) -> None:
        """Hand every record under `prefix` to `read(records)`, then each change to `apply(record)`."""
        revision = await self._read_prefix(prefix, read)
        self._watches.append(asyncio.create_task(self._watch_prefix(prefix, apply, read, what, revision),
                                                 name=f"cluster-watch-{prefix.decode()}"))

    def _apply_topic(self, key: bytes, value: bytes | None) -> None:
        self.topics.apply(decode_record(keys.record_key(key), value))

    async def _read_prefix(self, prefix: bytes, read) -> int:
        _, _, revision = await self.etcd.range(prefix, limit=1)
        records = []
        async for page in self.etcd.range_prefix(prefix, revision=revision):
            records += [decode_record(keys.record_key(kv.key), kv.value) for kv in page]
        read(records)
        return revision

    async def _watch_prefix(self, prefix: bytes, apply, read, what: str, revision: int) -> None:
        while not self._closed:
            try:
                async for events in self.etcd.watch_prefix(prefix, revision + 1):
                    for kind, kv in events:
                        revision = max(revision, kv.mod_revision)
                        apply(decode_record(keys.record_key(kv.key), None if kind == 1 else kv.value))
            except EtcdUnavailable as exc:
                if self._closed:
                    return
                log.info("%s watch interrupted (%s); reading them again", what, exc)
            await asyncio.sleep(0.5)
            try:
                revision = await self._read_prefix(prefix, read)
            except EtcdUnavailable:
                pass

    async def persist_security(self, records) -> None:
        """Write credential and ACL records to etcd (a tombstone deletes its key), in transactions."""
        ops = []
        for record in records:
            record_key, value = encode_record(record)
            key = keys.etcd_key(0, record_key)
            ops.append(op_delete(key) if value is None else op_put(key, value))
        try:
            step = self.store.max_txn_ops
            for start in range(0, len(ops), step):
                await self.etcd.txn([], ops[start:start + step])
        except EtcdUnavailable as exc:
            raise StorageError(f"credentials and ACLs: {exc}", ErrorCode.REQUEST_TIMED_OUT) from exc

    async def _raise_end_offset(self, record, key: bytes, value: bytes) -> None:
        """Put an end offset unless etcd holds a higher one of the same topic; compare-and-set on the value
        last read, so two nodes reporting at once cannot move an end back."""
        for _ in range(_END_OFFSET_CAS_ATTEMPTS):
            kvs, _, _ = await self.etcd.range(key)
            if kvs:
                current = decode_record(keys.record_key(key), kvs[0].value)
                if current.topic_id == record.topic_id and current.end_offset >= record.end_offset:
                    self.topics.apply(current)
                    return
                compare = compare_value(key, kvs[0].value)
            else:
                compare = compare_create_revision(key, 0)
            written, _, _ = await self.etcd.txn([compare], [op_put(key, value)])
            if written:
                return
        raise StorageError(f"end offset of {record.topic}-{record.partition}: too many concurrent reports",
                           ErrorCode.REQUEST_TIMED_OUT)

    async def persist_topics(self, records) -> None:
        """Write topic records to etcd; a new topic only if no other node created it first, an end offset
        only if no other node wrote a higher one meanwhile (ends only move forward)."""
        try:
            for record in records:
                record_key, value = encode_record(record)
                key = keys.etcd_key(0, record_key)
                if isinstance(record, EndOffsetRecord):
                    await self._raise_end_offset(record, key, value)
                elif value is None:
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
