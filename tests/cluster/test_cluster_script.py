"""`scripts/cluster --base-port B`: the local demo cluster on ports of the operator's choosing."""
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
    base = free_block(33)
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


def test_a_bad_base_port_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([str(REPO / "scripts" / "cluster"), "--base-port", "80"], capture_output=True, text=True,
                          env=clean_env(CLUSTER_STATE_DIR=str(tmp_path / "state")), timeout=30)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and "base port '80'" in done.stderr
