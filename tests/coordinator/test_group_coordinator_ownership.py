"""Partitions come and go one at a time, as an `Ownership` says: `acquired(p)` loads p from the store
(its groups wait: COORDINATOR_LOAD_IN_PROGRESS, Heartbeat NONE), `lost(p)` answers p's parked requests
NOT_COORDINATOR, forgets its groups and releases it in the store; a partition this node does not own
answers NOT_COORDINATOR. Two coordinators share one data dir over a real offsets log."""
from __future__ import annotations

import asyncio

import pytest

from cohort.coordinator.contracts.partition_lifecycle import PartitionLifecycle
from cohort.coordinator.contracts.ownership import Node
from cohort.coordinator.log.segments import partition_dir
from cohort.coordinator.server.static_ownership import StaticOwnership
from cohort.protocol import messages as m
from group_harness import CTX, E, FailingLog, Harness

NODES = [Node(0, "127.0.0.1", 9092), Node(1, "127.0.0.1", 9093)]


class GatedLog(FailingLog):
    """The real log, except that a partition's load waits at its first chunk until the test opens the gate."""

    gate: asyncio.Event | None = None

    async def load(self, partition, epoch=0):
        async for chunk in super().load(partition, epoch):
            if self.gate is not None:
                await self.gate.wait()
            yield chunk
        if self.gate is not None:
            await self.gate.wait()


async def node(data_dir, index: int, *, gated: bool = False) -> tuple[Harness, StaticOwnership]:
    # 5 partitions: node 0 owns 0, 2, 4; node 1 owns 1, 3
    h = Harness(data_dir, flush_policy="always", log_type=GatedLog if gated else FailingLog)
    if gated:
        h.log.gate = asyncio.Event()
    ownership = StaticOwnership(NODES[index], NODES, h.config.offsets_topic_num_partitions)
    await h.log.open()
    await ownership.start(h.coordinator.partitions)
    if not gated:
        await h.coordinator.partitions.wait_loaded()
    return h, ownership


def group_on(h: Harness, partition: int, prefix: str = "g") -> str:
    return next(f"{prefix}{i}" for i in range(10_000) if h.coordinator.partition_for(f"{prefix}{i}") == partition)


@pytest.fixture
async def nodes(tmp_path):
    started: list[Harness] = []

    async def start(index: int, **kwargs):
        h, ownership = await node(tmp_path, index, **kwargs)
        started.append(h)
        return h, ownership

    yield start
    for h in started:
        if isinstance(h.log, GatedLog):
            h.log.gate.set()
        h.coordinator.shutdown()
        await h.coordinator.partitions.wait_loaded()
        await h.log.close()


async def test_a_partition_this_node_does_not_own_answers_not_coordinator(nodes):
    a, _ = await nodes(0)
    mine, theirs = group_on(a, 0), group_on(a, 1)  # partition p belongs to node p mod 2
    assert (await a.join_now(mine)).error_code == E.MEMBER_ID_REQUIRED
    assert (await a.join_now(theirs)).error_code == E.NOT_COORDINATOR
    assert await a.commit(theirs, {("t", 0): 5}) == {("t", 0): E.NOT_COORDINATOR}
    assert await a.heartbeat(theirs, "m", 1) == E.NOT_COORDINATOR
    assert (await a.fetch(theirs, {"t": [0]}))[0] == E.NOT_COORDINATOR
    assert await a.commit(mine, {("t", 0): 5}) == {("t", 0): E.NONE}


async def test_while_a_partition_loads_its_groups_wait_and_heartbeats_pass(nodes):
    a, _ = await nodes(0, gated=True)
    g = group_on(a, 2)
    assert (await a.join_now(g)).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert await a.commit(g, {("t", 0): 5}) == {("t", 0): E.COORDINATOR_LOAD_IN_PROGRESS}
    assert await a.heartbeat(g, "m", 1) == E.NONE
    listed = await a.coordinator.list_groups(m.ListGroupsRequest(states_filter=[], types_filter=[]), 4, CTX)
    assert listed.error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    a.log.gate.set()
    await a.coordinator.partitions.wait_loaded()
    assert await a.commit(g, {("t", 0): 5}) == {("t", 0): E.NONE}


