"""deploy/'s monitoring as an operator runs it: a real Prometheus scrapes a running Cohort with a live KIP-848
group, loads deploy/monitoring's alert rules, and answers every query of the Grafana dashboard with the
group variable set — the per-partition panels (kafka-exporter's shape) with one series per partition."""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bounded_wait import wait_until
from cohort.client.blocking import BlockingAdmin
from cohort_process import CohortServer, free_port, http_get

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "cohort-dashboard.json"
MONITORING = REPO / "deploy" / "monitoring"
GROUP, TOPIC = "billing", "invoices"


class Prometheus:
    """`prometheus` with deploy/monitoring's configuration, scraping `target` every second."""

    def __init__(self, tmp_path: Path, target: str) -> None:
        config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        config["rule_files"] = [str(MONITORING / "cohort-alerts.yml")]
        (job,) = config["scrape_configs"]
        job["static_configs"] = [{"targets": [target]}]
        self.job = job["job_name"]
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.log = open(tmp_path / "prometheus.log", "w")
        self.process = subprocess.Popen(
            [shutil.which("prometheus") or "prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def api(self, path: str, **params: str) -> dict:
        status, body = http_get(f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}",
                                timeout=10)
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", (path, params, answer)
        return answer["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


def dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel["targets"]]


def test_prometheus_answers_every_dashboard_query_for_a_live_kip848_group(tmp_path):
    assert shutil.which("prometheus"), "a real Prometheus scrapes Cohort (apt-get install prometheus)"
    server = CohortServer(tmp_path / "data", "--metrics.group.offsets.enable", "true").start()
    prometheus = member = None
    try:
        client = AdminClient({"bootstrap.servers": server.bootstrap})  # kept until the topic is created
        client.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1)])[TOPIC].result(20)
        member = Consumer({"bootstrap.servers": server.bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                           "enable.auto.commit": False, "logger": logging.getLogger("tests.prometheus.librdkafka")})
        member.subscribe([TOPIC])
        wait_until(lambda: member.poll(0.1) is None and len(member.assignment()) == 2, 30, "both partitions assigned")
        member.commit(offsets=[TopicPartition(TOPIC, 0, 40), TopicPartition(TOPIC, 1, 70)], asynchronous=False)
        with BlockingAdmin(server.bootstrap) as admin:
            admin.report_end_offsets({(TOPIC, 0): 100, (TOPIC, 1): 100})

        prometheus = Prometheus(tmp_path, f"127.0.0.1:{server.metrics_port}")
        lag = f'cohort_consumergroup_lag{{consumergroup="{GROUP}"}}'
        wait_until(lambda: member.poll(0.1) is None and len(prometheus_or_empty(prometheus, lag)) == 2, 60,
                   "Prometheus scraped the group's lag per partition")

        # the dashboard's variables, as Grafana asks for them
        (job,) = prometheus.api("label/job/values", **{"match[]": "cohort_build_info"})
        (instance,) = prometheus.api("label/instance/values", **{"match[]": f'cohort_build_info{{job=~"{job}"}}'})
        groups = prometheus.api("label/group/values",
                                **{"match[]": f'cohort_group_health{{job=~"{job}", instance=~"{instance}"}}'})
        assert groups == [GROUP], groups

        answered = {}
        for title, expr in dashboard_queries():
            concrete = expr.replace("$group", GROUP).replace("$job", job).replace("$instance", instance)
            answered[expr] = (title, prometheus.query(concrete))  # valid PromQL over Cohort's series
        per_partition = {title: {r["metric"]["partition"]: float(r["value"][1]) for r in result}
                         for title, result in answered.values() if title.startswith(("Lag per", "Committed offset per"))}
        assert per_partition == {"Lag per partition (needs metrics.group.offsets.enable)": {"0": 60.0, "1": 30.0},
                                 "Committed offset per partition (needs metrics.group.offsets.enable)":
                                     {"0": 40.0, "1": 70.0}}, per_partition
        health = next(result for title, result in answered.values() if title.startswith("Group health"))
        assert [(r["metric"]["group"], r["metric"]["type"]) for r in health] == [(GROUP, "consumer")], health
        group_lag = next(result for title, result in answered.values() if title.startswith("Group lag"))
        assert [float(r["value"][1]) for r in group_lag] == [90.0], group_lag
        members = next(result for title, result in answered.values() if title.startswith("Groups by state"))
        assert members, "the group and its member are counted"

        # the alert rules load and evaluate over these series without an error
        def evaluated():
            rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
            return rules if rules and all(r.get("lastEvaluation", "").startswith("20") and r["health"] == "ok"
                                          for r in rules) else None
        rules = wait_until(evaluated, 30, "every alert rule evaluated")
        assert {r["name"] for r in rules} >= {"CohortGroupWarn", "CohortGroupLagGrowing", "CohortGroupLagHigh"}
    finally:
        if member is not None:
            member.close()
        if prometheus is not None:
            prometheus.stop()
        assert server.stop() == 0, server.stderr()


def prometheus_or_empty(prometheus: Prometheus, expr: str) -> list[dict]:
    """The query's result, or nothing while Prometheus is still starting."""
    try:
        return prometheus.query(expr)
    except (OSError, AssertionError, json.JSONDecodeError):
        time.sleep(0.2)
        return []
