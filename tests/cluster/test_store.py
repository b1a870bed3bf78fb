"""`EtcdStore` against a real 3-member etcd: durable appends, fencing, splitting, paged loads, failures."""
from __future__ import annotations

import asyncio
import time

import pytest

from cohort.coordinator.cluster import keys
from cohort.coordinator.cluster.etcd import EtcdClient, compare_create_revision, op_delete, op_put
from cohort.coordinator.cluster.node import ClusterNode
from cohort.coordinator.cluster.store import EtcdStore
from cohort.coordinator.config import CoordinatorConfig
from cohort.coordinator.contracts.ownership import Node
from cohort.coordinator.contracts.partition_lifecycle import IllegalPartitionTransition, PartitionLifecycle as L
from cohort.coordinator.contracts.store import StorageError
from cohort.coordinator.records.types import OffsetCommitRecord, encode_record
from cohort.protocol.errors import ErrorCode


async def claim(etcd: EtcdClient, partition: int, node_id: int, ttl_s: int = 60) -> tuple[int, int]:
    """Create owner/<p> under a fresh lease the way a node does: (epoch, lease id)."""
    lease_id, _ = await etcd.grant(ttl_s)
    key = keys.owner_key(partition)
    won, revision, _ = await etcd.txn([compare_create_revision(key, 0)],
                                      [op_put(key, str(node_id).encode(), lease=lease_id)])
    assert won, f"owner/{partition} already exists"
    return revision, lease_id


def commit(group: str, partition: int, offset: int) -> tuple[bytes, bytes]:
    return encode_record(OffsetCommitRecord(group, "events", partition, offset, commit_timestamp=1))


async def load_all(store: EtcdStore, partition: int, epoch: int) -> dict[bytes, bytes]:
    loaded: dict[bytes, bytes] = {}
    async for chunk in store.load(partition, epoch):
        for key, value in chunk:
            assert key not in loaded
            loaded[key] = value
    return loaded


async def eventually(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = await predicate()
        if result:
            return result
        await asyncio.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


@pytest.fixture
async def client(etcd):
    c = EtcdClient(etcd.endpoints, timeout_s=3.0)
    await c.connect()
    yield c
    await c.close()


async def test_appended_records_come_back_on_load_latest_value_per_key_without_tombstones(client):
    epoch, _ = await claim(client, 3, node_id=1)
    store = EtcdStore(client)
    assert await load_all(store, 3, epoch) == {}
    await store.append(3, [commit("g", 0, 10), commit("g", 1, 20)])
    await store.append(3, [commit("g", 0, 11), (commit("g", 1, 0)[0], None)])

    reader = EtcdStore(client)
    assert await load_all(reader, 3, epoch) == dict([commit("g", 0, 11)])


async def test_a_commit_is_one_revision_of_its_own_key_and_nothing_else(client):
    """What a commit leaves in etcd's history (its size: docs/cluster-operations.md): a put of its key;
    the write fence w/<p> is compared, not rewritten."""
    epoch, _ = await claim(client, 8, node_id=1)
    store = EtcdStore(client)
    await load_all(store, 8, epoch)
    (fence,), _, _ = await client.range(keys.write_fence_key(8))
    for offset in range(1, 11):
        await store.append(8, [commit("one", 0, offset), commit("one", 1, offset)])
    assert store.stats.transactions == 10
    assert [kv.mod_revision for kv in (await client.range(keys.write_fence_key(8)))[0]] == [fence.mod_revision]
    written, _, _ = await client.range(b"o/8/", b"o/80")
    assert len(written) == 2 and written[0].mod_revision == written[1].mod_revision > fence.mod_revision


async def test_concurrent_appends_share_rounds_and_all_are_durable(client):
    epoch, _ = await claim(client, 5, node_id=1)
    store = EtcdStore(client)
    await load_all(store, 5, epoch)
    await asyncio.gather(*(store.append(5, [commit(f"g{i}", 0, i)]) for i in range(200)))
    assert store.stats.transactions < 200  # group commit: many appends per transaction
    assert await load_all(EtcdStore(client), 5, epoch) == dict(commit(f"g{i}", 0, i) for i in range(200))


async def test_rounds_of_several_partitions_share_a_transaction_and_a_moved_partition_fails_alone(client):
    epochs = {p: (await claim(client, p, node_id=1))[0] for p in (20, 21, 22)}
    store = EtcdStore(client, max_in_flight=1)
    for p, epoch in epochs.items():
        await load_all(store, p, epoch)
    await asyncio.gather(*(store.append(p, [commit("shared", p, 1)]) for p in epochs))
    assert store.stats.transactions == 2  # 20 alone at once; 21 and 22 queued meanwhile, then together
    # Partition 21 moves to another node behind the store's back: its guard fails, the others' hold.
    await client.txn([], [op_delete(keys.owner_key(21))])
    moved_epoch, _ = await claim(client, 21, node_id=2)
    fenced = []
    store.on_fenced = fenced.append
    outcomes = await asyncio.gather(*(store.append(p, [commit("shared", p, 2)]) for p in epochs),
                                    return_exceptions=True)
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], StorageError) and outcomes[1].error_code == ErrorCode.NOT_COORDINATOR
    assert fenced == [21] and store.stats.fenced_writes == 1
    for p in (20, 22):
        assert await load_all(EtcdStore(client), p, epochs[p]) == dict([commit("shared", p, 2)])
    assert await load_all(EtcdStore(client), 21, moved_epoch) == dict([commit("shared", 21, 1)])


