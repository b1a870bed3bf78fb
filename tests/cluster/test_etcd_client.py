"""`EtcdClient` against a real 3-member etcd: transactions go to the raft leader, and follow it when it dies."""
from __future__ import annotations

from bounded_wait import wait_until_async
from link_proxy import LinkProxy

from cohort.coordinator.cluster.etcd import EtcdClient, EtcdUnavailable, op_put


async def test_transactions_go_to_the_leader_and_follow_it_when_it_is_killed(etcd, monkeypatch):
    monkeypatch.setattr("cohort.coordinator.cluster.etcd.LEADER_RECHECK_S", 0.2)
    client = EtcdClient(etcd.endpoints, timeout_s=3.0)
    await client.connect()
    written = 0

    async def write() -> str | None:
        nonlocal written
        try:
            await client.txn([], [op_put(b"leader-test", str(written).encode())])
            written += 1
        except EtcdUnavailable:
            pass  # the killed leader's channel, or an election: the next lookup finds the new leader
        return client.leader_endpoint

    try:
        leader = etcd.leader()
        assert await wait_until_async(write, 10, "transactions sent to the leader") == leader.endpoint
        etcd.kill(leader)
        new_leader = etcd.leader()
        assert new_leader is not leader
        await wait_until_async(lambda: _at(write, new_leader.endpoint), 30, "transactions follow the new leader")
        before = written
        await write()
        assert written == before + 1
    finally:
        await client.close()


async def _at(write, endpoint: str) -> bool:
    return await write() == endpoint


async def test_a_stalled_member_costs_one_deadline_then_is_avoided(etcd):
    # gRPC keeps a stalled member's connection READY: round-robin alone sent every third call into it.
    proxies = [LinkProxy(member.client_port).start() for member in etcd.members]
    client = EtcdClient([p.endpoint for p in proxies], timeout_s=0.5)
    await client.connect()
    try:
        for _ in range(3):
            await client.txn([], [op_put(b"stall-test", b"warm")])
        proxies[0].hold()
        timed_out = 0
        for i in range(12):
            try:
                await client.txn([], [op_put(b"stall-test", b"%d" % i)])
            except EtcdUnavailable:
                timed_out += 1
        assert timed_out <= 1
    finally:
        proxies[0].heal()
        await client.close()
        for proxy in proxies:
            proxy.close()
