"""deploy/: the dashboard and the alert rules query only metric names Cohort exports; the scrape configs, the
compose file and Grafana's provisioning point at files and ports that exist."""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from cohort.coordinator.groups.reports.health import GroupHealth, MemberHealth, PartitionHealth
from cohort.coordinator.metrics import CoordinatorMetrics

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "grafana"
MONITORING = REPO / "deploy" / "monitoring"
# What a family's samples are called; a counter's family may already carry `_total` in its TYPE line.
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def _exported_names() -> set[str]:
    metrics = CoordinatorMetrics(process_metrics=False, group_offsets_enabled=True)
    metrics.watch_groups(lambda: {"Stable": 1}, lambda: 1)
    metrics.watch_offsets(lambda: 1)
    metrics.watch_group_health(lambda: [GroupHealth(
        "g", "ERR", 0, 10, 1000, (PartitionHealth("t", 0, "STALL", 5, 0, 0, 9, 4),), (MemberHealth("m", "c", "/h", 10, 20),))])
    names = set()
    types = [line.split()[2:] for line in metrics.exposition().decode().splitlines() if line.startswith("# TYPE ")]
    # cluster mode's collector and the --workers supervisor's own series, as their modules declare them
    cluster = (REPO / "coordinator" / "cluster" / "metrics.py").read_text()
    types += [[name, kind.lower()] for kind, name in
              re.findall(r'(Gauge|Counter|Histogram)MetricFamily\(\s*"(cohort_[a-z_]+)"', cluster)]
    supervisor = (REPO / "coordinator" / "process" / "supervisor.py").read_text()
    types += [line.split()[2:] for line in re.findall(r"# TYPE cohort_[a-z_]+ [a-z]+", supervisor)]
    assert {"cohort_cluster_partition_losses", "cohort_worker_up"} <= {name for name, _ in types}
    for name, kind in types:
        names.update(name if suffix and name.endswith(suffix) else name + suffix
                     for suffix in _SUFFIXES.get(kind, ("",)))
    return names


def test_every_metric_the_dashboard_queries_is_exported():
    dashboard = json.loads((DEPLOY / "cohort-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"\bcohort_[a-z_]+", e)}
    assert {"cohort_offset_commits_total", "cohort_group_health", "cohort_rebalances_total",
            "cohort_log_fsync_duration_seconds_bucket", "cohort_request_duration_seconds_bucket",
            "cohort_group_lag", "cohort_group_lag_unknown_partitions",  # lag against reported end offsets
            "cohort_cluster_owned_partitions", "cohort_cluster_partition_losses_total",  # cluster mode
            "cohort_worker_up", "cohort_worker_restarts_total"} <= used  # --workers
    # a group variable narrows every per-group panel, the per-partition ones (kafka-exporter's shape) included
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert "label_values(cohort_group_health" in variables["group"]["query"]
    group_panels = [e for e in exprs if "cohort_group_lag{" in e or "cohort_group_health{" in e or "cohort_consumergroup_" in e]
    assert group_panels and all('=~"$group"' in e for e in group_panels), group_panels
    assert {"cohort_consumergroup_lag", "cohort_consumergroup_current_offset"} <= used
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(p["gridPos"]["w"] + p["gridPos"]["x"] <= 24 for p in dashboard["panels"])
    missing = used - _exported_names()
    assert not missing, f"the dashboard queries metrics Cohort does not export: {sorted(missing)}"


def test_the_scrape_config_scrapes_cohorts_metrics_port():
    lines = [line.strip() for line in (DEPLOY / "prometheus.yml").read_text().splitlines()]
    assert "metrics_path: /metrics" in lines and '- targets: ["127.0.0.1:9464"]' in lines



def test_the_alert_rules_parse_and_query_only_exported_metrics():
    rules = yaml.safe_load((MONITORING / "cohort-alerts.yml").read_text())
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert {"CohortGroupWarn", "CohortGroupError", "CohortPartitionStalled", "CohortGroupLagHigh", "CohortOffsetsPartitionsFailed",
            "CohortClusterPartitionsLost", "CohortWorkerDown"} <= set(alerts)
    for name, rule in alerts.items():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, name
        assert rule["labels"]["severity"] in ("warning", "critical") and rule["annotations"]["summary"], name
        assert rule["expr"].count("(") == rule["expr"].count(")"), name
        if "for" in rule:
            assert re.fullmatch(r"\d+[smh]", rule["for"]), name
    used = {n for r in alerts.values() for n in re.findall(r"\bcohort_[a-z_]+", r["expr"])}
    missing = used - _exported_names()
    assert not missing, f"the alert rules query metrics Cohort does not export: {sorted(missing)}"


def test_the_compose_file_wires_cohort_prometheus_and_grafana_to_files_that_exist():
    compose = yaml.safe_load((MONITORING / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"cohort", "prometheus", "grafana"}
    assert (MONITORING / services["cohort"]["build"]["context"] / services["cohort"]["build"]["dockerfile"]).is_file()
    assert services["cohort"]["environment"]["COHORT_METRICS_LISTEN"].endswith(":9464")
    mounted = {}
    for name in ("prometheus", "grafana"):
        for volume in services[name]["volumes"]:
            source, target = volume.split(":")[:2]
            assert (MONITORING / source).is_file(), volume
            mounted[target] = MONITORING / source
    prometheus = yaml.safe_load(mounted["/etc/prometheus/prometheus.yml"].read_text())
    assert all(path in mounted for path in prometheus["rule_files"])
    [job] = prometheus["scrape_configs"]
    assert job["static_configs"][0]["targets"] == ["cohort:9464"] and job["metrics_path"] == "/metrics"
    providers = yaml.safe_load(mounted["/etc/grafana/provisioning/dashboards/cohort.yml"].read_text())["providers"]
    folder = providers[0]["options"]["path"]
    assert any(target.startswith(folder + "/") and source.name == "cohort-dashboard.json"
               for target, source in mounted.items())
    [source] = yaml.safe_load(mounted["/etc/grafana/provisioning/datasources/cohort.yml"].read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090" and source["isDefault"]
