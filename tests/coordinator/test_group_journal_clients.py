"""The rebalance journal, the offset history with undo and group health, driven by kafka-python consumers
against ``cohort serve`` and read back with the ``cohort groups`` CLI (Cohort's GroupReport API)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime

import pytest

from clients_scenario import ClientAdapter, ConsumerThread, wait_for
from cohort_process import CohortServer, run_cohort
from test_clients_kafka_python import kafka_python_adapter

import kafka  # the test command installs every real client: a missing one fails, never skips
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewPartitions, NewTopic

pytestmark = pytest.mark.timeout(240)

FAST = ("--group.min.session.timeout.ms", "1000")


def adapter(bootstrap: str, topics: list[str], client_id: str, **config) -> ClientAdapter:
    (topic,) = topics
    return kafka_python_adapter(bootstrap, topic, client_id, **config)


# A consumer in its own process, so the test can freeze (SIGSTOP) or kill (SIGKILL) it: a real client that
# vanishes without a LeaveGroup.
_CONSUMER_SCRIPT = textwrap.dedent("""
    import sys, time
    from kafka import KafkaConsumer
    bootstrap, group, topic, client_id, instance, session_ms, poll_ms = sys.argv[1:8]
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                      group_instance_id=instance or None, session_timeout_ms=int(session_ms),
                      max_poll_interval_ms=int(poll_ms), heartbeat_interval_ms=300, enable_auto_commit=False)
    while not c.partitions_for_topic(topic):
        time.sleep(0.1)
    announced = False
    while True:
        c.poll(timeout_ms=200)
        if c.assignment() and not announced:
            print("assigned", flush=True)
            announced = True
