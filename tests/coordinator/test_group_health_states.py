"""Burrow's health states reached by real groups, classic and KIP-848 alike, and the alert rules that fire on them.

A confluent-kafka (librdkafka) member of a classic group and of a KIP-848 consumer group commits what the
test tells it while a source reports the topic's end offsets; the group goes OK → WARN (it commits but
its lag never goes down, then grows) → STALL (it commits without moving) → REWIND (it commits an older
offset) → STOP (it stops committing), and then falls far behind. Each state is read where an operator
meets it: `cohort groups describe --health`, `/metrics` (Burrow's numbers, per-partition series in
kafka-exporter's shape), and the alert rules of deploy/monitoring, which promtool evaluates over the
series scraped in that state.
"""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from bounded_wait import wait_until
from cohort.client.blocking import BlockingAdmin
from cohort_process import CohortServer, free_port, http_get, run_cohort

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "deploy" / "monitoring" / "cohort-alerts.yml"
# A window of 3 commits at least 300 ms apart, sampled every 300 ms: every state within seconds.
SETTINGS = ("--group.health.window.commits", "3", "--group.health.window.min.distance.ms", "300",
            "--metrics.group.offsets.enable", "true",
            "--group.consumer.session.timeout.ms", "6000", "--group.consumer.min.session.timeout.ms", "1000",
            "--group.consumer.heartbeat.interval.ms", "300",
            "--group.consumer.min.heartbeat.interval.ms", "100", "--group.min.session.timeout.ms", "1000")


class Scenario:
    """One member of `group` on `topic` (1 partition, its own: reported ends only move forward), committing
    what it is told, and a source of ends."""

    def __init__(self, server: CohortServer, group: str, protocol: str, topic: str) -> None:
        self.server, self.group, self.topic = server, group, topic
        client = AdminClient({"bootstrap.servers": server.bootstrap})
        client.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(20)
        self.admin = BlockingAdmin(server.bootstrap, request_timeout_ms=10000)
        self.member = Consumer({
            "bootstrap.servers": server.bootstrap, "group.id": group, "group.protocol": protocol,
            "client.id": f"{group}-member", "enable.auto.commit": False,
            "logger": logging.getLogger("tests.health.librdkafka"),
            **({} if protocol == "consumer" else {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300}),
        })
        self.member.subscribe([topic])
        deadline = time.monotonic() + 30
        while not self.member.assignment():
            assert time.monotonic() < deadline, "the member was never assigned the partition"
            self.member.poll(0.1)

    def step(self, offset: int, end: int | None = None) -> None:
        """The source reports `end` (if given), the member commits `offset`, and a sample has seen it."""
        if end is not None:
            self.admin.report_end_offsets({(self.topic, 0): end})
        self.member.commit(offsets=[TopicPartition(self.topic, 0, offset)], asynchronous=False)
        self.member.poll(0.35)  # past the min distance: the next commit is a window entry of its own

    def health(self) -> dict:
        return self.admin.group_report(self.group, "health")

    def cli_health(self) -> dict:
        """What `cohort groups describe G --health --output json` says."""
        done = run_cohort("groups", "describe", self.group, "--health", "--output", "json",
                          "--bootstrap-server", self.server.bootstrap)
        assert done.returncode == 0, done.stderr
        (report,) = json.loads(done.stdout)
        return report

    def wait_for(self, status: str, partition_status: str, keep=None) -> dict:
        """Until the group and its partition are in that state; `keep()` goes on doing what led there."""
        def reached():
            if keep is not None:
                keep()
            else:
                self.member.poll(0.05)
            report = self.health()
            return report if (report["status"], report["partitions"][0]["status"]) == (status, partition_status) else None
        return wait_until(reached, 20, f"{self.group} {status}/{partition_status}")

    def close(self) -> None:
        self.member.close()
        self.admin.close()


