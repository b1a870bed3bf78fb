"""A partition whose load goes wrong in cluster mode, on a real 3-member etcd with real `cohort serve` nodes:
etcd compacts its history past the revision a load pages through, and a partition that cannot be loaded
at all. Neither may leave the partition held and unserved."""
from __future__ import annotations

import time

import pytest
from bounded_wait import wait_until, wait_until_async
from cohort_process import CohortServer, http_get, metric_value

from cohort.client.connection import BrokerConnection
from cohort.client.errors import KafkaConnectionError
from cohort.coordinator.cluster import keys, values
from cohort.coordinator.cluster.etcd import EtcdClient, op_delete, op_put, prefix_end
from cohort.coordinator.records.types import OffsetCommitRecord, encode_record
from cohort.protocol.messages import OffsetFetchRequest
from cohort.protocol.partitioning import partition_for

pytestmark = pytest.mark.timeout(240)
GROUP, TOPIC = "load-failures", "big"
TTL_MS = 6000  # the default lease TTL
COMMITS = 4000  # offsets of the group's partition: with 2 keys a page, its load is ~2 000 etcd reads
PAGE_KEYS = 2


async def put_commits(client: EtcdClient, partition: int, count: int) -> None:
    """The group's committed offsets written straight into etcd, as a node's store lays them out."""
    ops = []
    for i in range(count):
        record_key, value = encode_record(OffsetCommitRecord(GROUP, TOPIC, i, 1000 + i))
        key = keys.etcd_key(partition, record_key)
        ops.append(op_put(key, values.for_etcd(key, value)))
    for start in range(0, len(ops), 500):
        await client.txn([], ops[start:start + 500])


async def fetch(node: CohortServer, partitions: list[int]) -> tuple[int, dict[int, int]]:
    """OffsetFetch of the group from `node`: (the first error, partition -> committed offset)."""
    request = OffsetFetchRequest(group_id=GROUP, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=partitions)])
    conn = BrokerConnection("127.0.0.1", node.port)
    try:
        response = await conn.request(request, version=1)
    finally:
        await conn.close()
    parts = response.topics[0].partitions
    return next((p.error_code for p in parts if p.error_code), 0), {p.partition_index: p.committed_offset for p in parts}


async def fence_written(client: EtcdClient, partition: int) -> bool:
    """`partition`'s load has begun: it rewrote the write fence since the node won the partition."""
    owner, _, _ = await client.range(keys.owner_key(partition))
    fence, _, _ = await client.range(keys.write_fence_key(partition))
    return bool(owner and fence and fence[0].mod_revision > owner[0].create_revision)


async def load_under_way(client: EtcdClient, partition: int) -> bool:
    """`partition`'s load has begun and not ended: a node loads its partitions one at a time, in the order
    it claimed them (0 to 49 at a start), so the next one's load has not begun."""
    return await fence_written(client, partition) and not await fence_written(client, partition + 1)


async def test_a_load_that_etcd_compacts_under_it_reads_on_and_its_group_is_served(etcd, tmp_path):
    partition = partition_for(GROUP, 50)
    assert partition < 49
    client = EtcdClient(etcd.endpoints)
    await client.connect()
    node = None
    try:
        await put_commits(client, partition, COMMITS)
        node = CohortServer(tmp_path / "node1", "--cluster", etcd.url, "--node-id", "1",
                            "--cluster.lease.ttl.ms", str(TTL_MS), "--cluster.etcd.load.page.keys", str(PAGE_KEYS)
                            ).launch()
        await wait_until_async(lambda: load_under_way(client, partition), 60,
                               "the group's partition loading", interval=0.02)
        # An operator's compaction of everything up to now, past the revision the load reads at (a write
        # after it makes sure there is a later one).
        _, revision, _ = await client.txn([], [op_put(b"test/after-the-fence", b"x")])
        etcd.members[0].post("/v3/kv/compaction", {"revision": str(revision), "physical": True}, timeout=30)
        compacted_at = time.monotonic()

        async def served():
            try:
                error, offsets = await fetch(node, [0, COMMITS - 1])
            except (OSError, KafkaConnectionError):  # (not listening yet)
                return None
            return offsets if error == 0 else None
        offsets = await wait_until_async(served, 60, "the group served after the compaction", interval=0.05)
        served_after = time.monotonic() - compacted_at
        assert offsets == {0: 1000, COMMITS - 1: 1000 + COMMITS - 1}  # every record, the ones read after it too
        assert "compacted past the load's revision" in node.stderr(), "the load ended before the compaction"
        print(f"served {served_after:.2f}s after the compaction")
        assert served_after <= TTL_MS / 1000 + 2, served_after
        assert metric_value(node.scrape(), "cohort_offsets_partitions_failed") == 0
    finally:
        if node is not None:
            node.stop()
        await client.close()


