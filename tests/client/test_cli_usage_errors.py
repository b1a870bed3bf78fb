"""Bad command lines get one clear line naming the sub-command (and the option meant); Kafka errors read as one
sentence."""
from __future__ import annotations

import subprocess
import sys

import pytest

from cohort.client.errors import KafkaError
from cohort.protocol.errors import ErrorCode


def cohort(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cohort.coordinator.cli.main", *args], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("argv, own_usage", [
    (["groups", "list", "--bogus"], "cohort groups list"),
    (["log", "verify", "--bogus"], "cohort log verify"),
    (["topics", "create", "--topic", "t", "--bogus"], "cohort topics create"),
])
def test_an_unknown_option_is_reported_by_the_sub_command_that_was_chosen(argv, own_usage):
    done = cohort(*argv)
    assert done.returncode == 2
    assert own_usage in done.stderr + done.stdout
    assert "usage: cohort [-h] [--version] COMMAND" not in done.stderr + done.stdout
    assert "--bogus" in done.stderr + done.stdout and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("Error: ")  # one line, not the usage block


@pytest.mark.parametrize("argv, meant", [
    (["serve", "--wokers", "2"], "--workers"),
    (["serve", "--metrics.listen=127.0.0.1:1", "--data-dri", "x"], "--data-dir"),
    (["groups", "describe", "--bootstrap-servr", "h:1"], "--bootstrap-server"),
    (["topics", "end-offsets", "set", "--topic", "t", "--partition", "0", "--ofset", "3"], "--offset"),
])
def test_an_unknown_flag_is_one_line_with_the_option_meant(argv, meant):
    done = cohort(*argv)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"(did you mean {meant}?)" in done.stderr


def test_serve_help_lists_settings_by_area_and_each_flag_once():
    text = cohort("serve", "--help").stdout
    areas = ["server: listeners, data directory, node id, workers:", "cluster mode (etcd):", "consumer groups:",
             "security: SASL, authorization, TLS:", "operations: metrics, console, logging, shutdown:"]
    positions = [text.index("\n" + area + "\n") for area in areas]
    assert positions == sorted(positions)
    options = [line.split()[0].rstrip(",") for line in text.splitlines() if line.startswith("  --")]
    assert options.count("--workers") == 1 and len(options) == len(set(options))
    assert "--workers N|auto, --workers" not in text


def test_a_kafka_error_with_the_servers_message_does_not_double_its_punctuation():
    error = KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'orders' already exists.")
    assert str(error) == "TOPIC_ALREADY_EXISTS: Topic 'orders' already exists."
    assert str(KafkaError(ErrorCode.GROUP_ID_NOT_FOUND)) == "GROUP_ID_NOT_FOUND"


def test_a_bootstrap_server_that_is_a_web_port_is_one_line_saying_it_is_not_a_kafka_server(tmp_path):
    import time

    from client_harness import CohortServe, assert_one_line_error, run_cli

    from cohort_process import free_port

    console = free_port()
    server = CohortServe(tmp_path / "data", "--console.listen", f"127.0.0.1:{console}").start()
    try:
        for port in (server.metrics_port, console):  # /metrics and /health, and the web console
            started = time.monotonic()
            done = run_cli("groups", "list", "--bootstrap-server", f"127.0.0.1:{port}", "--timeout", "20000")
            line = assert_one_line_error(done, 3, f"127.0.0.1:{port} is not a Kafka server", "web server")
            assert "frame" not in line and not done.stderr.replace(line, "").strip(), done.stderr
            assert time.monotonic() - started < 15  # said at once, not after the timeout
    finally:
        server.stop()
