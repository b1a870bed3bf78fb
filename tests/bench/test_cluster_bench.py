"""The cluster benchmarks' parts at smoke size, against a real local etcd and real cluster nodes."""
from __future__ import annotations

import asyncio

import pytest

from bench.cluster import ClusterTarget
from bench.failover import GroupCommitter, acknowledged_but_unwritten, durability, failover
from bench.targets import start_target
from bench.workloads.offsets import run_commit

pytestmark = pytest.mark.timeout(300)


def test_the_cluster_target_takes_the_commit_workload_and_stops_everything(smoke_profile):
    target = start_target("cohort-cluster3")
    assert isinstance(target, ClusterTarget)
    processes = [p.process for p in target.etcd + target.nodes]
    try:
        assert set(target.owners().values()) == {1, 2, 3} and len(target.loaded()) == 50
        [result] = asyncio.run(run_commit(target, smoke_profile.with_overrides(variants=("simple-1p",))))
        assert result.operations > 0 and not result.errors
    finally:
        target.close()
    assert all(p.poll() is not None for p in processes)


def test_one_failover_round_measures_the_wait_of_the_affected_group():
    result = asyncio.run(failover(kills=1, ttl_ms=2000, backoff_s=0.05))
    [row] = result["rows"]
    assert result["missing"] == 0
    # The lease must lapse first: no new owner before about the TTL; the group commits again after that.
    # ("loaded" is published after the load, so a commit may beat it by a few milliseconds.)
    assert 1.0 < row["new_owner_s"] <= row["first_commit_s"] < 10
    assert row["new_owner_s"] <= row["loaded_s"] < 10


def test_a_durability_run_finds_every_acknowledged_commit_in_etcds_history():
    result = asyncio.run(durability(kills=1, clients=2, ttl_ms=2000, backoff_s=0.05, seed=1))
    assert result["acknowledged"] > 0
    assert result["acknowledged_lost"] == 0 and result["fetch_mismatches"] == []


def test_the_checker_reports_an_acknowledged_commit_missing_from_the_history():
    committer = GroupCommitter([("127.0.0.1", 1)], "g")
    committer.acks = [(0.0, 0.1, 1), (0.2, 0.3, 2), (0.4, 0.5, 3)]
    assert acknowledged_but_unwritten([committer], {"g": {1, 3}}) == [("g", 2)]
    assert acknowledged_but_unwritten([committer], {"g": {1, 2, 3, 4}}) == []
