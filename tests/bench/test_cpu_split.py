"""`python -m bench.cpu_split` splits a real `cohort serve`'s CPU by process and mode, and counts its syscalls.

Smoke-sized; no timing assertions: the figures themselves are in docs/compiled-path.md.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO


def _run(tmp_path, *args: str) -> dict:
    out = tmp_path / "split.json"
    done = subprocess.run([sys.executable, "-m", "bench.cpu_split", "--set", "duration_s=1", "--set", "warmup_s=0",
                           "--json", str(out), *args], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text())


def test_durable_commits_split_over_the_server_and_its_fsync_helpers(tmp_path):
    report = _run(tmp_path, "--workload", "commit", "--variants", "simple-1p")

    rows = report["per_operation"]
    server = next(v for k, v in rows.items() if k.startswith("server"))
    helpers = [v for k, v in rows.items() if k.startswith("helper")]
    assert report["variant"] == "simple-1p" and report["throughput_per_s"] > 0
    assert server["utime_s"] + server["stime_s"] > 0
    assert 0 < server["syscr"] < server["syscw"]  # one read per batch of requests; answers and journal writes
    assert helpers and sum(h["stime_s"] for h in helpers) > 0  # the fdatasyncs run in the helpers
    assert rows["all"]["utime_s"] == pytest.approx(server["utime_s"] + sum(h["utime_s"] for h in helpers))
    assert report["records_per_fsync"] >= 1 and report["fsync_ms_mean"] > 0


def test_strace_counts_the_canned_servers_reads_and_writes(tmp_path):
    counts = tmp_path / "strace.txt"
    report = _run(tmp_path, "--target", "canned", "--workload", "fetch", "--variants", "fetch-1p",
                  "--strace", str(counts))

    calls = {}
    for line in counts.read_text().splitlines():  # % time, seconds, usecs/call, calls, [errors,] syscall
        fields = line.split()
        if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
            calls[fields[-1]] = int(fields[3])
    assert calls["read"] > 0 and calls["write"] > 0
    assert "records_per_fsync" not in report  # (a server without a journal)
