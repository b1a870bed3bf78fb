"""`scripts/cluster --base-port B`: the local demo cluster on ports of the operator's choosing, its consoles,
and the README's walk-through: kill a group's coordinator node, watch the group carry on, restart the node."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from bounded_wait import wait_until
from cohort_process import clean_env, http_get, run_cohort

pytestmark = pytest.mark.timeout(240)
REPO = Path(__file__).resolve().parents[2]


def free_block(size: int) -> int:
    """A base port B such that B..B+size-1 are all free on 127.0.0.1 now."""
    for base in range(21000, 60000, 97):
        sockets = []
        try:
            for port in range(base, base + size):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no block of free ports")


def healthy(port: int) -> bool:
    try:
        return http_get(f"http://127.0.0.1:{port}/health", timeout=1)[0] == 200
    except OSError:
        return False


def test_the_cluster_script_runs_on_a_base_port_and_stops_on_ctrl_c(tmp_path):
    base = free_block(43)
    script = subprocess.Popen([str(REPO / "scripts" / "cluster"), "--base-port", str(base)],
                              env=clean_env(CLUSTER_STATE_DIR=str(tmp_path / "state")), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_until(lambda: all(healthy(base + 10 + i) for i in range(3)) or script.poll() is not None, 120,
                   "three nodes healthy on the base port's metrics ports")
        assert script.poll() is None, script.stderr.read()
        status = run_cohort("cluster", "status", "--cluster", f"etcd://127.0.0.1:{base + 20}", "--output", "json")
        assert status.returncode == 0, status.stderr
        nodes = json.loads(status.stdout)["nodes"]
        assert sorted(n["address"] for n in nodes) == [f"127.0.0.1:{base + i}" for i in range(3)]
        os.killpg(script.pid, signal.SIGINT)
        assert script.wait(timeout=60) is not None
        out = script.stdout.read()
        assert f"bootstrap 127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}" in out
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
            script.wait(timeout=30)


def start_demo(tmp_path, base: int, *args: str) -> subprocess.Popen:
    return subprocess.Popen([str(REPO / "scripts" / "cluster"), "--base-port", str(base), *args],
                            env=clean_env(CLUSTER_STATE_DIR=str(tmp_path / "state")), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def demo(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """`scripts/cluster kill|restart|status …` against the running demo, as a second terminal would."""
    return subprocess.run([str(REPO / "scripts" / "cluster"), *args], capture_output=True, text=True, timeout=90,
                          env=clean_env(CLUSTER_STATE_DIR=str(tmp_path / "state")))


def test_a_killed_node_leaves_the_demo_running_its_group_carries_on_and_a_restart_brings_it_back(tmp_path):
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.admin import NewTopic
    from kafka.structs import OffsetAndMetadata, TopicPartition

    base = free_block(43)
    script = start_demo(tmp_path, base, "--cluster.lease.ttl.ms", "2000")
    bootstrap = ",".join(f"127.0.0.1:{base + i}" for i in range(3))
    member = None
    try:
        wait_until(lambda: all(healthy(base + 10 + i) for i in range(3)) or script.poll() is not None, 120,
                   "three nodes healthy")
        assert script.poll() is None, script.stderr.read()
        for i in range(3):  # every node serves a console
            assert http_get(f"http://127.0.0.1:{base + 40 + i}/api/cluster", timeout=10)[0] == 200
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        admin.create_topics([NewTopic("orders", 3, 1)])
        member = KafkaConsumer(bootstrap_servers=bootstrap, group_id="shipping", enable_auto_commit=False,
                               session_timeout_ms=10000, heartbeat_interval_ms=500, client_id="shipping-1")
        member.subscribe(["orders"])
        wait_until(lambda: member.poll(timeout_ms=100) is not None and len(member.assignment()) == 3, 60,
                   "the member owns the 3 partitions")
        offset = 0

        def commits() -> bool:
            nonlocal offset
            offset += 1
            try:
                member.commit({TopicPartition("orders", p): OffsetAndMetadata(offset, "", -1) for p in range(3)})
                return True
            except Exception:  # noqa: BLE001 - the coordinator moving: kafka-python finds the new one
                member.poll(timeout_ms=100)
                return False
        assert commits()
        from cohort.client.blocking import BlockingAdmin
        with BlockingAdmin(bootstrap) as cohort_admin:
            coordinator = cohort_admin.describe_group("shipping").coordinator.node_id
        generation_before = member._coordinator._generation.generation_id

        killed = demo(tmp_path, "kill", str(coordinator))
        assert killed.returncode == 0, killed.stderr
        wait_until(lambda: f"node {coordinator} exited" in (line := script.stderr.readline()) and line, 30,
                   "the demo to say the node exited")
        assert script.poll() is None  # the rest carries on: etcd and the two other nodes
        wait_until(lambda: commits(), 30, "a commit answered by the node that took the group over")
        for _ in range(5):
            assert commits()
        assert member._coordinator._generation.generation_id == generation_before  # no rebalance
        status = json.loads(demo(tmp_path, "status", "--output", "json").stdout)
        assert {n["node_id"] for n in status["nodes"] if n["state"] == "live"} == {1, 2, 3} - {coordinator}

        restarted = demo(tmp_path, "restart", str(coordinator))
        assert restarted.returncode == 0 and "back and ready" in restarted.stderr, restarted.stderr
        status = json.loads(demo(tmp_path, "status", "--output", "json").stdout)
        assert {n["node_id"] for n in status["nodes"] if n["state"] == "live"} == {1, 2, 3}
        assert commits() or wait_until(lambda: commits(), 30, "commits after the restart")
        admin.close()
    finally:
        if member is not None:
            member.close()
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGINT)
            try:
                script.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(script.pid, signal.SIGKILL)
                script.wait(timeout=30)


def test_a_bad_base_port_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([str(REPO / "scripts" / "cluster"), "--base-port", "80"], capture_output=True, text=True,
                          env=clean_env(CLUSTER_STATE_DIR=str(tmp_path / "state")), timeout=30)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and "base port '80'" in done.stderr


def test_the_demos_state_and_the_servers_data_stay_out_of_git_status():
    """What `./scripts/cluster` and `./scripts/serve` write into the checkout is ignored by git."""
    for path in ("cluster-data/etcd0/member/snap/db", "cluster-data/node1.log", "data/offsets-0/00000000.log"):
        done = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=REPO, timeout=30)
        assert done.returncode == 0, f"{path} would show in git status"
