"""`cohort topics …` run as a real subprocess against a real `cohort serve`."""
from __future__ import annotations

import asyncio
import json

import pytest

from client_harness import assert_one_line_error, run_cli

pytestmark = pytest.mark.timeout(120)


def topics(server, *args):
    return run_cli("topics", *args, "--bootstrap-server", server.bootstrap)


async def test_topic_lifecycle(shared_cohort_server):
    s = shared_cohort_server
    created = await asyncio.to_thread(topics, s, "create", "--topic", "cli-topic", "--partitions", "3")
    assert (created.returncode, created.stdout.strip()) == (0, "Created topic cli-topic.")

    listed, described, dup, dup_ok, dry = await asyncio.gather(
        asyncio.to_thread(topics, s, "list"),
        asyncio.to_thread(topics, s, "describe", "--topic", "cli-topic"),
        asyncio.to_thread(topics, s, "create", "--topic", "cli-topic", "--partitions", "3"),
        asyncio.to_thread(topics, s, "create", "--topic", "cli-topic", "--partitions", "3", "--if-not-exists"),
        asyncio.to_thread(topics, s, "create", "--topic", "cli-topic-dry", "--partitions", "2", "--validate-only"),
    )
    assert "cli-topic" in listed.stdout.split()
    lines = described.stdout.splitlines()
    assert lines[0].startswith("Topic: cli-topic\tTopicId: ") and "PartitionCount: 3\tReplicationFactor: 1" in lines[0]
    assert lines[1:] == [f"\tTopic: cli-topic\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in range(3)]
    assert_one_line_error(dup, 1, "cannot create topic 'cli-topic'", "TOPIC_ALREADY_EXISTS")
    assert dup_ok.returncode == 0
    assert (dry.returncode, dry.stdout.strip()) == (0, "Topic 'cli-topic-dry' can be created.")

    grown = await asyncio.to_thread(topics, s, "add-partitions", "--topic", "cli-topic", "--partitions", "5")
    assert (grown.returncode, grown.stdout.strip()) == (0, "Topic cli-topic now has 5 partitions.")
    shrink, missing, as_json = await asyncio.gather(
        asyncio.to_thread(topics, s, "add-partitions", "--topic", "cli-topic", "--partitions", "2"),
        asyncio.to_thread(topics, s, "add-partitions", "--topic", "cli-nowhere", "--partitions", "2"),
        asyncio.to_thread(topics, s, "describe", "--topic", "cli-topic", "--output", "json"),
    )
    assert_one_line_error(shrink, 1, "INVALID_PARTITIONS")
    assert_one_line_error(missing, 1, "cli-nowhere", "does not exist")
    [info] = json.loads(as_json.stdout)
    assert info["topic"] == "cli-topic" and info["partition_count"] == 5
    assert [p["partition"] for p in info["partitions"]] == [0, 1, 2, 3, 4]

    deleted = await asyncio.to_thread(topics, s, "delete", "--topic", "cli-topic")
    assert (deleted.returncode, deleted.stdout.strip()) == (0, "Deleted topic cli-topic.")
    gone, gone_ok, describe_gone, listed_json = await asyncio.gather(
        asyncio.to_thread(topics, s, "delete", "--topic", "cli-topic"),
        asyncio.to_thread(topics, s, "delete", "--topic", "cli-topic", "--if-exists"),
        asyncio.to_thread(topics, s, "describe", "--topic", "cli-topic"),
        asyncio.to_thread(topics, s, "list", "--output", "json"),
    )
    assert_one_line_error(gone, 1, "cannot delete topic 'cli-topic': it does not exist")
    assert gone_ok.returncode == 0
    assert_one_line_error(describe_gone, 1, "Topic 'cli-topic' does not exist.")
    assert "cli-topic" not in [t["topic"] for t in json.loads(listed_json.stdout)]


async def test_topic_bad_input(shared_cohort_server):
    s = shared_cohort_server
    zero, config, no_topic = await asyncio.gather(
        asyncio.to_thread(topics, s, "create", "--topic", "cli-bad", "--partitions", "0"),
        asyncio.to_thread(topics, s, "create", "--topic", "cli-bad", "--config", "novalue"),
        asyncio.to_thread(topics, s, "create"),
    )
    assert_one_line_error(zero, 2, "--partitions must be at least 1")
    assert_one_line_error(config, 2, "expected NAME=VALUE")
    assert_one_line_error(no_topic, 2, "--topic")