def series(text: str, name: str, **labels: str) -> list[tuple[dict, float]]:
    return [(s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def firing(scrape: str, tmp_path: Path, earlier: str | None = None) -> set[tuple[str, str]]:
    """(alert, group) pairs that deploy/monitoring's rules fire after 40 minutes of `scrape`'s values,
    evaluated by promtool (Prometheus' own rule engine) over those series: each value held for the 40
    minutes or, given an `earlier` scrape, going from that scrape's value to this one's in 40 one-minute steps."""
    rules = yaml.safe_load(ALERTS.read_text())
    names = sorted({n for g in rules["groups"] for r in g["rules"] for n in _metrics_in(r["expr"])})
    before = {} if earlier is None else {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(earlier) for s in family.samples}
    inputs = []
    for family in text_string_to_metric_families(scrape):
        for s in family.samples:
            if s.name in names:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted({**s.labels, "instance": "cohort"}.items()))
                start = before.get((s.name, tuple(sorted(s.labels.items()))), s.value)
                step = (s.value - start) / 40
                values = f"{start:g}+{step:g}x40" if step > 0 else f"{start:g}{step:g}x40" if step < 0 else f"{s.value:g}x40"
                inputs.append({"series": f"{s.name}{{{labels}}}", "values": values})
    alerts = sorted({r["alert"] for g in rules["groups"] for r in g["rules"]})
    found: set[tuple[str, str]] = set()
    for alert in alerts:  # one promtool run per alert: an empty expectation that fails names what fired
        case = tmp_path / f"{alert}.yml"
        case.write_text(yaml.safe_dump({"rule_files": [str(ALERTS)], "evaluation_interval": "1m", "tests": [{
            "interval": "1m", "input_series": inputs,
            "alert_rule_test": [{"eval_time": "40m", "alertname": alert, "exp_alerts": []}]}]}))
        run = subprocess.run([shutil.which("promtool") or "promtool", "test", "rules", str(case)],
                             capture_output=True, text=True, timeout=60)
        if run.returncode == 0:
            continue
        said = run.stdout + run.stderr
        assert "exp:" in said and "got:" in said, said
        got = said.split("got:", 1)[1]
        for group in set(_group_labels(got)):
            found.add((alert, group))
    return found


def _metrics_in(expr: str) -> list[str]:
    import re
    return re.findall(r"\bcohort_[a-z_]+", expr)


def _group_labels(text: str) -> list[str]:
    import re
    return re.findall(r'group="([^"]+)"', text)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    assert shutil.which("promtool"), "promtool evaluates the alert rules (apt-get install prometheus)"
    console = free_port()
    served = CohortServer(tmp_path_factory.mktemp("health") / "data", *SETTINGS,
                          "--console.listen", f"127.0.0.1:{console}").start()
    served.console_port = console
    yield served
    assert served.stop() == 0, served.stderr()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_real_group_goes_ok_warn_stall_rewind_and_stop_and_the_alert_rules_fire(server, protocol, tmp_path):
    group = f"health-{protocol}"
    s = Scenario(server, group, protocol, f"events-{protocol}")
    try:
        # OK: it keeps up (lag 0 at a commit in the window)
        for offset in (100, 200, 300):
            s.step(offset, end=offset)
        report = s.wait_for("OK", "OK")
        assert s.cli_health()["status"] == "OK"
        assert report["group_type"] == protocol and report["members"]
        assert report["members"][0]["client_id"] == f"{group}-member"  # KIP-848 members are reported too
        assert report["members"][0]["heartbeat_age_ms"] is not None
        # the console's list names the group's assignor (a KIP-848 group's is the server-side one)
        status, body = http_get(f"http://127.0.0.1:{server.console_port}/api/groups?search={group}", timeout=10)
        (row,) = json.loads(body)["groups"]
        assert status == 200 and row["type"] == protocol and row["protocol"] == ("uniform" if protocol == "consumer" else "range")

        # WARN: it commits, but the source grows faster: the lag never goes down
        growing = iter(range(310, 10_000, 10))
        last_commit = [300]

        def fall_behind():
            last_commit[0] = next(growing)
            s.step(last_commit[0], end=last_commit[0] * 2)
        report = s.wait_for("WARN", "WARN", keep=fall_behind)
        offset = report["partitions"][0]["offset"]
        assert report["partitions"][0]["lag"] == offset
        scrape = server.scrape()
        assert series(scrape, "cohort_group_health", group=group) == [({"group": group, "type": protocol}, 2.0)]
        assert series(scrape, "cohort_group_partition_health", group=group)[0][1] == 2.0
        # per-partition series in kafka-exporter's shape
        labels = {"consumergroup": group, "topic": s.topic, "partition": "0"}
        assert series(scrape, "cohort_consumergroup_lag", **labels)[0][1] == offset
        assert series(scrape, "cohort_consumergroup_current_offset", **labels)[0][1] == offset
        assert series(scrape, "cohort_consumergroup_members", consumergroup=group)[0][1] == 1
        fired = firing(scrape, tmp_path)
        assert ("CohortGroupWarn", group) in fired and ("CohortGroupLagGrowing", group) not in fired, fired
        assert not {a for a, g in fired if g == group} - {"CohortGroupWarn"}, fired
        # it goes on falling behind: its lag grows while it is WARN, and the lag-growing alert fires too
        wait_until(lambda: (fall_behind(), s.health())[1]["partitions"][0]["lag"] > offset + 50, 20, "more lag")
        later = server.scrape()
        assert series(later, "cohort_group_lag", group=group)[0][1] > series(scrape, "cohort_group_lag", group=group)[0][1]
        assert series(later, "cohort_group_health", group=group)[0][1] == 2.0
        fired = firing(later, tmp_path, earlier=scrape)
        assert {a for a, g in fired if g == group} == {"CohortGroupWarn", "CohortGroupLagGrowing"}, fired
        offset = last_commit[0]

        # STALL: it commits the same offset while data waits
        s.wait_for("ERR", "STALL", keep=lambda: s.step(offset))
        fired = firing(server.scrape(), tmp_path)
        assert {a for a, g in fired if g == group} == {"CohortGroupError", "CohortPartitionStalled"}, fired

        # REWIND: it commits an older offset (no admin reset in between)
        s.step(200)
        s.wait_for("ERR", "REWIND", keep=lambda: s.step(200))
        fired = firing(server.scrape(), tmp_path)
        assert {a for a, g in fired if g == group} == {"CohortGroupError", "CohortPartitionRewound"}, fired

        # STOP: it moves on, then stops committing (longer than its window spans)
        for offset in (210, 220, 230):
            s.step(offset)
        s.wait_for("ERR", "STOP")
        fired = firing(server.scrape(), tmp_path)
        assert {a for a, g in fired if g == group} == {"CohortGroupError", "CohortPartitionStopped"}, fired

        # far behind: the source reports 200 000 records more than the stopped group committed
        s.admin.report_end_offsets({(s.topic, 0): 200_230})
        scrape = wait_until(lambda: (lambda text: text if series(text, "cohort_group_lag", group=group)[0][1] > 100_000
                                     else None)(server.scrape()), 20, "the lag of 200 000 scraped")
        fired = firing(scrape, tmp_path)
        assert {a for a, g in fired if g == group} == {"CohortGroupError", "CohortPartitionStopped",
                                                        "CohortGroupLagHigh"}, fired
    finally:
        s.close()