async def load_state(client: EtcdClient, partition: int) -> tuple[bytes | None, int | None]:
    """(what the owner publishes at load/<p>, the epoch of owner/<p>)."""
    load, _, _ = await client.range(keys.load_key(partition))
    owner, _, _ = await client.range(keys.owner_key(partition))
    return (load[0].value if load else None), (owner[0].create_revision if owner else None)


async def test_a_partition_that_cannot_be_loaded_is_published_failed_then_given_up_and_served_once_repaired(
        etcd, tmp_path):
    bad_group = "unloadable"
    partition = partition_for(bad_group, 50)
    record_key, _ = encode_record(OffsetCommitRecord(bad_group, TOPIC, 0, 1))
    broken = keys.etcd_key(partition, record_key)
    client = EtcdClient(etcd.endpoints)
    await client.connect()
    nodes: list[CohortServer] = []
    try:
        # A record no node can replay: every load of the partition fails.
        await client.txn([], [op_put(broken, b"\x00\x07not a commit")])
        nodes = [CohortServer(tmp_path / f"node{i}", "--cluster", etcd.url, "--node-id", str(i),
                              "--cluster.lease.ttl.ms", str(TTL_MS)).start() for i in (1, 2)]

        async def failed():
            state, epoch = await load_state(client, partition)
            return epoch if state == b"failed" else None
        first_epoch = await wait_until_async(failed, 60, "the partition published as failed", interval=0.05)
        owner = next(n for n in nodes if f"offsets partition {partition} failed to load" in n.stderr())

        def health_names_it():
            status, body = http_get(f"http://127.0.0.1:{owner.metrics_port}/health")
            return status == 503 and f"partition {partition}:" in body
        wait_until(health_names_it, 30, "/health naming the failed partition")

        wait_until(lambda: any("given up after its loads failed" in n.stderr() for n in nodes), 60,
                   "the partition given up after its retries")
        _, epoch = await load_state(client, partition)
        assert epoch != first_epoch  # owner/<p> was deleted (and maybe claimed again since)

        # The operator removes the broken record: the partition loads at its next attempt, on some node.
        await client.txn([], [op_delete(broken)])
        repaired_at = time.monotonic()

        async def served():
            for node in nodes:
                try:
                    error, _ = await fetch_group(node, bad_group)
                except (OSError, KafkaConnectionError):
                    continue
                if error == 0:
                    return True
            return False
        await wait_until_async(served, 60, "the repaired partition served", interval=0.1)
        print(f"served {time.monotonic() - repaired_at:.2f}s after the repair")
        state, _ = await load_state(client, partition)
        assert state in (b"loading", b"loaded")
    finally:
        for node in nodes:
            node.stop()
        await client.close()


async def fetch_group(node: CohortServer, group: str) -> tuple[int, int]:
    request = OffsetFetchRequest(group_id=group, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])])
    conn = BrokerConnection("127.0.0.1", node.port)
    try:
        response = await conn.request(request, version=1)
    finally:
        await conn.close()
    part = response.topics[0].partitions[0]
    return part.error_code, part.committed_offset
