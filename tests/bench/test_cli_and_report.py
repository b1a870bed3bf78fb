"""`python -m bench compare` alternates targets and writes results, a report and charts; the report
renders every chart from results alone."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO

from bench import report
from bench.stats import LatencyRecorder, Result

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_compare_runs_a_b_rounds_and_writes_the_report(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "compare", "--quick", "--a", "cohort", "--b", "cohort-never",
         "--workload", "fetch", "--variants", "fetch-1p", "--rounds", "2", "--set", "duration_s=0.3",
         "--set", "warmup_s=0.05", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr

    data = json.loads((out / "results.json").read_text())
    assert [(r["target"], r["extra"]["round"]) for r in data["results"]] == [
        ("cohort", 1), ("cohort-never", 1), ("cohort-never", 2), ("cohort", 2)]  # who goes first alternates
    assert all(r["errors"] == {} for r in data["results"])
    (comparison,) = data["comparisons"]
    assert comparison["variant"] == "fetch-1p" and len(comparison["ratios"]) == 2
    assert all(r is not None and r > 0 for r in comparison["ratios"])
    assert data["meta"]["command"].startswith("python -m bench compare")
    text = (out / "report.md").read_text()
    assert "Side by side" in text and "fetch-1p" in text
    assert (out / "peer_ratios.png").read_bytes().startswith(PNG_MAGIC)


def _closed_loop(target: str, variant: str, throughput: float, connections: int = 4) -> Result:
    rec = LatencyRecorder()
    for i in range(1, 500):
        rec.add(i * 10_000)
    return Result(workload="commit", variant=variant, target=target, operations=499, duration_s=1.0,
                  throughput_per_s=throughput, latency_ms=rec.summary(), params={"connections": connections},
                  target_info={"command": "x", "version": "y"})


def test_report_draws_every_chart_and_table(tmp_path):
    results = [_closed_loop(t, f"connections-{c}", 1000.0 * c, c) for t in ("cohort", "tansu") for c in (1, 4)]
    results.append(_closed_loop("cohort", "simple-1p", 5000.0))
    results.append(Result(workload="join-storm", variant="members-10", target="cohort", operations=10,
                          duration_s=0.2, throughput_per_s=50.0, params={"members": 10},
                          extra={"all_assigned_s": 0.2, "assigned_after_join_phase_s": 0.05,
                                 "join_phase_complete_s": 0.15, "stable_s": 0.18, "leave_rebalance_s": 0.1}))
    results.append(Result(workload="restart", variant="records-2000", target="cohort", operations=2000,
                          duration_s=1.0, throughput_per_s=2000.0, params={"records": 2000, "distinct_offsets": 2000},
                          extra={"load_records_per_s": 2000.0, "rss_bytes_per_offset": 90.0, "log_bytes": 1 << 20}))
    pairs = [(results[0], results[2]), (results[1], results[3])]
    comparison = report.summarize_comparison("commit", "connections", "cohort", "tansu", pairs)
    data = {"meta": {"date": "today", "machine": {"cpu": "test cpu", "cores": 2}}, "results": results,
            "comparisons": [comparison]}

    path = report.write_report(data, tmp_path)

    text = path.read_text()
    for name in ("throughput_vs_connections", "latency_cdf_commit", "join_storm", "peer_ratios"):
        assert (tmp_path / f"{name}.png").read_bytes().startswith(PNG_MAGIC), name
        assert f"({name}.png)" in text
    assert "### Join storm" in text and "### Restart" in text and "test cpu" in text
    assert comparison["ratios"] == [1.0, 1.0]  # equal throughput → ratio 1 per round
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(summary["results"]) == len(results)


def test_pin_runs_the_generator_on_one_cpu_and_every_server_on_the_others(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "compare", "--quick", "--pin", "--a", "cohort", "--b", "cohort-never",
         "--workload", "fetch", "--variants", "fetch-1p", "--rounds", "1", "--set", "duration_s=0.3",
         "--set", "warmup_s=0.05", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=240)
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:  # nothing to split: refused with one line
        assert done.returncode == 2 and "--pin needs at least 2 CPUs" in done.stderr, done.stdout + done.stderr
        return
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["pinned"] == [[cpus[-1]], cpus[:-1]]
    # Each server's affinity, as the kernel reported it while the server ran.
    assert [r["target_info"]["cpus"] for r in data["results"]] == [cpus[:-1], cpus[:-1]]
