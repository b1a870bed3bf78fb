"""Reported end offsets end to end: `cohort topics end-offsets set|show`, then what `groups describe --offsets`,
kafka-python's and confluent-kafka's ListOffsets, Fetch's high watermark and `/metrics` say, across a restart."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from cohort.client.admin import Admin, NewTopic
from cohort.client.errors import KafkaError
from cohort.client.topic_partition import TopicPartition
from cohort.protocol.errors import ErrorCode
from client_harness import CohortServe, assert_one_line_error, run_cli

pytestmark = pytest.mark.timeout(180)


def cli(server, *args):
    return run_cli(*args, "--bootstrap-server", server.bootstrap)


def offsets_rows(stdout: str) -> dict[str, list[str]]:
    """`groups describe --offsets` rows by partition."""
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    header = next(i for i, words in enumerate(lines) if words[:1] == ["GROUP"])
    assert lines[header][4:6] == ["LOG-END-OFFSET", "LAG"]
    return {row[2]: row for row in lines[header + 1:]}


async def seed(server, group: str, topic: str, offsets: dict[int, int]) -> None:
    async with Admin(server.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 2)])
        await admin.alter_offsets(group, {(topic, p): (o, "") for p, o in offsets.items()})


def kafka_python_latest(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=20000)
    try:
        ends = consumer.end_offsets([KTP(topic, p) for p in range(partitions)])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        consumer.close()


def kafka_python_fetch_highwater(bootstrap: str, topic: str, partition: int) -> int | None:
    """The high watermark kafka-python learned from a Fetch response."""
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=20000, fetch_max_wait_ms=100,
                             enable_auto_commit=False)
    try:
        tp = KTP(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, 3)
        deadline = time.monotonic() + 20
        while consumer.highwater(tp) is None and time.monotonic() < deadline:
            consumer.poll(timeout_ms=200)
        return consumer.highwater(tp)
    finally:
        consumer.close()


def confluent_watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition as CTP

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets-watermarks"})
    try:
        return consumer.get_watermark_offsets(CTP(topic, partition), timeout=20, cached=False)
    finally:
        consumer.close()


async def test_reported_end_offsets_drive_log_end_lag_and_list_offsets(tmp_path):
    server = CohortServe(tmp_path / "data").start()
    try:
        await seed(server, "eo-group", "eo-topic", {0: 3, 1: 7})

        # No source reported anything: the end is unknown, and said so (not the highest commit, not LAG 0).
        before = await asyncio.to_thread(cli, server, "groups", "describe", "eo-group", "--offsets")
        assert before.returncode == 0, before.stderr
        rows = offsets_rows(before.stdout)
        assert rows["0"][3:6] == ["3", "-", "-"] and rows["1"][3:6] == ["7", "-", "-"]
        shown = await asyncio.to_thread(cli, server, "topics", "end-offsets", "show", "--topic", "eo-topic")
        assert shown.returncode == 0, shown.stderr
        assert [line.split()[:3] for line in shown.stdout.splitlines()] == [
            ["TOPIC", "PARTITION", "END-OFFSET"], ["eo-topic", "0", "-"], ["eo-topic", "1", "-"]]

        set_result = await asyncio.to_thread(cli, server, "topics", "end-offsets", "set", "--topic", "eo-topic",
                                             "--partition", "0", "--offset", "10")
        assert (set_result.returncode, set_result.stdout.strip()) == (0, "End offset of eo-topic-0 is 10."), \
            set_result.stderr
        after = await asyncio.to_thread(cli, server, "groups", "describe", "eo-group", "--offsets")
        rows = offsets_rows(after.stdout)
        assert rows["0"][3:6] == ["3", "10", "7"]      # LOG-END-OFFSET N, LAG N - committed
        assert rows["1"][3:6] == ["7", "-", "-"]       # partition 1: still no report

        # Real Kafka clients: ListOffsets (latest) answers the reported end.
        assert (await asyncio.to_thread(kafka_python_latest, server.bootstrap, "eo-topic", 1)) == {0: 10}
        assert (await asyncio.to_thread(confluent_watermarks, server.bootstrap, "eo-topic", 0)) == (0, 10)
        assert (await asyncio.to_thread(kafka_python_fetch_highwater, server.bootstrap, "eo-topic", 0)) == 10

        # Monotonic: a lower report leaves the end where it was, and says so.
        lower = await asyncio.to_thread(cli, server, "topics", "end-offsets", "set", "--topic", "eo-topic",
                                        "--partition", "0", "--offset", "4")
        assert lower.returncode == 0 and "stays 10" in lower.stdout
        as_json = await asyncio.to_thread(cli, server, "topics", "end-offsets", "show", "--topic", "eo-topic",
                                          "--output", "json")
        assert [(e["partition"], e["end_offset"]) for e in json.loads(as_json.stdout)] == [(0, 10), (1, None)]

        # Bad input: one line, non-zero exit.
        missing, bad_partition, negative = await asyncio.gather(
            asyncio.to_thread(cli, server, "topics", "end-offsets", "show", "--topic", "eo-nowhere"),
            asyncio.to_thread(cli, server, "topics", "end-offsets", "set", "--topic", "eo-topic", "--partition", "9",
                              "--offset", "1"),
            asyncio.to_thread(cli, server, "topics", "end-offsets", "set", "--topic", "eo-topic", "--partition", "0",
                              "--offset", "-1"),
        )
        assert_one_line_error(missing, 1, "Topic 'eo-nowhere' does not exist.")
        assert_one_line_error(bad_partition, 1, "eo-topic-9", "UNKNOWN_TOPIC_OR_PARTITION")
        assert_one_line_error(negative, 2, "--offset must be at least 0")

        # Stored durably with the registry: a restart keeps the end.
        server.stop()
        server = CohortServe(tmp_path / "data").start()
        again = await asyncio.to_thread(cli, server, "groups", "describe", "eo-group", "--offsets")
        assert offsets_rows(again.stdout)["0"][3:6] == ["3", "10", "7"], again.stdout
        assert (await asyncio.to_thread(kafka_python_latest, server.bootstrap, "eo-topic", 2)) == {0: 10, 1: 7}

        # /metrics: the group's lag over partitions with a known end, and how many have none.
        metrics = server.scrape()
        assert 'cohort_group_lag{group="eo-group"} 7.0' in metrics
        assert 'cohort_group_lag_unknown_partitions{group="eo-group"} 1.0' in metrics
    finally:
        server.stop()


async def test_deleted_topic_forgets_its_end_offsets(shared_cohort_server):
    s = shared_cohort_server
    async with Admin(s.bootstrap) as admin:
        await admin.create_topics([NewTopic("eo-deleted", 1)])
        tp = TopicPartition("eo-deleted", 0)
        assert await admin.report_end_offsets({tp: 5}) == {tp: 5}
        await admin.delete_topics(["eo-deleted"])
        await admin.create_topics([NewTopic("eo-deleted", 1)])
        assert (await admin.describe_end_offsets(["eo-deleted"]))["eo-deleted"] == {0: None}
        gone = await admin.report_end_offsets({TopicPartition("eo-missing", 0): 1})
        assert isinstance(gone[TopicPartition("eo-missing", 0)], KafkaError)
        assert gone[TopicPartition("eo-missing", 0)].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_health_shows_end_and_lag_and_says_when_the_end_is_unknown(shared_cohort_server):
    s = shared_cohort_server
    await seed(s, "eo-health", "eo-health-t", {0: 4, 1: 2})
    async with Admin(s.bootstrap) as admin:
        await admin.report_end_offsets({TopicPartition("eo-health-t", 0): 9})
    result = await asyncio.to_thread(cli, s, "groups", "describe", "eo-health", "--health")
    assert result.returncode == 0, result.stderr
    lines = [line.split() for line in result.stdout.splitlines() if line.strip()]
    header = next(i for i, words in enumerate(lines) if words[:2] == ["GROUP", "TOPIC"])
    assert lines[header][3:7] == ["STATUS", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    rows = {row[2]: row for row in lines[header + 1:header + 3]}
    assert rows["0"][4:7] == ["4", "9", "5"] and rows["1"][4:7] == ["2", "-", "-"]
    assert "LAG is unknown ('-') for 1 partition(s): no source reported their end offset" in result.stdout
    as_json = await asyncio.to_thread(cli, s, "groups", "describe", "eo-health", "--health", "--output", "json")
    [report] = json.loads(as_json.stdout)
    assert (report["total_lag"], report["partitions_without_end"]) == (5, 1)


async def test_a_missing_group_is_worded_alike_and_fails_in_every_command(shared_cohort_server):
    s = shared_cohort_server
    results = await asyncio.gather(*(asyncio.to_thread(cli, s, "groups", *command) for command in (
        ("history", "eo-nobody"), ("rebalances", "eo-nobody"), ("describe", "eo-nobody", "--health"),
        ("describe", "eo-nobody"), ("describe", "eo-nobody", "--state"))))
    for result in results:
        assert_one_line_error(result, 1, "Consumer group 'eo-nobody' does not exist.")
