"""The README's end-to-end example: results to files, progress through the cohort sink, seen by the CLI."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.usefixtures("stop_queries")
def test_example_writes_results_and_cohort_groups_describe_shows_its_offsets(spark, cohort_server, tmp_path):
    from spark_commit_progress import run

    queries = run(spark, cohort_server.bootstrap, "orders-enricher", tmp_path, end_offset=120, topics="orders:3")
    assert [q.exception() for q in queries] == [None, None]
    assert spark.read.json(str(tmp_path / "results")).count() == 3 * 120

    described = subprocess.run(
        [sys.executable, "-m", "cohort.coordinator.cli.main", "groups", "describe", "orders-enricher", "--offsets",
         "--output", "json", "--bootstrap-server", cohort_server.bootstrap],
        capture_output=True, text=True, timeout=60,
    )
    assert described.returncode == 0, described.stderr
    rows = json.loads(described.stdout)  # one object per partition: group, topic, partition, current_offset, ...
    found = {(r["topic"], r["partition"]): r["current_offset"] for r in rows if r["group"] == "orders-enricher"}
    assert found == {("orders", 0): 120, ("orders", 1): 120, ("orders", 2): 120}, described.stdout


def test_the_examples_set_spark_local_ip_for_their_local_session(tmp_path):
    import os
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "examples"
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    probe = subprocess.run([sys.executable, "-c", "import os, spark_commit_progress as example; "
                            "example.local_spark_environment(); print(os.environ['SPARK_LOCAL_IP'])"],
                           capture_output=True, text=True, timeout=60, cwd=examples, env=env)
    assert probe.returncode == 0 and probe.stdout.strip() == "127.0.0.1", probe.stderr
    assert 'os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")' in (examples / "offsets_log_report.py").read_text()
