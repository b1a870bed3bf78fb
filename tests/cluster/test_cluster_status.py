"""`cohort cluster status` when things go wrong: quorum lost, a node cut off from etcd, a node gone."""
from __future__ import annotations

import json
import re
import signal

import pytest
from cohort_process import CohortServer, run_cohort

from test_cluster_e2e import owned, start_node, wait_until

pytestmark = pytest.mark.timeout(240)


def status(etcd, *extra: str):
    return run_cohort("cluster", "status", "--cluster", etcd.url, *extra)


def nodes_by_id(etcd) -> dict[int, dict]:
    result = status(etcd, "--output", "json")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return {n["node_id"]: n for n in json.loads(result.stdout)["nodes"]}


def test_quorum_loss_shows_as_no_quorum_with_each_members_health(etcd):
    survivor, *lost = etcd.members
    for member in lost:
        etcd.kill(member)
    result = status(etcd, "--timeout", "3")
    assert result.returncode == 2, result
    assert result.stderr.count("\n") == 1 and "no quorum" in result.stderr, result.stderr
    assert "1 of 3 members answer" in result.stderr, result.stderr
    for member in lost:
        assert re.search(rf"{re.escape(member.endpoint)}\s+no answer", result.stdout), result.stdout
    assert re.search(rf"{re.escape(survivor.endpoint)}\s+(ok|no leader)", result.stdout), result.stdout

    as_json = status(etcd, "--timeout", "3", "--output", "json")
    assert as_json.returncode == 2
    report = json.loads(as_json.stdout)
    assert report["quorum"] is False and "nodes" not in report
    assert [m["health"] for m in report["members"]].count("no answer") == 2


def test_members_healthy_and_a_node_cut_off_from_etcd_shows_as_cut_off_then_gone(etcd, tmp_path):
    # node 1 at the default TTL (6 s, refreshed every 0.3 s), node 2 at 2 s
    one = CohortServer(tmp_path / "node1", "--cluster", etcd.url, "--node-id", "1").start()
    two = start_node(tmp_path, etcd, 2)
    try:
        wait_until(lambda: owned(one) + owned(two) == 50 and owned(one) and owned(two), 30, "spread over 2 nodes")
        table = status(etcd)
        assert table.returncode == 0 and "Traceback" not in table.stderr, table
        for member in etcd.members:
            assert re.search(rf"{re.escape(member.endpoint)}\s+ok\s", table.stdout), table.stdout
        # a live node's lease is refreshed every TTL/20: etcd's whole seconds give the bound "5-6s"
        # (to the hundredth only when the value etcd reports changes while the tool watches)
        lease = re.search(rf"{one.bootstrap}\s+live\s+(\d\.\d\d|\d-\d)s", table.stdout)
        assert lease and 3.9 <= float(lease.group(1).split("-")[0]) <= 6.0, table.stdout
        for _ in range(8):  # a leader lookup racing close() once printed an AttributeError traceback
            assert nodes_by_id(etcd)[1]["state"] == "live"

        two.signal(signal.SIGSTOP)  # its lease lapses in etcd while its listener still takes connections
        cut_off = wait_until(lambda: nodes_by_id(etcd).get(2, {}).get("state") == "cut-off" and nodes_by_id(etcd),
                             30, "node 2 shown as cut off")
        assert cut_off[2]["lease_ttl_s"] is None and cut_off[2]["address"] == two.bootstrap
        assert cut_off[1]["state"] == "live" and 3.9 <= cut_off[1]["lease_ttl_s"] <= 6.0

        two.process.send_signal(signal.SIGKILL)
        two.process.wait(10)
        assert wait_until(lambda: nodes_by_id(etcd).get(2, {}).get("state") == "gone", 30, "node 2 gone")
        assert one.stop() == 0  # a graceful stop leaves nothing behind
        assert 1 not in nodes_by_id(etcd)
    finally:
        for node in (one, two):
            if node.process.poll() is None:
                node.process.send_signal(signal.SIGCONT)
                node.stop()
