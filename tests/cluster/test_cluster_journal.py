"""The rebalance journal in cluster mode: its records live in etcd like any other and survive a restart;
the offset history, which etcd does not keep, is refused in one line."""
from __future__ import annotations

import json

import pytest
from bounded_wait import wait_until
from cohort_process import CohortServer, run_cohort
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import NewTopic

pytestmark = pytest.mark.timeout(180)


def journal(node: CohortServer, group: str) -> list[dict]:
    result = run_cohort("groups", "rebalances", group, "--output", "json", "--bootstrap-server", node.bootstrap)
    return json.loads(result.stdout) if result.returncode == 0 else []


def test_the_journal_is_kept_in_etcd_across_a_restart_and_history_is_refused(etcd, tmp_path):
    def start() -> CohortServer:
        return CohortServer(tmp_path / "data", "--cluster", etcd.url, "--node-id", "1",
                            "--cluster.lease.ttl.ms", "2000").start()

    node = start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=15000)
        try:
            admin.create_topics([NewTopic("cj-topic", 2, 1)])
        finally:
            admin.close()
        consumer = KafkaConsumer(bootstrap_servers=node.bootstrap, group_id="cj-group",
                                 client_id="cj-consumer", enable_auto_commit=False, session_timeout_ms=6000,
                                 heartbeat_interval_ms=300)
        try:
            # Know the topic's partitions before joining: kafka-python 3.0.12 can stall in the rebalance that
            # follows a leader's join made without them (as in tests/coordinator/test_daemon_serve.py).
            wait_until(lambda: consumer.partitions_for_topic("cj-topic"), 30, "the topic's partitions")
            consumer.subscribe(["cj-topic"])
            wait_until(lambda: consumer.poll(timeout_ms=200) is not None and consumer.assignment(), 60, "an assignment")
        finally:
            consumer.close()  # LeaveGroup
        # The group ends Empty (by the LeaveGroup, or by the session if the leave raced a rebalance).
        wait_until(lambda: [e["state_after"] for e in journal(node, "cj-group")][-1:] == ["Empty"], 30,
                   "the group's last rebalance in the journal")
        before = journal(node, "cj-group")
        node.stop()
        node = start()
        assert wait_until(lambda: journal(node, "cj-group"), 60, "the journal after the restart") == before
        refused = run_cohort("groups", "history", "cj-group", "--bootstrap-server", node.bootstrap)
        assert refused.returncode == 1 and "cluster mode" in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    finally:
        node.stop()
