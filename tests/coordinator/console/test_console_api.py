"""The console's JSON API against a real ``cohort serve`` and real kafka-python consumers."""
from __future__ import annotations

import socket
import subprocess

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.structs import OffsetAndMetadata

from bounded_wait import wait_until
from cohort_process import clean_env, cohort_command, free_port
from console_http import ConsoleServer, call, commit, create_topic, report_ends, stable_consumers

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def served(tmp_path):
    server = ConsoleServer(tmp_path / "data").start()
    yield server
    assert server.stop() == 0


def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        return {(tp.topic, tp.partition): o.offset for tp, o in admin.list_group_offsets(group)[group].items()}
    finally:
        admin.close()


def test_groups_and_a_group_page_show_members_assignments_and_committed_offsets(served):
    create_topic(served.bootstrap, "orders", 3)
    consumers = stable_consumers(served.bootstrap, "orders", "billing", 2, 3)
    try:
        owner = consumers[0]
        mine = sorted(owner.assignment())
        commit(owner, {tp: OffsetAndMetadata(10 + tp.partition, "batch-7", -1) for tp in mine})

        status, listing, _ = served.api("/api/groups")
        assert status == 200
        row = next(g for g in listing["groups"] if g["group_id"] == "billing")
        assert row["state"] == "Stable" and row["members"] == 2 and row["type"] == "classic"
        assert row["protocol_type"] == "consumer" and row["protocol"] in ("range", "roundrobin", "sticky")

        status, group, _ = served.api("/api/groups/billing")
        assert status == 200 and group["state"] == "Stable"
        assert {m["client_id"] for m in group["members"]} == {"billing-c0", "billing-c1"}
        assigned = sorted((a["topic"], a["partition"]) for m in group["members"] for a in m["assignment"])
        assert assigned == [("orders", 0), ("orders", 1), ("orders", 2)]
        by_partition = {(o["topic"], o["partition"]): o for o in group["offsets"]}
        assert set(by_partition) == {("orders", 0), ("orders", 1), ("orders", 2)}
        for tp in mine:
            entry = by_partition[(tp.topic, tp.partition)]
            assert entry["offset"] == 10 + tp.partition and entry["metadata"] == "batch-7"
            member = next(m for m in group["members"] if {"topic": tp.topic, "partition": tp.partition} in m["assignment"])
            assert entry["member_id"] == member["member_id"] and member["client_id"] == "billing-c0"
        assert group["coordinator"]["port"] == served.port
    finally:
        for c in consumers:
            c.close()


def test_an_unknown_group_is_404_and_bad_requests_are_400_with_a_message(served):
    status, body, _ = served.api("/api/groups/nobody-here")
    assert status == 404 and body["error"] == "GROUP_ID_NOT_FOUND"
    status, body, _ = served.api("/api/groups/g/delete-offsets", method="POST", raw=b"not json")
    assert status == 400 and "JSON object" in body["message"]
    status, body, _ = served.api("/api/groups/g/delete-offsets", method="POST",
                                 body={"partitions": [{"topic": "t", "partition": -1}], "confirm": "g"})
    assert status == 400 and "not a partition" in body["message"]
    status, body, _ = served.api("/api/groups", method="POST", body={})
    assert status == 405 and body["error"] == "METHOD_NOT_ALLOWED"  # reads are GET only
    status, body, _ = served.api("/api/nothing-here")
    assert status == 404 and body["error"] == "NOT_FOUND"
    status, body, _ = served.api("/api/groups/g/delete-offsets", method="POST", raw=b"{" + b" " * (2 << 20) + b"}")
    assert status == 413 and body["error"] == "REQUEST_ENTITY_TOO_LARGE"
    status, body, _ = served.api("/api/groups/g/history?since_ms=-5")
    assert status == 400 and "negative" in body["message"]

    admin = KafkaAdminClient(bootstrap_servers=served.bootstrap, request_timeout_ms=10000)
    try:  # group ids may hold any character: the page encodes them into the path
        admin.alter_group_offsets("team/a b?", {TopicPartition("t", 0): OffsetAndMetadata(3, "", -1)})
    finally:
        admin.close()
    status, body, _ = served.api("/api/groups/team%2Fa%20b%3F")
    assert status == 200 and body["group_id"] == "team/a b?" and [o["offset"] for o in body["offsets"]] == [3]


