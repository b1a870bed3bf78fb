"""Operating `cohort serve --workers N`: config show, refusals, /metrics with a worker label, /health, SIGTERM."""
from __future__ import annotations

import json
import socket

import pytest
from cohort_process import clean_env, free_port, metric_value, run_cohort
from workers_harness import WorkersServer

from cohort.client.blocking import BlockingAdmin

pytestmark = pytest.mark.timeout(120)


def test_config_show_prints_each_workers_node_id_ports_and_partitions():
    result = run_cohort("config", "show", "--output", "json", "--workers", "3", "--listen", "127.0.0.1:19092",
                        "--advertised", "kafka.example.com:29092", "--node-id", "10", env=clean_env())
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["workers"] == {"value": 3, "source": "flag", "from": "--workers"}
    layout = shown["worker.layout"]
    assert [(w["worker"], w["node.id"], w["listeners"], w["advertised"]) for w in layout] == [
        (0, 10, "127.0.0.1:19092", "kafka.example.com:29092"),
        (1, 11, "127.0.0.1:19093", "kafka.example.com:29093"),
        (2, 12, "127.0.0.1:19094", "kafka.example.com:29094")]
    # Every offsets partition has exactly one owner.
    assert sorted(p for w in layout for p in w["partitions"]) == list(range(50))

    table = run_cohort("config", "show", "--workers", "2", "--worker-ports", "7001,7005", env=clean_env())
    assert table.returncode == 0, table.stderr
    assert "WORKER  NODE.ID  LISTENERS" in table.stdout and "127.0.0.1:7005" in table.stdout


@pytest.mark.parametrize("argv, message", [
    (["--workers", "0"], "invalid workers (from flag --workers): 0 must be a number of workers (1..50) or auto"),
    (["--workers", "many"], "invalid workers (from flag --workers): 'many' must be a number"),
    (["--workers", "3", "--worker-ports", "7001,7002"], "invalid worker.ports: 2 port(s) for 3 worker(s)"),
    (["--workers", "2", "--worker-ports", "7001,x"], "'x' is not a port"),
])
def test_bad_worker_settings_are_one_line_and_exit_2(tmp_path, argv, message):
    result = run_cohort("serve", "--data-dir", str(tmp_path / "d"), *argv, env=clean_env())
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not (tmp_path / "d").exists()


def test_a_taken_worker_port_stops_the_start_naming_the_flag(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        result = run_cohort("serve", "--data-dir", str(tmp_path / "d"), "--workers", "2", "--worker-ports",
                            f"{free_port()},{port}", "--metrics", f"127.0.0.1:{free_port()}", env=clean_env())
    finally:
        taken.close()
    assert result.returncode == 1
    assert result.stderr.strip() == (f"cohort: error: cannot listen for clients on 127.0.0.1:{port}: address "
                                     "already in use (choose another address with --worker-ports)")
    assert not (tmp_path / "d").exists()


def test_metrics_carry_a_worker_label_and_health_names_every_worker(tmp_path):
    server = WorkersServer(tmp_path / "data", 2).start()
    try:
        status, body = server.health()
        assert status == 200
        lines = body.splitlines()
        assert lines[0] == "ready"
        assert lines[1:] == [f"worker {k} (node {k}, 127.0.0.1:{server.ports[k]}): ready" for k in range(2)]

        with BlockingAdmin(server.bootstrap) as admin:
            admin.list_groups()
        exposition = server.scrape()
        # Every worker's own series, told apart by the worker label (parsed by Prometheus' own parser).
        for k in range(2):
            assert metric_value(exposition, "cohort_requests_total", worker=str(k)) > 0
            assert metric_value(exposition, "cohort_worker_up", worker=str(k)) == 1
            assert metric_value(exposition, "cohort_worker_restarts_total", worker=str(k)) == 0
        assert metric_value(exposition, "cohort_requests_total", worker="0", api="ListGroups") >= 1
        assert metric_value(exposition, "cohort_requests_total", worker="1", api="ListGroups") >= 1
        assert exposition.count("# TYPE cohort_requests_total ") == 1
    finally:
        assert server.stop() == 0, server.output()
    logged = server.stderr()
    assert "cohort supervisor stopped" in logged
    # Each worker's lines say which worker wrote them.
    assert any("cohort started" in line and "worker=1" in line for line in logged.splitlines()), logged[-2000:]


def test_ctrl_c_to_the_whole_process_group_stops_every_worker_gracefully(tmp_path):
    import os
    import signal
    import subprocess

    from cohort_process import cohort_command

    server = WorkersServer(tmp_path / "data", 2)
    server.stderr_path.parent.mkdir(parents=True, exist_ok=True)
    server._stderr = open(server.stderr_path, "w")
    # As a terminal runs it: its own process group, which Ctrl-C signals as a whole.
    server.process = subprocess.Popen(cohort_command(*server.args), env=server.env, stdout=subprocess.DEVNULL,
                                      stderr=server._stderr, start_new_session=True)
    server.wait_ready(30)
    os.killpg(server.process.pid, signal.SIGINT)
    assert server.wait(30) == 0, server.output()
    assert "second signal" not in server.stderr()
    assert server.stderr().count("cohort stopped") == 2


def test_workers_auto_runs_one_worker_per_core_on_ephemeral_ports(tmp_path):
    import os

    server = WorkersServer(tmp_path / "data", 1)
    server.args = ["serve", "--listen", "127.0.0.1:0", "--metrics", f"127.0.0.1:{server.metrics_port}",
                   "--data-dir", str(tmp_path / "data"), "--workers", "auto"]
    server.start()
    try:
        cores = min(len(os.sched_getaffinity(0)), 50)
        status, body = server.health()
        lines = body.splitlines()
        assert status == 200 and lines[0] == "ready" and len(lines) == 1 + cores, body
        # Port 0: every worker got a port of its own, and advertises it.
        ports = {line.rsplit(":", 2)[-2].rstrip(")") for line in lines[1:]}
        assert len(ports) == cores and "0" not in ports, lines
    finally:
        assert server.stop() == 0, server.output()


def test_a_data_dir_held_by_another_server_refuses_the_supervisor_with_one_line(tmp_path):
    holder = WorkersServer(tmp_path / "data", 2).start()
    try:
        port, metrics = free_port(), free_port()
        result = run_cohort("serve", "--data-dir", str(tmp_path / "data"), "--workers", "2", "--listen",
                            f"127.0.0.1:{port}", "--worker-ports", f"{port},{free_port()}", "--metrics",
                            f"127.0.0.1:{metrics}", env=clean_env())
        assert result.returncode == 1
        assert result.stderr.startswith(f"cohort: error: data dir {tmp_path / 'data'} is in use by another "
                                        f"cohort server (pid {holder.process.pid})"), result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    finally:
        assert holder.stop() == 0, holder.output()
