"""Reported end offsets in cluster mode: kept in etcd with the topic registry, seen by every node, monotonic
when two nodes take reports at once, and still there after every node restarted."""
from __future__ import annotations

import asyncio

import pytest
from bounded_wait import wait_until
from cohort_process import CohortServer, run_cohort
from kafka import KafkaConsumer
from kafka.structs import TopicPartition as KTP

from cohort.client.admin import Admin, NewTopic
from cohort.client.topic_partition import TopicPartition

pytestmark = pytest.mark.timeout(240)


def start_node(tmp_path, etcd, node_id: int) -> CohortServer:
    return CohortServer(tmp_path / f"node{node_id}-data", "--cluster", etcd.url, "--node-id", str(node_id),
                        "--cluster.lease.ttl.ms", "2000").start()


def latest(bootstrap: str, topic: str) -> dict[int, int]:
    """kafka-python's ListOffsets (latest) for partitions 0 and 1."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        return {tp.partition: o for tp, o in consumer.end_offsets([KTP(topic, 0), KTP(topic, 1)]).items()}
    finally:
        consumer.close()


def test_end_offsets_live_in_etcd_are_seen_by_every_node_and_never_move_back(etcd, tmp_path):
    nodes = [start_node(tmp_path, etcd, i) for i in (1, 2)]
    try:
        async def create_and_race():
            async with Admin(nodes[0].bootstrap) as one, Admin(nodes[1].bootstrap) as two:
                await one.create_topics([NewTopic("ceo", 2)])
                tp = TopicPartition("ceo", 0)
                # two nodes take reports for one partition at once: the higher end wins wherever it landed
                for low, high in ((10, 20), (30, 25), (40, 45)):
                    await asyncio.gather(one.report_end_offsets({tp: low}), two.report_end_offsets({tp: high}))
                return await two.describe_end_offsets(["ceo"])

        described = asyncio.run(create_and_race())
        assert described["ceo"][1] is None
        wait_until(lambda: all(latest(n.bootstrap, "ceo")[0] == 45 for n in nodes), 15,
                   "every node to answer the highest reported end")

        result = run_cohort("topics", "end-offsets", "set", "--topic", "ceo", "--partition", "1", "--offset", "7",
                            "--bootstrap-server", nodes[1].bootstrap)
        assert result.returncode == 0, result.stderr
        wait_until(lambda: latest(nodes[0].bootstrap, "ceo") == {0: 45, 1: 7}, 15, "node 1 to see node 2's report")
        lower = run_cohort("topics", "end-offsets", "set", "--topic", "ceo", "--partition", "0", "--offset", "3",
                           "--bootstrap-server", nodes[0].bootstrap)
        assert lower.returncode == 0 and "stays 45" in lower.stdout, (lower.stdout, lower.stderr)

        for node in nodes:
            node.stop()
        nodes[:] = [start_node(tmp_path, etcd, 3)]
        assert latest(nodes[0].bootstrap, "ceo") == {0: 45, 1: 7}
        shown = run_cohort("topics", "end-offsets", "show", "--topic", "ceo", "--bootstrap-server", nodes[0].bootstrap)
        assert [line.split()[:3] for line in shown.stdout.splitlines()[1:]] == [["ceo", "0", "45"], ["ceo", "1", "7"]]
    finally:
        for node in nodes:
            if node.process.poll() is None:
                node.stop()


def test_a_stopped_etcd_gives_cli_users_one_clear_line(etcd, tmp_path):
    node = start_node(tmp_path, etcd, 1)
    try:
        created = run_cohort("topics", "create", "--topic", "before-outage", "--partitions", "1",
                             "--bootstrap-server", node.bootstrap)
        assert created.returncode == 0, created.stderr
        for member in etcd.members:
            etcd.kill(member)
        try:
            results = [run_cohort(*command, "--bootstrap-server", node.bootstrap, "--timeout", "8000", timeout=60)
                       for command in (("topics", "create", "--topic", "during-outage", "--partitions", "1"),
                                       ("topics", "end-offsets", "set", "--topic", "before-outage", "--partition",
                                        "0", "--offset", "5"))]
            status = run_cohort("cluster", "status", "--cluster", etcd.url, timeout=60)
        finally:
            for member in etcd.members:
                etcd.start_member(member)
            etcd.wait_healthy(60)
        for result in [*results, status]:
            assert result.returncode != 0
            lines = [line for line in result.stderr.splitlines() if not line.startswith("WARN:")]
            assert len(lines) == 1 and lines[0].startswith(("Error: ", "cohort cluster: ")), result.stderr
            assert "Traceback" not in result.stderr and "ipv4:" not in result.stderr
            assert "failed to connect to all addresses" not in result.stderr
        assert "(is etcd running?)" in results[0].stderr, results[0].stderr
    finally:
        node.stop()
