"""`EtcdOwnership` against a real 3-member etcd: claims, rendezvous spread, handoffs, takeover, fencing."""
from __future__ import annotations

import asyncio
import time

import pytest

from cohort.coordinator.cluster import keys
from cohort.coordinator.cluster.etcd import EtcdClient, prefix_end
from cohort.coordinator.cluster.ownership import EtcdOwnership, preferred_owner
from cohort.coordinator.cluster.store import EtcdStore
from cohort.coordinator.contracts.store import StorageError
from cohort.coordinator.contracts.ownership import Node
from cohort.coordinator.contracts.partition_lifecycle import IllegalPartitionTransition, PartitionLifecycle as L
from cohort.coordinator.groups.runtime.partition import PartitionRuntime
from cohort.coordinator.records.types import OffsetCommitRecord, encode_record
from cohort.protocol.errors import ErrorCode

TTL_MS = 2000


class KeepsNothing:
    """A partition's shard that keeps nothing of its records (these tests are about ownership)."""

    def __init__(self, partition: int) -> None:
        self.partition = partition

    def replay_chunk(self, records, loaded_groups) -> None:
        pass

    def replay_durable(self, records) -> None:
        pass

    def loaded(self, loaded_groups) -> None:
        pass

    def unload(self) -> None:
        pass


class Events(PartitionRuntime):
    """The ownership's listener: the partition runtime a node runs (loading from the store, releasing it),
    recording what it was told, and which partitions it was given and not yet lost."""

    def __init__(self, store: EtcdStore) -> None:
        super().__init__(store, 50, KeepsNothing)
        self.log: list[tuple[float, str, int]] = []
        self.serving: dict[int, int] = {}

    @property
    def loads(self) -> list[int]:
        """The partitions being loaded now."""
        return self.states.partitions(L.LOADING)

    def acquired(self, partition: int, epoch: int) -> None:
        assert partition not in self.serving
        self.serving[partition] = epoch
        self.log.append((time.monotonic(), "acquired", partition))
        super().acquired(partition, epoch)

    def lost(self, partition: int) -> None:
        assert partition in self.serving
        del self.serving[partition]
        self.log.append((time.monotonic(), "lost", partition))
        super().lost(partition)


class Member:
    def __init__(self, endpoints: list[str], node_id: int, ttl_ms: int = TTL_MS) -> None:
        self.client = EtcdClient(endpoints, timeout_s=3.0)
        self.store = EtcdStore(self.client)
        self.ownership = EtcdOwnership(self.client, Node(node_id, "127.0.0.1", 9000 + node_id),
                                       store=self.store, lease_ttl_ms=ttl_ms)
        self.events = Events(self.store)

    async def start(self) -> "Member":
        await self.ownership.start(self.events)
        return self

    async def stop(self) -> None:
        await self.ownership.stop()
        await self.client.close()