async def test_appends_queued_before_the_partition_is_loaded_again_finish_or_fail_retriably(client):
    epoch, _ = await claim(client, 11, node_id=1)
    store = EtcdStore(client, max_in_flight=1)
    await load_all(store, 11, epoch)
    first = asyncio.ensure_future(store.append(11, [commit("again", 0, 1)]))
    await asyncio.sleep(0)  # its transaction is in flight
    second = asyncio.ensure_future(store.append(11, [commit("again", 1, 2)]))
    await asyncio.sleep(0)  # queued behind it
    # A write found the partition stale meanwhile (FAILED: not served until loaded again) and it is loaded once
    # more while those appends are still in flight and queued. The load rewrites w/11 (the write fence), so
    # what the earlier load queued can no longer land on top of what it reads.
    store.states.move(11, L.FAILED)
    await load_all(store, 11, epoch)
    outcomes = await asyncio.wait_for(asyncio.gather(first, second, return_exceptions=True), 10)
    for outcome in outcomes:
        assert outcome is None or (isinstance(outcome, StorageError)
                                   and outcome.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE), outcome
    acknowledged = dict(record for record, outcome in zip([commit("again", 0, 1), commit("again", 1, 2)], outcomes)
                        if outcome is None)
    assert await load_all(EtcdStore(client), 11, epoch) == acknowledged


async def test_a_round_over_128_operations_is_split_into_several_transactions(client):
    epoch, _ = await claim(client, 1, node_id=1)
    store = EtcdStore(client)
    await load_all(store, 1, epoch)
    records = [commit("big", i, i) for i in range(1000)]
    await store.append(1, records)
    assert store.stats.transactions == 8  # ceil(1000 / 127): room kept for the check of an unknown outcome
    assert await load_all(EtcdStore(client), 1, epoch) == dict(records)


async def test_a_store_told_etcds_larger_limits_writes_a_big_round_in_one_transaction(client):
    # the fixture's etcd runs with --max-txn-ops 1024 (cluster.etcd.max.txn.ops on a node)
    epoch, _ = await claim(client, 6, node_id=1)
    store = EtcdStore(client, max_txn_ops=1024)
    await load_all(store, 6, epoch)
    records = [commit("bigger", i, i) for i in range(1000)]
    await store.append(6, records)
    assert store.stats.transactions == 1
    assert await load_all(EtcdStore(client), 6, epoch) == dict(records)


