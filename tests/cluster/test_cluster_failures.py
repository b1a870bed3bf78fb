"""Failure behaviour of `cohort serve --cluster` nodes on a real 3-member etcd, one scenario each:
graceful handoff, a paused (SIGSTOP) node fenced, etcd leader kill, etcd quorum loss."""
from __future__ import annotations

import asyncio
import signal
import time

import pytest
from cohort_process import CohortServer, metric_value

from cohort.client.connection import BrokerConnection
from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import OffsetCommitRequest, OffsetFetchRequest
from cohort.protocol.partitioning import partition_for

from test_cluster_e2e import status

pytestmark = pytest.mark.timeout(240)
GROUP, TOPIC = "failures", "events"
RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.REQUEST_TIMED_OUT}


def start_node(tmp_path, etcd, node_id: int, ttl_ms: int) -> CohortServer:
    return CohortServer(tmp_path / f"node{node_id}", "--cluster", etcd.url, "--node-id", str(node_id),
                        "--cluster.lease.ttl.ms", str(ttl_ms)).start()


def owned(node: CohortServer) -> float:
    try:
        return metric_value(node.scrape(), "cohort_cluster_owned_partitions")
    except (OSError, AssertionError):
        return 0


async def until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = await predicate() if asyncio.iscoroutinefunction(predicate) else predicate()
        if result:
            return result
        await asyncio.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


async def commit(node: CohortServer, offset: int, timeout_ms: int = 15000) -> int:
    """One OffsetCommit of GROUP straight to `node`; its error code."""
    Topic = OffsetCommitRequest.OffsetCommitRequestTopic
    request = OffsetCommitRequest(group_id=GROUP, generation_id_or_member_epoch=-1, member_id="", topics=[
        Topic(name=TOPIC, partitions=[Topic.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                                          committed_metadata="")])])
    conn = BrokerConnection("127.0.0.1", node.port, request_timeout_ms=timeout_ms)
    try:
        response = await conn.request(request, version=2, timeout_ms=timeout_ms)
        return response.topics[0].partitions[0].error_code
    finally:
        await conn.close()


async def commit_accepted(node: CohortServer, offset: int, timeout: float = 30) -> None:
    """Commit through `node`, again while it answers a retriable error (e.g. still loading the group)."""
    async def accepted():
        error = await commit(node, offset)
        assert error in RETRIABLE | {0}, ErrorCode(error).name
        return error == 0
    await until(accepted, timeout, f"offset {offset} committed through node {node.port}")


async def fetched(node: CohortServer, timeout: float = 30) -> int:
    """The committed offset read through `node`, once it has loaded the group."""
    async def answer():
        error, offset = await fetch(node)
        return (offset,) if error == 0 else None
    (offset,) = await until(answer, timeout, f"node {node.port} answers OffsetFetch")
    return offset


async def fetch(node: CohortServer) -> tuple[int, int]:
    request = OffsetFetchRequest(group_id=GROUP, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])])
    conn = BrokerConnection("127.0.0.1", node.port)
    try:
        response = await conn.request(request, version=1)
        part = response.topics[0].partitions[0]
        return part.error_code, part.committed_offset
    finally:
        await conn.close()


def coordinator(nodes: list[CohortServer], etcd) -> CohortServer:
    owner_id = status(etcd)["partitions"][partition_for(GROUP, 50)]["owner"]
    return next(n for n in nodes if n.args[n.args.index("--node-id") + 1] == str(owner_id))


async def committed_through_owner(nodes, etcd, timeout: float = 30) -> int:
    async def answer():
        live = [n for n in nodes if n.process.poll() is None]
        try:
            error, offset = await fetch(coordinator(live, etcd))
        except (StopIteration, OSError, Exception):
            return None
        return (offset,) if error == 0 else None
    (offset,) = await until(answer, timeout, "the group's coordinator answers OffsetFetch")
    return offset


