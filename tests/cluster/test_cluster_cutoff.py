"""Never two coordinators answering for one group: a node cut off from etcd (its links black-holed by a
`LinkProxy`), or paused past its lease TTL (SIGSTOP, then SIGCONT), stops answering as coordinator
once its lease could have lapsed, while another node takes the group over.

A prober asks both nodes for the group's offsets over and over (OffsetFetch, one connection each).
The two-coordinator window is how long the old coordinator still answered error 0 after the new one
was first asked and answered error 0: (last OK answer received from the old) - (first OK request sent
to the new), which can only overstate it. It must be 0.

An answer the old node made before it was paused and sent after SIGCONT is no second coordinator (it
is an answer delayed, as a slow network delays one), but seen from the client it cannot be told from
one made after the pause. So the old node's prober has no request in flight when the node is
interrupted, and sends its next one only once the node is seen stopped: every OK answer of the old
node to a request sent after that was made after the pause.
"""
from __future__ import annotations

import asyncio
import contextlib
import pathlib
import signal
import time
from dataclasses import dataclass, field

import pytest
from cohort_process import CohortServer
from link_proxy import LinkProxy
from test_cluster_failures import owned, until

from cohort.client.connection import BrokerConnection
from cohort.coordinator.cluster.ownership import preferred_owner
from cohort.protocol.messages import OffsetCommitRequest, OffsetFetchRequest
from cohort.protocol.partitioning import partition_for

pytestmark = pytest.mark.timeout(240)
TTL_MS = 2000
TOPIC = "events"


@dataclass
class Prober:
    """OffsetFetch of `group` to one node, again and again: (sent, received, error) of each answer."""

    node: CohortServer
    group: str
    answers: list[tuple[float, float, int]] = field(default_factory=list)
    # held while a request is in flight: whoever holds it knows that none is
    in_flight: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def run(self, stop: asyncio.Event) -> None:
        request = OffsetFetchRequest(group_id=self.group, topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])])
        conn = None
        while not stop.is_set():
            try:
                if conn is None:
                    conn = BrokerConnection("127.0.0.1", self.node.port, request_timeout_ms=60000)
                async with self.in_flight:
                    sent = time.monotonic()
                    response = await conn.request(request, version=1, timeout_ms=60000)
                    error = response.error_code or response.topics[0].partitions[0].error_code
                    self.answers.append((sent, time.monotonic(), error))
            except (OSError, asyncio.TimeoutError, TimeoutError, ConnectionError):
                if conn is not None:
                    await conn.close()
                conn = None
            await asyncio.sleep(0.02)
        if conn is not None:
            await conn.close()

    def first_ok_sent(self) -> float | None:
        return min((sent for sent, _, error in self.answers if error == 0), default=None)


async def keep_committing(node: CohortServer, group: str, stop: asyncio.Event) -> None:
    """Commits to `node` one after another (so that writes are in flight when etcd goes away)."""
    Topic = OffsetCommitRequest.OffsetCommitRequestTopic
    offset, conn = 0, None
    while not stop.is_set():
        offset += 1
        request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
            Topic(name=TOPIC, partitions=[Topic.OffsetCommitRequestPartition(
                partition_index=1, committed_offset=offset, committed_metadata="")])])
        try:
            if conn is None:
                conn = BrokerConnection("127.0.0.1", node.port, request_timeout_ms=60000)
            await conn.request(request, version=2, timeout_ms=60000)
        except (OSError, asyncio.TimeoutError, TimeoutError, ConnectionError):
            if conn is not None:
                await conn.close()
            conn = None
            await asyncio.sleep(0.05)
    if conn is not None:
        await conn.close()


def stopped(pid: int) -> bool:
    """Every thread of process `pid` is stopped (SIGSTOP has taken effect, not just been sent)."""
    states = []
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            states.append(task.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0])
    return bool(states) and all(state == "T" for state in states)


def two_coordinator_window(old: list[tuple[float, float, int]], new: list[tuple[float, float, int]]) -> float:
    """The longest time both nodes may have been answering OK at once: for any OK answer of each whose
    [sent, received] intervals overlap, the overlap (each answer was made somewhere in its interval, so
    this can only overstate the real window)."""
    old_ok = sorted((sent, received) for sent, received, error in old if error == 0)
    new_ok = sorted((sent, received) for sent, received, error in new if error == 0)
    window = 0.0
    for sent, received in old_ok:
        for other_sent, other_received in new_ok:
            if other_sent >= received:
                break
            window = max(window, min(received, other_received) - max(sent, other_sent))
    return window