def test_delete_offsets_needs_the_confirmation_and_is_refused_while_the_group_is_active(served):
    create_topic(served.bootstrap, "clicks", 2)
    consumers = stable_consumers(served.bootstrap, "clicks", "counter", 1, 2)
    commit(consumers[0], {TopicPartition("clicks", 0): OffsetAndMetadata(4, "", -1),
                         TopicPartition("clicks", 1): OffsetAndMetadata(9, "", -1)})
    wanted = {"partitions": [{"topic": "clicks", "partition": 1}]}
    try:
        status, body, _ = served.api("/api/groups/counter/delete-offsets", method="POST", body=wanted)
        assert status == 400 and "confirm" in body["message"]
        status, body, _ = served.api("/api/groups/counter/delete-offsets", method="POST",
                                     body={**wanted, "confirm": "counter"})
        # Kafka refuses to delete offsets of a partition the active group is subscribed to
        assert status == 200 and body["partitions"] == [
            {"topic": "clicks", "partition": 1, "error": "GROUP_SUBSCRIBED_TO_TOPIC"}], body
        assert committed_offsets(served.bootstrap, "counter") == {("clicks", 0): 4, ("clicks", 1): 9}
    finally:
        consumers[0].close()

    status, body, _ = served.api("/api/groups/counter/delete-offsets", method="POST", body={**wanted, "confirm": "counter"})
    assert status == 200 and body["partitions"] == [{"topic": "clicks", "partition": 1, "error": "NONE"}]
    assert committed_offsets(served.bootstrap, "counter") == {("clicks", 0): 4}


def test_the_console_is_off_by_default_and_a_taken_port_stops_the_start_naming_the_flag(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(cohort_command(
            "serve", "--listen", f"127.0.0.1:{free_port()}", "--metrics", f"127.0.0.1:{free_port()}",
            "--data-dir", str(tmp_path / "data"), "--console.listen", f"127.0.0.1:{port}"),
            env=clean_env(), capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].endswith("(choose another address with --console.listen)")
    assert not (tmp_path / "data").exists()  # refused before the data dir was touched

    shown = subprocess.run(cohort_command("config", "show"), env=clean_env(), capture_output=True, text=True, timeout=30)
    assert [line.split() for line in shown.stdout.splitlines() if line.startswith("console.listen")] == [
        ["console.listen", "(unset)", "default"]]
    shown = subprocess.run(cohort_command("config", "show"), env=clean_env(COHORT_CONSOLE_LISTEN="127.0.0.1:9080"),
                           capture_output=True, text=True, timeout=30)
    assert [line.split() for line in shown.stdout.splitlines() if line.startswith("console.listen")] == [
        ["console.listen", "127.0.0.1:9080", "env", "COHORT_CONSOLE_LISTEN"]]


def test_with_workers_the_supervisors_console_shows_the_groups_of_every_worker(tmp_path):
    from cohort.coordinator.server.static_ownership import worker_for_partition
    from workers_harness import WorkersServer, group_on_worker, worker_of

    console_port = free_port()
    server = WorkersServer(tmp_path / "data", 2, "--console.listen", f"127.0.0.1:{console_port}").start()
    try:
        groups = [group_on_worker("spread", k, 2) for k in range(2)]
        create_topic(server.bootstrap_of(0), "spread-topic", 1)
        for k, group in enumerate(groups):
            assert worker_of(group, 2) == k
            admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_of(k), request_timeout_ms=10000)
            try:
                admin.alter_group_offsets(group, {TopicPartition("spread-topic", 0): OffsetAndMetadata(3 + k, "", -1)})
            finally:
                admin.close()
        status, body, _ = call(f"http://127.0.0.1:{console_port}/api/groups")
        assert status == 200 and [g["group_id"] for g in body["groups"]] == sorted(groups)
        for k, group in enumerate(groups):
            status, detail, _ = call(f"http://127.0.0.1:{console_port}/api/groups/{group}")
            assert status == 200 and [o["offset"] for o in detail["offsets"]] == [3 + k]
            assert detail["coordinator"]["port"] == server.ports[k]  # answered by the worker that owns it
            # no source reported where spread-topic ends: the lag is unknown (a commit is no end)
            assert [(o["log_end_offset"], o["lag"]) for o in detail["offsets"]] == [(None, None)]
            assert detail["lag"] is None
        # a source reports the end through the second worker; each group's worker (the first one's too) measures
        # its lag against it, and the supervisor's console shows both
        report_ends(server.bootstrap_of(1), {("spread-topic", 0): 10})

        def lags() -> list:
            return [[(o["log_end_offset"], o["lag"])
                     for o in call(f"http://127.0.0.1:{console_port}/api/groups/{g}")[1]["offsets"]] for g in groups]
        wait_until(lambda: lags() == [[(10, 7)], [(10, 6)]], 30,
                   "each group's lag against the reported end (10 - 3, 10 - 4)")
        status, report, _ = call(f"http://127.0.0.1:{console_port}/api/groups/{groups[0]}/lag")
        assert status == 200 and report["total_lag"] == 7 and report["partitions"][0]["end_offset"] == 10
        # the cluster page: each worker with the offsets partitions it owns (p mod 2), all loaded
        status, cluster, _ = call(f"http://127.0.0.1:{console_port}/api/cluster")
        assert status == 200 and [b["port"] for b in cluster["brokers"]] == server.ports
        for k, broker in enumerate(cluster["brokers"]):
            assert broker["partitions"]["loaded"] == [p for p in range(50) if worker_for_partition(p, 2) == k]
        assert [p["partition"] for p in cluster["partitions"]] == list(range(50)) and cluster["etcd"] is None
    finally:
        assert server.stop() == 0