def test_a_node_writes_within_the_etcd_limits_its_settings_name():
    config = CoordinatorConfig(cluster="etcd://127.0.0.1:1", cluster_etcd_max_txn_ops=1024,
                               cluster_etcd_max_request_bytes=4 * 1024 * 1024)
    store = ClusterNode(config, Node(1, "127.0.0.1", 9092)).store
    assert store.max_txn_ops == 1024
    assert 1536 * 1024 < store.max_txn_bytes < 4 * 1024 * 1024  # room left for the framing


async def test_a_round_over_the_request_size_limit_is_split_by_bytes(client):
    epoch, _ = await claim(client, 2, node_id=1)
    store = EtcdStore(client)
    await load_all(store, 2, epoch)
    # Ten 400 KiB records: 4 MiB in one request would be refused by etcd (1.5 MiB limit).
    records = [(commit("wide", i, 0)[0], bytes([i]) * 400 * 1024) for i in range(10)]
    await store.append(2, records)
    assert store.stats.transactions >= 3
    assert await load_all(EtcdStore(client), 2, epoch) == dict(records)


async def test_load_reads_in_pages(client):
    epoch, _ = await claim(client, 4, node_id=1)
    store = EtcdStore(client)
    await load_all(store, 4, epoch)
    records = [commit("paged", i, i) for i in range(100)]
    await store.append(4, records)
    reader = EtcdStore(client, page_size=7)
    chunks = [chunk async for chunk in reader.load(4, epoch)]
    assert all(len(chunk) <= 7 for chunk in chunks) and len(chunks) >= 15
    assert dict(kv for chunk in chunks for kv in chunk) == dict(records)


async def test_a_node_whose_lease_lapsed_cannot_write_after_takeover(client):
    # Node 1 wins partition 9 under a 2 s lease and then stops refreshing it (a paused process).
    epoch_1, _ = await claim(client, 9, node_id=1, ttl_s=2)
    zombie = EtcdStore(client)
    await load_all(zombie, 9, epoch_1)
    await zombie.append(9, [commit("z", 0, 1)])

    async def owner_gone():
        kvs, _, _ = await client.range(keys.owner_key(9))
        return not kvs
    await eventually(owner_gone, 10, "owner/9 deleted when the lease expired")
    epoch_2, _ = await claim(client, 9, node_id=2)
    successor = EtcdStore(client)
    assert await load_all(successor, 9, epoch_2) == dict([commit("z", 0, 1)])

    fenced = []
    zombie.on_fenced = fenced.append
    with pytest.raises(StorageError) as refused:
        await zombie.append(9, [commit("z", 0, 666)])
    assert refused.value.error_code == ErrorCode.NOT_COORDINATOR
    assert fenced == [9] and zombie.stats.fenced_writes == 1
    # Not served from the moment its write was fenced (the ownership then has the runtime let it go).
    assert zombie.partition_state(9) is L.FAILED and "another node" in str(zombie.partition_error(9))
    with pytest.raises(StorageError):  # and it stays refused without asking etcd again
        await zombie.append(9, [commit("z", 0, 667)])
    assert zombie.stats.fenced_writes == 1
    await successor.append(9, [commit("z", 1, 2)])
    assert await load_all(EtcdStore(client), 9, epoch_2) == dict([commit("z", 0, 1), commit("z", 1, 2)])


