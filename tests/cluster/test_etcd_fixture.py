"""The fixture itself: three members, one leader, and a killed leader is replaced."""
from __future__ import annotations


def test_three_members_elect_one_leader_and_survive_a_leader_kill(etcd):
    leader = etcd.leader()
    assert sum(1 for m in etcd.members if m.running()) == 3
    etcd.kill(leader)
    new_leader = etcd.leader()
    assert new_leader is not leader
    etcd.restart(leader)
    etcd.wait_healthy()
