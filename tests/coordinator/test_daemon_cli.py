"""`cohort config show` and the refusals of `cohort serve`, as an operator sees them (real subprocesses)."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

import pytest

from cohort_process import clean_env, free_port, run_cohort


def assert_one_line_refusal(result: subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode != 0, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("cohort: error: ")
    assert fragment in lines[0]


def test_config_show_reports_values_and_sources_from_file_env_and_flags(tmp_path):
    config_file = tmp_path / "cohort.toml"
    config_file.write_text(textwrap.dedent("""
        group.initial.rebalance.delay.ms = 250
        offsets.retention.minutes = 60
        "max.connections" = 100
        [offsets.topic]
        num.partitions = 10
    """))
    env = clean_env(COHORT_OFFSETS_RETENTION_MINUTES="90", COHORT_MAX_CONNECTIONS="200", COHORT_LOG_FORMAT="json")
    result = run_cohort(
        "config", "show", "--output", "json", "--config", str(config_file),
        "--max.connections", "300", "--data-dir", str(tmp_path / "d"), env=env,
    )
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["group.initial.rebalance.delay.ms"] == {"value": 250, "source": "file", "from": str(config_file)}
    assert shown["offsets.topic.num.partitions"]["value"] == 10
    assert shown["offsets.retention.minutes"] == {"value": 90, "source": "env", "from": "COHORT_OFFSETS_RETENTION_MINUTES"}
    assert shown["max.connections"] == {"value": 300, "source": "flag", "from": "--max.connections"}
    assert shown["data.dir"] == {"value": str(tmp_path / "d"), "source": "flag", "from": "--data-dir"}
    assert shown["log.format"]["value"] == "json"
    assert shown["group.max.size"] == {"value": 2147483647, "source": "default", "from": None}


def test_config_show_table_lists_every_setting_once(tmp_path):
    result = run_cohort("config", "show", "--listen", "127.0.0.1:19092", env=clean_env(COHORT_NODE_ID="4"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["SETTING", "VALUE", "SOURCE"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows["listeners"] == ["127.0.0.1:19092", "flag", "--listen"]
    assert rows["node.id"] == ["4", "env", "COHORT_NODE_ID"]
    assert rows["auto.create.topics.enable"] == ["true", "default"]
    assert rows["advertised.listeners"] == ["(unset)", "default"]
    assert "offset.metadata.max.bytes" in rows and "socket.request.max.bytes" in rows


def test_serve_help_lists_kafka_named_settings():
    result = run_cohort("serve", "--help")
    assert result.returncode == 0
    for flag in ("--listen", "--advertised", "--data-dir", "--node-id", "--metrics", "--config",
                 "--group.initial.rebalance.delay.ms", "--offsets.retention.minutes",
                 "--offsets.topic.num.partitions", "--offset.metadata.max.bytes", "--socket.request.max.bytes"):
        assert flag in result.stdout
    assert "COHORT_GROUP_INITIAL_REBALANCE_DELAY_MS" in result.stdout


def test_unknown_key_in_config_file_is_refused(tmp_path):
    config_file = tmp_path / "cohort.toml"
    config_file.write_text("offsets.retention.minute = 5\n")
    result = run_cohort("serve", "--config", str(config_file), "--data-dir", str(tmp_path / "d"))
    assert_one_line_refusal(result, "unknown setting 'offsets.retention.minute'")
    assert result.returncode == 2
    assert not (tmp_path / "d").exists()


def test_negative_timeout_is_refused(tmp_path):
    result = run_cohort("serve", "--group.min.session.timeout.ms", "-1", "--data-dir", str(tmp_path / "d"))
    assert_one_line_refusal(result, "invalid group.min.session.timeout.ms (from flag --group.min.session.timeout.ms)")


def test_min_above_max_session_timeout_is_refused(tmp_path):
    env = clean_env(COHORT_GROUP_MIN_SESSION_TIMEOUT_MS="60000", COHORT_GROUP_MAX_SESSION_TIMEOUT_MS="30000")
    result = run_cohort("serve", "--data-dir", str(tmp_path / "d"), env=env)
    assert_one_line_refusal(result, "above group.max.session.timeout.ms")


def test_unknown_cohort_env_var_is_refused(tmp_path):
    result = run_cohort("serve", "--data-dir", str(tmp_path), env=clean_env(COHORT_GROUP_MAX_SIZ="3"))
    assert_one_line_refusal(result, "COHORT_GROUP_MAX_SIZ")


def test_data_dir_that_is_a_file_is_refused(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    result = run_cohort("serve", "--data-dir", str(not_a_dir), "--listen", f"127.0.0.1:{free_port()}",
                        "--metrics", f"127.0.0.1:{free_port()}")
    assert_one_line_refusal(result, "not a directory")


def test_unwritable_data_dir_is_refused(tmp_path):
    import os

    if os.geteuid() == 0:
        target = "/sys/cohort-test-data"  # not even root may create directories in sysfs
    else:
        locked = tmp_path / "ro"
        locked.mkdir(mode=0o500)
        target = str(locked / "data")
    result = run_cohort("serve", "--data-dir", target, "--listen", f"127.0.0.1:{free_port()}",
                        "--metrics", f"127.0.0.1:{free_port()}")
    assert_one_line_refusal(result, "data dir")


def test_metrics_port_in_use_is_refused(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cohort("serve", "--data-dir", str(tmp_path), "--listen", f"127.0.0.1:{free_port()}",
                            "--metrics", f"127.0.0.1:{port}")
    assert_one_line_refusal(result, f"cannot listen for metrics on 127.0.0.1:{port}: address already in use "
                                    "(choose another address with --metrics)")


def test_locked_data_dir_is_refused_naming_the_holder(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, pathlib; from cohort.coordinator.process.daemon import DataDirLock; "
         "lock = DataDirLock(pathlib.Path(sys.argv[1])); lock.acquire(); print('locked', flush=True); sys.stdin.read()",
         str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        result = run_cohort("serve", "--data-dir", str(tmp_path), "--listen", f"127.0.0.1:{free_port()}",
                            "--metrics", f"127.0.0.1:{free_port()}")
        assert_one_line_refusal(result, f"data dir {tmp_path} is in use by another cohort server (pid {holder.pid})")
    finally:
        holder.stdin.close()
        holder.wait(10)


def test_lock_is_free_again_once_its_holder_exits(tmp_path):
    from cohort.coordinator.process.daemon import DataDirLock

    subprocess.run(
        [sys.executable, "-c",
         "import sys, pathlib; from cohort.coordinator.process.daemon import DataDirLock; DataDirLock(pathlib.Path(sys.argv[1])).acquire()",
         str(tmp_path)],
        check=True, timeout=30,
    )
    lock = DataDirLock(tmp_path)
    lock.acquire()  # the dead holder's flock went with it
    lock.release()


def test_second_lock_in_one_process_is_refused(tmp_path):
    from cohort.coordinator.process.daemon import DataDirLock, StartupError

    first = DataDirLock(tmp_path)
    first.acquire()
    try:
        with pytest.raises(StartupError, match="in use by another cohort server"):
            DataDirLock(tmp_path).acquire()
    finally:
        first.release()
    second = DataDirLock(tmp_path)
    second.acquire()
    second.release()


def test_unopenable_log_file_is_refused(tmp_path):
    result = run_cohort("serve", "--data-dir", str(tmp_path / "d"), "--log-file", str(tmp_path / "missing" / "x.log"))
    assert_one_line_refusal(result, f"cannot open log file {tmp_path / 'missing' / 'x.log'}")


def test_wildcard_listener_needs_an_advertised_address(tmp_path):
    result = run_cohort("serve", "--data-dir", str(tmp_path / "d"), "--listen", "0.0.0.0:9092")
    assert_one_line_refusal(result, "advertised.listeners must be set")
    assert result.returncode == 2