async def test_a_lost_partition_answers_its_parked_requests_and_its_next_owner_serves_its_offsets(nodes):
    a, _ = await nodes(0)
    b, _ = await nodes(1)
    g = group_on(a, 4)
    other = group_on(a, 2)
    await a.commit(g, {("t", 0): 41, ("t", 1): 42})
    await a.commit(other, {("t", 0): 7})
    first = await a.new_member(g)
    parked = a.join(g, first, session_ms=30000)  # a JoinGroup waiting for the rebalance to complete
    second = await a.new_member(g)
    parked_too = a.join(g, second, session_ms=30000)
    await asyncio.sleep(0)

    a.coordinator.partitions.lost(4)
    await a.coordinator.partitions.wait_loaded()
    assert (await asyncio.wait_for(parked, 5)).error_code == E.NOT_COORDINATOR
    assert (await asyncio.wait_for(parked_too, 5)).error_code == E.NOT_COORDINATOR
    assert a.group(g) is None and a.coordinator.offsets.get(g, "t", 0) is None
    assert a.log.partition_state(4) is PartitionLifecycle.UNOWNED
    assert await a.commit(g, {("t", 0): 43}) == {("t", 0): E.NOT_COORDINATOR}
    assert (await a.fetch(other, {"t": [0]}))[1] == {("t", 0): (7, "", 0)}  # partition 2 is still served

    b.coordinator.partitions.acquired(4, 1)
    await b.coordinator.partitions.wait_loaded()
    assert (await b.fetch(g, {"t": [0, 1]}))[1] == {("t", 0): (41, "", 0), ("t", 1): (42, "", 0)}
    assert await b.commit(g, {("t", 0): 44}) == {("t", 0): E.NONE}


async def test_a_partition_another_node_still_holds_fails_to_load_and_answers_not_coordinator(nodes, tmp_path):
    a, _ = await nodes(0)
    b, _ = await nodes(1)
    b.coordinator.partitions.acquired(2, 1)  # partition 2 is node 0's: its directory is locked by a's log
    await b.coordinator.partitions.wait_loaded()
    assert "owned by another process" in b.coordinator.partitions.failed_partitions()[2]
    g = group_on(b, 2)
    assert (await b.join_now(g)).error_code == E.NOT_COORDINATOR
    assert (await a.join_now(g)).error_code == E.MEMBER_ID_REQUIRED


async def test_a_partition_lost_while_it_loads_is_given_up_and_left_free_for_its_next_owner(nodes, tmp_path):
    first, _ = await nodes(0)
    g = group_on(first, 0)
    await first.commit(g, {("t", 0): 9})
    first.coordinator.shutdown()
    await first.log.close()
    a, _ = await nodes(0, gated=True)  # partitions load one at a time: 0 first, held at its first chunk
    await asyncio.sleep(0.2)
    assert a.log.partition_state(0) is PartitionLifecycle.LOADING
    a.coordinator.partitions.lost(0)
    a.log.gate.set()  # the others go on
    await a.coordinator.partitions.wait_loaded()
    assert a.log.partition_state(0) is PartitionLifecycle.UNOWNED
    assert (await a.join_now(g)).error_code == E.NOT_COORDINATOR
    assert 0 not in a.coordinator.partitions.failed_partitions()
    b, _ = await nodes(1)
    b.coordinator.partitions.acquired(0, 1)
    await b.coordinator.partitions.wait_loaded()
    assert (await b.fetch(g, {"t": [0]}))[1] == {("t", 0): (9, "", 0)}


async def test_the_coordinator_moves_its_partitions_through_the_shared_lifecycle_table(nodes):
    from cohort.coordinator.contracts.partition_lifecycle import IllegalPartitionTransition, PartitionLifecycle as L
    a, _ = await nodes(0)
    states = a.coordinator.partitions.states
    assert [states[p] for p in range(5)] == [L.LOADED, L.UNOWNED, L.LOADED, L.UNOWNED, L.LOADED]
    assert a.coordinator.partitions.partition_states() == {0: "loaded", 2: "loaded", 4: "loaded"}

    a.coordinator.partitions.lost(4)
    assert states[4] is L.RELEASING  # parked requests answered, the store's release under way
    g = group_on(a, 4)
    assert (await a.join_now(g)).error_code == E.NOT_COORDINATOR
    a.coordinator.partitions.acquired(4, 2)  # owned again before the release ended: loads once it has
    await a.coordinator.partitions.wait_loaded()
    assert states[4] is L.LOADED
    with pytest.raises(IllegalPartitionTransition):
        states.move(4, L.CLAIMING)  # the table refuses what no layer may do


