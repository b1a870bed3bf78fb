"""deploy/grafana: the dashboard queries only metric names Cohort exports; the scrape config names its port."""
from __future__ import annotations

import json
import re
from pathlib import Path

from cohort.coordinator.group_health import GroupHealth, MemberHealth, PartitionHealth
from cohort.coordinator.metrics import CoordinatorMetrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
# What a family's samples are called; a counter's family may already carry `_total` in its TYPE line.
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def _exported_names() -> set[str]:
    metrics = CoordinatorMetrics(process_metrics=False)
    metrics.watch_groups(lambda: {"Stable": 1}, lambda: 1)
    metrics.watch_offsets(lambda: 1)
    metrics.watch_group_health(lambda: [GroupHealth(
        "g", "STALLED", 0, 1000, (PartitionHealth("t", 0, "STALLED", 5, 0, 0),), (MemberHealth("m", "c", "/h", 10, 20),))])
    names = set()
    for line in metrics.exposition().decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.update(name if suffix and name.endswith(suffix) else name + suffix
                         for suffix in _SUFFIXES.get(kind, ("",)))
    return names


def test_every_metric_the_dashboard_queries_is_exported():
    dashboard = json.loads((DEPLOY / "cohort-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"\bcohort_[a-z_]+", e)}
    assert {"cohort_offset_commits_total", "cohort_group_health", "cohort_rebalances_total",
            "cohort_log_fsync_duration_seconds_bucket", "cohort_request_duration_seconds_bucket"} <= used
    missing = used - _exported_names()
    assert not missing, f"the dashboard queries metrics Cohort does not export: {sorted(missing)}"


def test_the_scrape_config_scrapes_cohorts_metrics_port():
    lines = [line.strip() for line in (DEPLOY / "prometheus.yml").read_text().splitlines()]
    assert "metrics_path: /metrics" in lines and '- targets: ["127.0.0.1:9464"]' in lines
