"""The differential conformance suite: the corpus's group-protocol exchanges (conformance_corpus.py), sent as raw
frames to Cohort and compared field by field with Apache Kafka's answers.

* Against the fixture (Kafka 4.4's answers, recorded by record_kafka_answers.py): every run, no Kafka needed.
* Against a live Kafka broker (bench/kafka_broker.py, Maven Central's jars): the live broker answers
  exactly as recorded, and Cohort as the live broker. A missing jar, Maven or Java fails, never skips.

Every difference is fixed in Cohort or explained in known_differences.py, whose reasons are in
docs/conformance.md.
"""
from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # bench/ runs from the repository root, as `python -m bench` has it
    sys.path.insert(0, str(REPO))

from conformance_corpus import SCENARIOS, SERVER_SETTINGS  # noqa: E402
from conformance_wire import differences, exchange_count, run_corpus  # noqa: E402
from known_differences import KNOWN, unexplained, unused  # noqa: E402
from record_kafka_answers import FIXTURE, load_fixture  # noqa: E402

from bench.kafka_broker import KAFKA_VERSION, KafkaBroker  # noqa: E402
from bench.targets import CohortServer  # noqa: E402

DOC = REPO / "docs" / "conformance.md"
APIS = {"FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch",
        "DescribeGroups", "ListGroups", "DeleteGroups", "OffsetDelete", "ConsumerGroupHeartbeat",
        "ConsumerGroupDescribe"}


def _report(found: list[dict]) -> str:
    return "\n".join(json.dumps(d) for d in found[:40])


@pytest.fixture(scope="module")
def cohort_answers() -> list[dict]:
    with CohortServer(settings={**SERVER_SETTINGS, "node.id": 1}) as cohort:
        return asyncio.run(run_corpus(cohort.host, cohort.port, SCENARIOS))


@pytest.fixture(scope="module")
def live_kafka_answers() -> list[dict]:
    with KafkaBroker(settings=SERVER_SETTINGS, topics={}) as kafka:
        return asyncio.run(run_corpus(kafka.host, kafka.port, SCENARIOS))


def test_the_fixture_holds_every_api_at_the_versions_clients_send_and_their_errors():
    recorded = json.loads(FIXTURE.read_text())
    assert recorded["kafka"] == KAFKA_VERSION and recorded["server_settings"] == SERVER_SETTINGS
    scenarios = recorded["scenarios"]
    assert [s["scenario"] for s in scenarios] == [name for name, _ in SCENARIOS], "re-record: record_kafka_answers.py"
    assert exchange_count(scenarios) >= 150
    exchanges = [e for s in scenarios for e in s["exchanges"]]
    assert {e["api"] for e in exchanges} == APIS
    errors = set()
    for e in exchanges:
        errors.update(int(code) for code in re.findall(r"'error_code': (\d+)", str(e["response"])))
    # unknown member, illegal generation, rebalance in progress, fenced instance id, inconsistent protocol,
    # group max size, member id required, non-empty group, group id not found, subscribed to topic,
    # fenced and stale member epochs, unreleased instance id, invalid regex, unsupported assignor
    assert {25, 22, 27, 82, 23, 81, 79, 68, 69, 86, 110, 113, 111, 128, 112} <= errors, sorted(errors)


def test_cohort_answers_the_corpus_as_kafka_recorded(cohort_answers):
    found = differences(load_fixture(), cohort_answers)
    assert unexplained(found) == [], _report(unexplained(found))
    assert unused(found) == [], f"explained differences that no longer occur: {unused(found)}"


def test_every_known_difference_has_its_reason_in_the_docs():
    headings = {re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                for line in DOC.read_text().splitlines() if line.startswith("## ")}
    assert {k.anchor for k in KNOWN} <= headings


def test_live_kafka_answers_as_recorded(live_kafka_answers):
    assert differences(load_fixture(), live_kafka_answers) == []


def test_cohort_answers_the_corpus_as_live_kafka(live_kafka_answers, cohort_answers):
    found = differences(live_kafka_answers, cohort_answers)
    assert unexplained(found) == [], _report(unexplained(found))
