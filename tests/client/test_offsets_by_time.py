"""Offsets by time from when ends were reported: ListOffsets by timestamp T answers the earliest end a
source reported at or after T, for Kafka clients' offsetsForTimes (kafka-python, confluent-kafka), the
console's reset preview and `cohort groups reset-offsets --to-datetime/--by-duration`, across a restart."""
from __future__ import annotations

import json
import time
from datetime import datetime

import pytest
from confluent_kafka import Consumer, TopicPartition as CTP
from kafka import KafkaConsumer
from kafka.structs import TopicPartition as KTP

from cohort.client.blocking import BlockingAdmin
from cohort.client.admin import NewTopic
from client_harness import CohortServe, run_cli

pytestmark = pytest.mark.timeout(120)
TOPIC = "clicks"


def report(server, end: int) -> int:
    """The source reports partition 0's end; returns a time (ms) just before the report."""
    before = int(time.time() * 1000)
    time.sleep(0.02)  # the report is stamped strictly after `before`
    with BlockingAdmin(server.bootstrap) as admin:
        admin.report_end_offsets({(TOPIC, 0): end})
    time.sleep(0.02)
    return before


def kafka_python_for_times(bootstrap: str, at_ms: int):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=20000)
    try:
        found = consumer.offsets_for_times({KTP(TOPIC, 0): at_ms})[KTP(TOPIC, 0)]
        return None if found is None else (found.offset, found.timestamp)
    finally:
        consumer.close()


def confluent_for_times(bootstrap: str, at_ms: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        (found,) = consumer.offsets_for_times([CTP(TOPIC, 0, at_ms)], timeout=20)
        return found.offset
    finally:
        consumer.close()


def reset_to(server, *how: str) -> int:
    done = run_cli("groups", "reset-offsets", "--group", "replay", "--topic", TOPIC, *how, "--dry-run",
                   "--output", "json", "--bootstrap-server", server.bootstrap)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    return row["new_offset"]


def local(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def test_offsets_for_times_answer_the_earliest_end_reported_at_or_after_the_time(tmp_path):
    server = CohortServe(tmp_path / "data").start()
    try:
        with BlockingAdmin(server.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, 1)])
            admin.commit_offsets("replay", {(TOPIC, 0): 5})
        t100 = report(server, 100)
        t250 = report(server, 250)
        t400 = report(server, 400)
        after = int(time.time() * 1000) + 10

        found = kafka_python_for_times(server.bootstrap, t250)
        assert found is not None and found[0] == 250 and t250 < found[1] < t400, found
        assert kafka_python_for_times(server.bootstrap, t100)[0] == 100
        assert kafka_python_for_times(server.bootstrap, t100 - 3_600_000)[0] == 100  # before the first report
        assert kafka_python_for_times(server.bootstrap, after) is None  # nothing reported since: not found
        assert confluent_for_times(server.bootstrap, t400) == 400
        assert confluent_for_times(server.bootstrap, after) == -1

        # the CLI's time-based resets get those answers (no report since the time: the latest, with a warning)
        assert reset_to(server, "--to-datetime", local(t250)) == 250
        assert reset_to(server, "--to-datetime", local(after)) == 400
        assert reset_to(server, "--by-duration", "PT1H") == 100

        # the index is durable: the same answers after a restart
        assert server.stop() == 0
        server.start()
        assert kafka_python_for_times(server.bootstrap, t250)[0] == 250
        assert reset_to(server, "--to-datetime", local(t400)) == 400
    finally:
        server.stop()