""")


class ConsumerProcess:
    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str, *, instance: str = "",
                 session_ms: int = 6000, max_poll_ms: int = 300000) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _CONSUMER_SCRIPT, bootstrap, group, topic, client_id, instance, str(session_ms),
             str(max_poll_ms)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.assigned = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith("assigned"):
                self.assigned.set()

    def wait_assigned(self, timeout: float = 60) -> None:
        assert self.assigned.wait(timeout), "the consumer process got no assignment"

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
        self.process.wait(10)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="journal-admin")
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def cohort_json(server: CohortServer, *args: str):
    result = run_cohort("groups", *args, "--bootstrap-server", server.bootstrap, "--output", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def journal(server: CohortServer, group: str) -> list[dict]:
    return cohort_json(server, "rebalances", group)


def entry_with(server: CohortServer, group: str, what: str, **fields):
    """Wait for a journal entry whose fields match, and return it."""
    def found():
        for e in journal(server, group):
            if all(e[k] == v for k, v in fields.items()):
                return e
        return None
    return wait_for(found, 60, f"a journal entry {what} ({fields})", interval=0.5)


def roles(entry: dict) -> dict[str, str]:
    return {m["client_id"]: m["role"] for m in entry["members"]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = CohortServer(tmp_path_factory.mktemp("journal") / "data", *FAST).start()
    yield s
    s.stop()


def test_joins_leaves_with_a_reason_and_metadata_changes_are_journaled_with_who_and_what_moved(server):
    create_topic(server.bootstrap, "j-topic", 4)
    create_topic(server.bootstrap, "j-other", 2)
    first = ConsumerThread(adapter(server.bootstrap, ["j-topic"], "j-first"), "j-group")
    second = None
    try:
        joined = entry_with(server, "j-group", "for the first join", trigger="member_joined", epoch_before=0)
        assert roles(joined) == {"j-first": "cause"} and joined["members"][0]["client_host"] == "/127.0.0.1"

        second = ConsumerThread(adapter(server.bootstrap, ["j-topic"], "j-second"), "j-group")
        wait_for(lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2, 60, "a 2/2 split")
        entry = [e for e in journal(server, "j-group") if "j-second" in roles(e)][0]
        assert entry["trigger"] == "member_joined" and roles(entry)["j-second"] == "cause"
        moved_to_second = {(mv["topic"], mv["partition"]) for mv in entry["moves"] if mv["to"] != mv["from"]}
        assert entry["moves_total"] >= 2 and moved_to_second
        assert entry["epoch_after"] == entry["epoch_before"] + 1 and entry["state_after"] == "Stable"

        # The second consumer subscribes to one more topic: it rejoins with changed metadata.
        second.call(lambda c: c.subscribe(["j-topic", "j-other"]))
        changed = entry_with(server, "j-group", "for the subscription change", trigger="metadata_changed")
        assert roles(changed)["j-second"] == "cause"

        # Once the group has settled on both topics (a leave during a rebalance joins that rebalance's entry,
        # as Kafka folds it into the ongoing join phase), the second consumer leaves with a reason
        # (kafka-python sends it in LeaveGroup v5).
        wait_for(lambda: sum(len(c.assignment()) for c in (first, second)) == 6, 60, "both topics assigned")
        second.call(lambda c: c._coordinator.maybe_leave_group(reason="scaling down for the night"))
        left = entry_with(server, "j-group", "for the leave", trigger="member_left")
        assert left["client_reason"] == "scaling down for the night"
        assert ("j-second", "cause") in [(m["client_id"], m["role"]) for m in left["members"]]  # it may rejoin too
    finally:
        for c in (second, first):
            if c is not None:
                c.stop()


def test_a_killed_member_is_journaled_as_session_expired(server):
    create_topic(server.bootstrap, "e-topic", 2)
    stays = ConsumerThread(adapter(server.bootstrap, ["e-topic"], "e-stays"), "e-group")
    dies = ConsumerProcess(server.bootstrap, "e-group", "e-topic", "e-dies", session_ms=1500)
    try:
        dies.wait_assigned()
        dies.kill()  # no LeaveGroup: only its session can end it
        expired = entry_with(server, "e-group", "for the expiry", trigger="session_expired")
        assert roles(expired)["e-dies"] == "cause" and expired["state_after"] == "Stable"
        wait_for(lambda: len(stays.assignment()) == 2, 60, "the survivor taking every partition")
    finally:
        dies.kill()
        stays.stop()


def test_a_frozen_member_is_dropped_at_the_rebalance_timeout_and_named_so(server):
    create_topic(server.bootstrap, "r-topic", 2)
    frozen = ConsumerProcess(server.bootstrap, "r-group", "r-topic", "r-frozen", session_ms=30000, max_poll_ms=3000)
    late = None
    try:
        frozen.wait_assigned()
        frozen.signal(signal.SIGSTOP)  # alive to its 30 s session, but it will never rejoin
        late = ConsumerThread(adapter(server.bootstrap, ["r-topic"], "r-late", max_poll_interval_ms=3000), "r-group")
        entry = entry_with(server, "r-group", "for the join that dropped the frozen member", trigger="member_joined",
                           state_after="Stable", epoch_before=1)
        assert roles(entry) == {"r-late": "cause", "r-frozen": "rebalance_timeout"}, json.dumps(journal(server, "r-group"))
        assert 2500 <= entry["duration_ms"] < 25000  # the join phase waited the rebalance timeout, not the session
    finally:
        frozen.kill()
        if late is not None:
            late.stop()


def test_a_new_partition_makes_the_leader_rejoin_and_that_is_journaled_as_a_topic_change(server):
    create_topic(server.bootstrap, "t-topic", 1)
    consumer = ConsumerThread(adapter(server.bootstrap, ["t-topic"], "t-leader", metadata_max_age_ms=500), "t-group")
    try:
        wait_for(lambda: consumer.assignment() == {("t-topic", 0)}, 60, "the first assignment")
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, client_id="journal-admin")
        try:
            admin.create_partitions({"t-topic": NewPartitions(total_count=3)})
        finally:
            admin.close()
        change = entry_with(server, "t-group", "for the new partitions", trigger="topic_change")
        assert {(mv["topic"], mv["partition"]) for mv in change["moves"]} >= {("t-topic", 1), ("t-topic", 2)}
    finally:
        consumer.stop()


def test_a_static_member_coming_back_under_a_new_id_is_journaled_as_replaced(server):
    create_topic(server.bootstrap, "s-topic", 2)
    before = ConsumerProcess(server.bootstrap, "s-group", "s-topic", "s-static", instance="s-instance-1",
                             session_ms=30000)
    after = None
    try:
        before.wait_assigned()
        before.kill()  # a static member sends no LeaveGroup: its place waits for it
        after = ConsumerProcess(server.bootstrap, "s-group", "s-topic", "s-static", instance="s-instance-1",
                                session_ms=30000)
        after.wait_assigned()
        replaced = entry_with(server, "s-group", "for the replacement", trigger="static_member_replaced")
        ids = {m["role"]: m for m in replaced["members"]}
        assert ids["removed"]["group_instance_id"] == ids["joined"]["group_instance_id"] == "s-instance-1"
        assert ids["removed"]["member_id"] != ids["joined"]["member_id"]
    finally:
        before.kill()
        if after is not None:
            after.kill()


def test_admin_resets_deletes_and_group_deletion_are_journaled_with_who_and_where(server):
    create_topic(server.bootstrap, "a-topic", 2)
    consumer = ConsumerThread(adapter(server.bootstrap, ["a-topic"], "a-consumer"), "a-group")
    consumer.commit({("a-topic", 0): (40, ""), ("a-topic", 1): (41, "")})
    consumer.stop()
    wait_for(lambda: cohort_json(server, "describe", "a-group", "--state")[0]["state"] == "Empty", 30, "an empty group")
    result = run_cohort("groups", "reset-offsets", "--group", "a-group", "--all-topics", "--to-earliest", "--execute",
                        "--bootstrap-server", server.bootstrap)
    assert result.returncode == 0, result.stderr
    reset = entry_with(server, "a-group", "for the reset", kind="admin", trigger="reset_offsets")
    assert reset["principal"] == "User:ANONYMOUS" and reset["members"][0]["client_host"] == "/127.0.0.1"
    assert "a-topic:0 40->0" in reset["detail"] and "a-topic:1 41->0" in reset["detail"]
    result = run_cohort("groups", "delete-offsets", "--group", "a-group", "--topic", "a-topic:1",
                        "--bootstrap-server", server.bootstrap)
    assert result.returncode == 0, result.stderr
    assert entry_with(server, "a-group", "for the offset delete", trigger="delete_offsets")["detail"] == "a-topic:1"
    result = run_cohort("groups", "delete", "--group", "a-group", "--bootstrap-server", server.bootstrap)
    assert result.returncode == 0, result.stderr
    assert entry_with(server, "a-group", "for the group delete", trigger="delete_group")["state_after"] == "Empty"
    kinds = [(e["kind"], e["trigger"]) for e in journal(server, "a-group")]
    assert kinds[-3:] == [("admin", "reset_offsets"), ("admin", "delete_offsets"), ("admin", "delete_group")]


def _local(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]


def test_history_survives_compaction_and_a_restart_and_to_commit_at_undoes_a_bad_reset(tmp_path):
    extra = (*FAST, "--offsets.topic.segment.bytes", "1024", "--log.cleaner.backoff.ms", "100")
    server = CohortServer(tmp_path / "data", *extra).start()
    consumer = None
    try:
        create_topic(server.bootstrap, "h-topic", 3)
        consumer = ConsumerThread(adapter(server.bootstrap, ["h-topic"], "h-consumer"), "h-group")
        wait_for(lambda: len(consumer.assignment()) == 3, 60, "the assignment")
        for n in range(1, 41):  # enough commits to roll many 1 KiB segments: compaction runs over them
            consumer.commit({("h-topic", p): (10 * n + p, "") for p in range(3)})
            if n == 20:
                time.sleep(0.05)  # the scenario: a moment between two commits to come back to
                good_moment = time.time() * 1000
                time.sleep(0.05)
        consumer.stop()
        consumer = None
        wait_for(lambda: "cohort_log_compactions_total" in server.scrape()
                 and any(line.startswith("cohort_log_compactions_total") and not line.endswith(" 0.0")
                         for line in server.scrape().splitlines()), 30, "a compaction")

        # The bad reset, then the server restarts.
        assert run_cohort("groups", "reset-offsets", "--group", "h-group", "--all-topics", "--to-earliest",
                          "--execute", "--bootstrap-server", server.bootstrap).returncode == 0
        server.stop()
        server = CohortServer(tmp_path / "data", *extra).start()

        history = cohort_json(server, "history", "h-group", "--topic", "h-topic:1")
        offsets = [e["offset"] for e in history]
        assert offsets == [10 * n + 1 for n in range(1, 41)] + [0]  # every commit, then the reset
        (who,) = {(e["client_id"], e["member_id"], e["generation"]) for e in history[:-1]}
        assert who[0] == "h-consumer" and who[1].startswith("h-consumer-") and who[2] >= 1
        assert history[-1]["generation"] == -1

        # Undo: what the group had committed at the good moment, exactly.
        at = _local(good_moment)
        dry = run_cohort("groups", "reset-offsets", "--group", "h-group", "--all-topics", "--to-commit-at", at,
                         "--export", "--bootstrap-server", server.bootstrap)
        assert dry.returncode == 0, dry.stderr
        # The CSV, then an empty line, as kafka-consumer-groups.sh --export prints it.
        assert dry.stdout == "h-topic,0,200\nh-topic,1,201\nh-topic,2,202\n\n"
        undo = run_cohort("groups", "reset-offsets", "--group", "h-group", "--all-topics", "--to-commit-at", at,
                          "--execute", "--bootstrap-server", server.bootstrap)
        assert undo.returncode == 0, undo.stderr
        check = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="h-group", enable_auto_commit=False)
        try:
            assert [check.committed(TopicPartition("h-topic", p)) for p in range(3)] == [200, 201, 202]
        finally:
            check.close()
        undo_entry = journal(server, "h-group")[-1]
        assert undo_entry["trigger"] == "reset_offsets" and "h-topic:1 0->201" in undo_entry["detail"]
    finally:
        if consumer is not None:
            consumer.stop()
        server.stop()


def test_group_report_is_served_but_never_advertised_and_the_cli_fails_in_one_line(server):
    import asyncio

    from cohort.client.connection import BrokerConnection
    from cohort.protocol.messages import GroupReportRequest

    async def probe():
        conn = BrokerConnection("127.0.0.1", server.port)
        try:
            await conn.connect()
            advertised = conn.supports(GroupReportRequest.API_KEY)
            answer = await conn.request(GroupReportRequest(group_id="no-such-group", report="rebalances"), version=0)
            return advertised, answer
        finally:
            await conn.close()

    advertised, answer = asyncio.run(probe())
    assert not advertised  # Kafka clients never learn of it
    assert answer.error_code == 69  # GROUP_ID_NOT_FOUND
    unknown = run_cohort("groups", "rebalances", "no-such-group", "--bootstrap-server", server.bootstrap)
    assert unknown.returncode == 1 and len(unknown.stderr.strip().splitlines()) == 1, unknown.stderr
    bad = run_cohort("groups", "history", "x", "--since", "yesterday-ish", "--bootstrap-server", server.bootstrap)
    assert bad.returncode == 2 and bad.stderr.startswith("Error:") and "Traceback" not in bad.stderr, bad.stderr