@pytest.fixture
def cluster_nodes(etcd, tmp_path):
    started: list[CohortServer] = []

    def start(node_id: int, ttl_ms: int = 2000) -> CohortServer:
        node = start_node(tmp_path, etcd, node_id, ttl_ms)
        started.append(node)
        return node
    yield start
    for node in started:
        if node.process.poll() is None:
            node.process.send_signal(signal.SIGCONT)
            node.stop()
    for node in started:
        assert "Traceback" not in node.stderr(), node.output()


async def test_sigterm_hands_every_partition_over_without_waiting_for_the_lease(etcd, cluster_nodes):
    one, two = cluster_nodes(1, ttl_ms=10000), cluster_nodes(2, ttl_ms=10000)
    await until(lambda: owned(one) + owned(two) == 50 and owned(one) and owned(two), 30, "spread over 2 nodes")
    await commit_accepted(coordinator([one, two], etcd), 7)
    started = time.monotonic()
    two.signal(signal.SIGTERM)
    assert two.wait(30) == 0
    await until(lambda: owned(one) == 50, 5, "node 1 owns everything")
    assert time.monotonic() - started < 5  # the lease (10 s) was not waited for
    assert await fetched(one) == 7


async def test_a_paused_node_is_fenced_and_rejoins_as_a_normal_node(etcd, cluster_nodes):
    one, two = cluster_nodes(1), cluster_nodes(2)
    await until(lambda: owned(one) + owned(two) == 50 and owned(one) and owned(two), 30, "spread over 2 nodes")
    zombie = coordinator([one, two], etcd)
    survivor = two if zombie is one else one
    await commit_accepted(zombie, 1)

    zombie.signal(signal.SIGSTOP)
    await until(lambda: owned(survivor) == 50, 15, "the survivor took every partition")
    await commit_accepted(survivor, 2)
    zombie.signal(signal.SIGCONT)
    # The first thing it is asked after waking up: to write with its stale epoch. Refused.
    assert await commit(zombie, 666) in RETRIABLE
    assert await fetched(survivor) == 2
    # It rejoins: its share comes back by handoff, with the data the survivor wrote.
    await until(lambda: owned(zombie) > 0 and owned(zombie) + owned(survivor) == 50, 30, "the node rejoined")
    assert await committed_through_owner([one, two], etcd) == 2


async def test_commits_continue_through_an_etcd_leader_kill_and_none_acknowledged_is_lost(etcd, cluster_nodes):
    one = cluster_nodes(1, ttl_ms=6000)
    await until(lambda: owned(one) == 50, 30, "node 1 owns everything")
    acknowledged = 0
    for offset in range(1, 11):
        await commit_accepted(one, offset)
        acknowledged = offset
    etcd.kill(etcd.leader())
    started = time.monotonic()
    for offset in range(11, 31):
        error = await commit(one, offset)
        while error != 0:
            assert error in RETRIABLE, ErrorCode(error).name
            await asyncio.sleep(0.2)
            assert time.monotonic() - started < 60
            error = await commit(one, offset)
        acknowledged = offset
    assert await committed_through_owner([one], etcd) == acknowledged == 30


async def test_quorum_loss_fails_commits_with_a_retriable_error_and_service_returns_by_itself(etcd, cluster_nodes):
    one = cluster_nodes(1, ttl_ms=2000)
    await until(lambda: owned(one) == 50, 30, "node 1 owns everything")
    await commit_accepted(one, 1)
    lost = [m for m in etcd.members if m is not etcd.members[0]]
    for member in lost:
        etcd.kill(member)
    started = time.monotonic()
    error = await commit(one, 2)
    assert error in RETRIABLE and error != 0, ErrorCode(error).name
    assert time.monotonic() - started < 15
    for member in lost:
        etcd.start_member(member)

    async def accepted():
        return await commit(one, 3, timeout_ms=10000) == 0
    await until(accepted, 60, "commits accepted again with a quorum")
    assert await committed_through_owner([one], etcd) == 3