async def test_the_log_and_the_runtime_move_one_tracker_so_a_partition_the_disk_fails_while_it_loads_is_not_served(
        nodes, tmp_path):
    first, _ = await nodes(0)
    g = group_on(first, 2)
    await first.commit(g, {("t", 0): 9})
    member = await first.new_member(g)
    first.coordinator.shutdown()
    await first.log.close()
    # The disk refuses the next owner's first mark of partition 2 (written beside its load): its temporary
    # file's name is taken by a directory.
    (partition_dir(tmp_path, 2) / "checkpoint.json.tmp").mkdir()
    a, _ = await nodes(0)
    assert a.coordinator.partitions.states is a.log.states  # one tracker of the node's partitions
    assert a.log.partition_state(2) is PartitionLifecycle.FAILED
    assert "checkpoint" in a.coordinator.partitions.failed_partitions()[2]
    assert (await a.join_now(g)).error_code == E.NOT_COORDINATOR
    assert await a.heartbeat(g, member, 1) == E.NOT_COORDINATOR
    assert (await a.fetch(g, {"t": [0]}))[0] == E.NOT_COORDINATOR
    assert await a.commit(group_on(a, 4), {("t", 0): 5}) == {("t", 0): E.NONE}  # the others are served


class HeldLog(FailingLog):
    """The real log, except that while `held` is an unset event an append's answer waits for it: the records
    are appended (and made durable) at once, their caller hears so only once the test lets it."""

    held: asyncio.Event | None = None

    def append(self, partition, records):
        durable = super().append(partition, records)
        if self.held is None:
            return durable
        told = asyncio.get_running_loop().create_future()

        async def tell() -> None:
            await self.held.wait()
            try:
                told.set_result(await durable)
            except Exception as exc:  # noqa: BLE001 - told as the log said it
                told.set_exception(exc)

        told.relay = asyncio.get_running_loop().create_task(tell())
        return told


async def test_each_partition_has_a_shard_of_its_own_made_by_its_load_and_dropped_with_everything_when_it_goes(
        tmp_path):
    h = Harness(tmp_path, flush_policy="always", log_type=HeldLog)
    await h.start()
    try:
        runtime = h.coordinator.partitions
        g, other = group_on(h, 3), group_on(h, 1)
        assert await h.commit(g, {("t", 0): 5}) == {("t", 0): E.NONE}
        assert await h.commit(other, {("t", 0): 7}) == {("t", 0): E.NONE}
        shard = runtime.shards[3]
        assert shard.partition == 3 and shard.offsets.get(g, "t", 0).offset == 5 and g in shard.groups
        assert runtime.shards[1].offsets.get(g, "t", 0) is None  # a group lives in its partition's shard only
        assert runtime.shards[1].offsets.get(other, "t", 0).offset == 7

        # A commit made durable after its partition went: nothing of it is in memory, the client is told
        # NOT_COORDINATOR (as Kafka fails the writes pending when it unloads a partition).
        h.log.held = asyncio.Event()
        committing = asyncio.ensure_future(h.commit(g, {("t", 0): 6, ("u", 0): 1}))
        await asyncio.sleep(0.05)
        assert not committing.done()
        runtime.lost(3)
        assert runtime.shards[3] is None and h.group(g) is None and h.coordinator.offsets.get(g, "t", 0) is None
        h.log.held.set()
        assert await asyncio.wait_for(committing, 5) == {("t", 0): E.NOT_COORDINATOR, ("u", 0): E.NOT_COORDINATOR}
        await runtime.wait_loaded()
        assert runtime.shards[3] is None and h.group(g) is None and h.coordinator.offsets.get(g, "u", 0) is None
        assert g not in h.coordinator.offsets.groups() and g not in [x.group_id for x in h.coordinator.groups()]
        h.log.held = None

        # Loaded again, a fresh shard replays what is durable, the commit that was answered NOT_COORDINATOR included.
        runtime.acquired(3, 1)
        await runtime.wait_loaded()
        assert runtime.shards[3] is not shard
        assert (await h.fetch(g, {"t": [0], "u": [0]}))[1] == {("t", 0): (6, "", 0), ("u", 0): (1, "", 0)}
        assert (await h.fetch(other, {"t": [0]}))[1] == {("t", 0): (7, "", 0)}
    finally:
        h.log.held = None
        await h.close()