async def eventually(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {timeout}s: {what}")


@pytest.fixture
async def members(etcd):
    started: list[Member] = []

    async def start(node_id: int, ttl_ms: int = TTL_MS) -> Member:
        member = await Member(etcd.endpoints, node_id, ttl_ms).start()
        started.append(member)
        return member
    yield start
    for member in started:
        if not member.ownership._stopping:
            await member.stop()
        else:
            await member.client.close()


def spread_as_hashed(members: list[Member]) -> bool:
    ids = [m.ownership.local.node_id for m in members]
    return all(
        set(m.events.serving) == {p for p in range(50) if preferred_owner(p, ids) == m.ownership.local.node_id}
        for m in members
    )


async def test_a_single_node_claims_every_partition_with_the_owner_keys_create_revision_as_epoch(members):
    one = await members(1)
    await eventually(lambda: len(one.events.serving) == 50, 10, "node 1 owns all 50 partitions")
    kvs, _, _ = await one.client.range(keys.OWNERS, prefix_end(keys.OWNERS))
    assert {keys.id_of(kv.key, keys.OWNERS): kv.create_revision for kv in kvs} == one.events.serving
    assert sorted(one.ownership.owned()) == list(range(50))
    assert one.ownership.owner(17) == one.ownership.local
    assert one.ownership.nodes() == [Node(1, "127.0.0.1", 9001)]
    # Claimed -> LOADING; the store handed every record over -> LOADED (the lifecycle's names).
    await eventually(lambda: all(one.ownership.partition_state(p) is L.LOADED for p in range(50)), 10,
                     "every partition loaded")


async def test_three_nodes_split_the_partitions_by_rendezvous_hashing_and_see_the_same_owners(members):
    nodes = [await members(i) for i in (1, 2, 3)]
    await eventually(lambda: spread_as_hashed(nodes), 15, "partitions owned as hashed")
    await eventually(lambda: all(len(m.ownership.nodes()) == 3 for m in nodes), 5, "everyone sees 3 nodes")
    for p in range(50):
        owners = {m.ownership.owner(p) for m in nodes}
        assert len(owners) == 1 and None not in owners


async def test_a_joining_node_gets_its_share_by_handoff_never_with_two_owners_at_once(members):
    one = await members(1)
    await eventually(lambda: len(one.events.serving) == 50, 10, "node 1 owns all")
    two = await members(2)
    await eventually(lambda: spread_as_hashed([one, two]), 15, "node 2 got its share")
    moved = set(two.events.serving)
    assert 10 < len(moved) < 40
    for p in moved:
        lost_at = next(t for t, kind, q in one.events.log if q == p and kind == "lost")
        acquired_at = next(t for t, kind, q in two.events.log if q == p and kind == "acquired")
        assert lost_at < acquired_at
    assert one.ownership.stats.handoffs == len(moved)
    await eventually(lambda: all(two.ownership.partition_state(p) is L.LOADED for p in moved), 10, "node 2 loaded")
    assert all(one.ownership.partition_state(p) is L.UNOWNED for p in moved)


async def test_graceful_stop_hands_everything_over_without_waiting_for_the_lease(members):
    one, two = await members(1, ttl_ms=10000), await members(2, ttl_ms=10000)
    await eventually(lambda: spread_as_hashed([one, two]), 15, "spread over two nodes")
    started = time.monotonic()
    await two.stop()
    await eventually(lambda: len(one.events.serving) == 50, 5, "node 1 took everything")
    assert time.monotonic() - started < 5  # well inside the 10 s lease
    assert one.ownership.nodes() == [one.ownership.local]


async def test_a_paused_node_loses_its_partitions_after_the_ttl_and_its_writes_are_fenced(members):
    one, two = await members(1), await members(2)
    await eventually(lambda: spread_as_hashed([one, two]), 15, "spread over two nodes")
    partition, epoch = next(iter(two.events.serving.items()))
    # Node 2 stops refreshing its lease, as a process paused by SIGSTOP would.
    await two.ownership.lease.stop_keepalive()
    started = time.monotonic()
    await eventually(lambda: len(one.events.serving) == 50, 4 * TTL_MS / 1000, "node 1 took over")
    assert time.monotonic() - started >= 0.5 * TTL_MS / 1000
    assert two.events.serving == {}  # its own deadline passed: it stopped serving by itself
    assert two.ownership.owned() == [] and two.ownership.partition_state(partition) is L.UNOWNED
    # What it still had in its store is refused too.
    with pytest.raises(StorageError) as refused:
        await two.store.append(partition, [encode_record(OffsetCommitRecord("zombie", "t", 0, 1))])
    assert refused.value.error_code == ErrorCode.NOT_COORDINATOR


async def test_quorum_loss_stops_serving_within_the_ttl_and_ownership_returns_with_quorum(etcd, members):
    one, two = await members(1), await members(2)
    await eventually(lambda: spread_as_hashed([one, two]), 15, "spread over two nodes")
    lost = etcd.members[1:]
    for member in lost:
        etcd.kill(member)
    # Nobody can know whether its lease still holds: each node stops serving at its local deadline.
    await eventually(lambda: not one.events.serving and not two.events.serving, 3 * TTL_MS / 1000,
                     "both nodes stopped serving")
    for member in lost:
        etcd.start_member(member)
    await eventually(lambda: spread_as_hashed([one, two]), 60, "ownership back by itself")


async def test_a_killed_node_is_replaced_after_its_lease_expires(members):
    one, two = await members(1), await members(2)
    await eventually(lambda: spread_as_hashed([one, two]), 15, "spread over two nodes")
    # kill -9 leaves the lease to expire: stop everything of node 2 without telling etcd.
    await two.ownership.lease.stop_keepalive()
    for task in two.ownership._tasks:
        task.cancel()
    two.ownership._stopping = True
    started = time.monotonic()
    await eventually(lambda: len(one.events.serving) == 50, 3 * TTL_MS / 1000, "node 1 took over")
    assert time.monotonic() - started <= 2 * TTL_MS / 1000 + 0.5


async def test_cluster_metrics_count_owned_partitions_and_transactions(members):
    from prometheus_client import CollectorRegistry, generate_latest

    from cohort.coordinator.cluster.metrics import ClusterCollector
    from cohort_process import metric_value

    one = await members(1)
    await eventually(lambda: len(one.events.serving) == 50 and not one.events.loads, 10, "node 1 owns all")
    await one.store.append(0, [encode_record(OffsetCommitRecord("m", "t", 0, 1))])
    registry = CollectorRegistry()
    registry.register(ClusterCollector(one.store, one.ownership))
    text = generate_latest(registry).decode()
    assert metric_value(text, "cohort_cluster_owned_partitions") == 50
    assert metric_value(text, "cohort_cluster_nodes") == 1
    assert metric_value(text, "cohort_cluster_partition_claims_total") == 50
    assert metric_value(text, "cohort_cluster_etcd_transaction_seconds_count") == 1
    assert 0 < metric_value(text, "cohort_cluster_lease_remaining_seconds") <= TTL_MS / 1000


async def test_an_ownership_move_off_the_partition_lifecycle_table_raises():
    client = EtcdClient(["127.0.0.1:1"])  # never asked: no move below talks to etcd
    ownership = EtcdOwnership(client, Node(1, "127.0.0.1", 9001), num_partitions=4)
    try:
        for illegal in (L.LOADED, L.RELEASING, L.FAILED):
            with pytest.raises(IllegalPartitionTransition, match="partition 3: unowned -> "):
                ownership._move(3, illegal)
        ownership._move(3, L.CLAIMING)
        with pytest.raises(IllegalPartitionTransition, match="claiming -> loaded"):
            ownership._move(3, L.LOADED)  # served only after a load began
        ownership._move(3, L.LOADING)
        ownership._move(3, L.RELEASING)
        with pytest.raises(IllegalPartitionTransition, match="releasing -> loading"):
            ownership._move(3, L.LOADING)  # a partition being handed over is claimed again only once let go
        assert ownership.partition_state(3) is L.RELEASING and ownership.owned() == []
    finally:
        await client.close()