@pytest.fixture
def two_nodes(etcd, tmp_path):
    """Node 1 reaches etcd only through proxies (one per member), node 2 directly."""
    proxies = [LinkProxy(member.client_port).start() for member in etcd.members]
    cut_off = CohortServer(tmp_path / "node1", "--cluster", "etcd://" + ",".join(p.endpoint for p in proxies),
                           "--node-id", "1", "--cluster.lease.ttl.ms", str(TTL_MS)).start()
    other = CohortServer(tmp_path / "node2", "--cluster", etcd.url, "--node-id", "2",
                         "--cluster.lease.ttl.ms", str(TTL_MS)).start()
    yield cut_off, other, proxies
    for proxy in proxies:
        proxy.heal()
    for node in (cut_off, other):
        if node.process.poll() is None:
            node.process.send_signal(signal.SIGCONT)
            node.stop()
    for proxy in proxies:
        proxy.close()
    for node in (cut_off, other):
        assert "Traceback" not in node.stderr(), node.output()


def groups_preferring(node_id: int, node_ids: set[int]) -> list[str]:
    """One group per partition whose preferred owner among `node_ids` is `node_id`, in partition order."""
    wanted = [p for p in range(50) if preferred_owner(p, node_ids) == node_id]
    by_partition: dict[int, str] = {}
    for group in (f"cutoff-{i}" for i in range(100000)):
        by_partition.setdefault(partition_for(group, 50), group)
        if all(p in by_partition for p in wanted):
            break
    return [by_partition[p] for p in wanted]


async def takeover(etcd, cut_off, other, interrupt, resume) -> float:
    """Start probing a group of node 1 on both nodes (and committing to every partition of node 1 so that
    writes are in flight), `await interrupt()` node 1 between two of its prober's requests, wait until
    node 2 answers for the group for a while, `resume()`, probe on; the two-coordinator window."""
    await until(lambda: owned(cut_off) + owned(other) == 50 and owned(cut_off) and owned(other), 30,
                "spread over 2 nodes")
    groups = groups_preferring(1, {1, 2})
    group = groups[-1]  # the partition node 1 lets go last, if it lets them go one by one
    old, new = Prober(cut_off, group), Prober(other, group)
    late = Prober(cut_off, group)  # asks right after the interruption (a paused node answers after SIGCONT)
    stop = asyncio.Event()
    probing = [asyncio.create_task(old.run(stop)), asyncio.create_task(new.run(stop)),
               *(asyncio.create_task(keep_committing(cut_off, g, stop)) for g in groups)]
    try:
        await until(lambda: old.first_ok_sent() is not None, 30, "node 1 answers for its group")
        async with old.in_flight:
            await interrupt()
        probing.append(asyncio.create_task(late.run(stop)))
        await until(lambda: new.first_ok_sent() is not None, 30, "node 2 took the group over")
        await asyncio.sleep(3.0)
        resume()
        # probe on while node 1 rejoins (and gets its share back by handoff)
        await until(lambda: any(error == 0 and sent > new.first_ok_sent() for sent, _, error in old.answers), 30,
                    "node 1 answers for its group again")
        await asyncio.sleep(1.0)
    finally:
        stop.set()
        await asyncio.wait(probing, timeout=70)
    assert late.answers, "node 1 answered nothing after the interruption"
    return two_coordinator_window(old.answers + late.answers, new.answers)


async def test_a_node_cut_off_from_etcd_stops_answering_before_another_takes_its_groups_over(etcd, two_nodes):
    cut_off, other, proxies = two_nodes

    async def black_hole():
        for proxy in proxies:
            proxy.hold()

    def heal():
        for proxy in proxies:
            proxy.heal()
    window = await takeover(etcd, cut_off, other, black_hole, heal)
    assert window == 0, f"two nodes answered for one group for {window:.3f}s"


async def test_a_node_paused_past_its_lease_answers_nothing_as_coordinator_when_resumed(etcd, two_nodes):
    cut_off, other, _ = two_nodes

    async def pause():
        cut_off.signal(signal.SIGSTOP)
        await until(lambda: stopped(cut_off.process.pid), 10, "node 1 stopped")
    window = await takeover(etcd, cut_off, other, pause, lambda: cut_off.signal(signal.SIGCONT))
    assert window == 0, f"two nodes answered for one group for {window:.3f}s"