def test_history_timeline_and_health_come_from_the_coordinators_journal(served):
    create_topic(served.bootstrap, "audit", 1)
    consumers = stable_consumers(served.bootstrap, "audit", "auditors", 1, 1)
    tp = TopicPartition("audit", 0)
    for offset in (10, 20, 30):
        commit(consumers[0], {tp: OffsetAndMetadata(offset, "", -1)})
    consumers[0].close()

    status, body, _ = served.api("/api/groups/auditors/history")
    assert status == 200
    assert [(e["topic"], e["partition"], e["offset"], e["client_id"]) for e in body["events"]] == [
        ("audit", 0, 10, "auditors-c0"), ("audit", 0, 20, "auditors-c0"), ("audit", 0, 30, "auditors-c0")]
    status, narrowed, _ = served.api("/api/groups/auditors/history?topic=audit&partition=1")
    assert status == 200 and narrowed["events"] == []
    status, body, _ = served.api("/api/groups/auditors/history?partition=0")
    assert status == 400 and "topic" in body["message"]

    def journal_ending_with_the_leave():
        status, body, _ = served.api("/api/groups/auditors/rebalances")
        assert status == 200, body
        return body if body["entries"] and body["entries"][-1]["trigger"] == "member_left" else None

    # the leave's entry is journaled once the group's record for it is durable: poll, bounded
    body = wait_until(journal_ending_with_the_leave, 15, "the leave in the journal")
    assert body["entries"][0]["trigger"] == "member_joined"
    assert body["entries"][-1]["state_after"] == "Empty"

    status, body, _ = served.api("/api/groups/auditors/health")
    assert status == 200 and body["status"] in ("OK", "ERR")
    assert [(p["topic"], p["partition"], p["offset"]) for p in body["partitions"]] == [("audit", 0, 30)]
    status, listing, _ = served.api("/api/groups")
    assert next(g for g in listing["groups"] if g["group_id"] == "auditors")["health"] == body["status"]


def test_reset_to_commit_at_previews_then_restores_exactly_what_was_committed_then(served):
    create_topic(served.bootstrap, "jobs", 2)
    consumers = stable_consumers(served.bootstrap, "jobs", "runners", 1, 2)
    first = {TopicPartition("jobs", 0): OffsetAndMetadata(7, "", -1), TopicPartition("jobs", 1): OffsetAndMetadata(11, "", -1)}
    commit(consumers[0], first)
    commit(consumers[0], {TopicPartition("jobs", 0): OffsetAndMetadata(70, "", -1),
                         TopicPartition("jobs", 1): OffsetAndMetadata(110, "", -1)})
    status, body, _ = served.api("/api/groups/runners/history")
    at_ms = [e["time_ms"] for e in body["events"] if e["offset"] in (7, 11)][-1]

    status, body, _ = served.api("/api/groups/runners/reset-offsets", method="POST", body={"at_ms": at_ms, "confirm": "runners"})
    assert status == 409 and body["error"] == "NON_EMPTY_GROUP" and "inactive" in body["message"]
    consumers[0].close()

    status, plan, _ = served.api(f"/api/groups/runners/reset-plan?at_ms={at_ms}")
    assert status == 200 and plan["warnings"] == []
    assert [(p["partition"], p["current"], p["planned"]) for p in plan["partitions"]] == [(0, 70, 7), (1, 110, 11)]
    assert committed_offsets(served.bootstrap, "runners") == {("jobs", 0): 70, ("jobs", 1): 110}  # a preview changes nothing

    for bad in ({"at_ms": at_ms}, {"at_ms": at_ms, "confirm": "other"}, {"at_ms": "yesterday", "confirm": "runners"}):
        status, body, _ = served.api("/api/groups/runners/reset-offsets", method="POST", body=bad)
        assert status == 400, bad
    status, body, _ = served.api("/api/groups/runners/reset-plan?at_ms=soon")
    assert status == 400 and "at_ms" in body["message"]

    status, done, _ = served.api("/api/groups/runners/reset-offsets", method="POST", body={"at_ms": at_ms, "confirm": "runners"})
    assert status == 200 and done["executed"] is True
    assert committed_offsets(served.bootstrap, "runners") == {("jobs", 0): 7, ("jobs", 1): 11}
    status, body, _ = served.api("/api/groups/runners/rebalances")
    admin_entry = body["entries"][-1]
    assert (admin_entry["kind"], admin_entry["trigger"]) == ("admin", "reset_offsets")
    assert admin_entry["members"][0]["client_id"].startswith("cohort-console")