async def test_release_finishes_queued_appends_and_refuses_later_ones(client):
    epoch, _ = await claim(client, 6, node_id=1)
    store = EtcdStore(client)
    assert store.partition_state(6) is L.UNOWNED
    await load_all(store, 6, epoch)
    assert store.partition_state(6) is L.LOADED
    pending = [asyncio.ensure_future(store.append(6, [commit("r", i, i)])) for i in range(20)]
    await asyncio.sleep(0)
    releasing = asyncio.ensure_future(store.release(6))
    await asyncio.sleep(0)
    assert store.partition_state(6) is L.RELEASING  # the queued appends finish; later ones are refused
    await releasing
    assert store.partition_state(6) is L.UNOWNED
    await asyncio.gather(*pending)
    with pytest.raises(StorageError) as refused:
        await store.append(6, [commit("r", 99, 99)])
    assert refused.value.error_code == ErrorCode.NOT_COORDINATOR
    assert await load_all(EtcdStore(client), 6, epoch) == dict(commit("r", i, i) for i in range(20))


async def test_quorum_loss_fails_appends_with_a_retriable_error_and_service_returns(etcd, client):
    epoch, _ = await claim(client, 8, node_id=1)
    store = EtcdStore(client)
    stale: list[int] = []
    store.on_stale = stale.append  # the ownership's part: load the partition again
    await load_all(store, 8, epoch)
    await store.append(8, [commit("q", 0, 1)])
    survivor, *lost = etcd.members
    for member in lost:
        etcd.kill(member)
    started = time.monotonic()
    store.serving_until = lambda: started + 4  # the lease's local deadline, as the ownership sets it
    with pytest.raises(StorageError) as failed:
        await store.append(8, [commit("q", 0, 2)])
    # the outcome stayed unknown until the lease's deadline: the partition is given up, not answered "not applied"
    assert 4 <= time.monotonic() - started < 10
    assert failed.value.error_code == ErrorCode.REQUEST_TIMED_OUT and failed.value.error_code.retriable
    assert stale == [8] and store.partition_state(8) is L.FAILED  # no append until it is loaded again
    await store.release(8)
    assert store.partition_state(8) is L.UNOWNED
    for member in lost:
        etcd.start_member(member)
    store.serving_until = lambda: time.monotonic() + 60
    loaded = False

    async def accepted():
        nonlocal loaded
        try:
            if not loaded:
                await load_all(store, 8, epoch)
                loaded = True
            await store.append(8, [commit("q", 0, 3)])
            return True
        except StorageError as exc:
            assert exc.error_code in (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_COORDINATOR)
            return False
    await eventually(accepted, 60, "appends accepted again once etcd has a quorum")
    assert await load_all(EtcdStore(client), 8, epoch) == dict([commit("q", 0, 3)])


async def test_appends_continue_through_an_etcd_leader_kill_and_none_acknowledged_is_lost(etcd, client):
    epoch, _ = await claim(client, 7, node_id=1)
    store = EtcdStore(client)
    await load_all(store, 7, epoch)
    acknowledged: dict[bytes, bytes] = {}
    failures = 0

    async def writer():
        nonlocal failures
        for i in range(400):
            record = commit("leader", i % 40, i)
            try:
                await store.append(7, [record])
                acknowledged[record[0]] = record[1]
            except StorageError as exc:
                assert exc.error_code == ErrorCode.REQUEST_TIMED_OUT
                failures += 1
            if i == 60:
                etcd.kill(etcd.leader())
    await asyncio.wait_for(writer(), 120)
    assert len(acknowledged) == 40
    assert await load_all(EtcdStore(client), 7, epoch) == acknowledged


async def test_a_store_move_off_the_partition_lifecycle_table_raises(client):
    epoch, _ = await claim(client, 14, node_id=1)
    store = EtcdStore(client)
    await load_all(store, 14, epoch)
    assert store.partition_state(14) is L.LOADED and store.states.loaded == {14}
    with pytest.raises(IllegalPartitionTransition, match="partition 14: loaded -> claiming"):
        store.states.move(14, L.CLAIMING)  # a loaded partition is not claimed
    await store.release(14)
    assert store.partition_state(14) is L.UNOWNED
    with pytest.raises(IllegalPartitionTransition, match="partition 14: unowned -> loaded"):
        store.states.move(14, L.LOADED)  # a released partition is served again only through a new load
    assert store.partition_state(14) is L.UNOWNED
