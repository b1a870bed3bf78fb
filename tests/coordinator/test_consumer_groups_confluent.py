"""KIP-848 consumer groups with confluent-kafka (librdkafka, `group.protocol=consumer`) against ``cohort serve``.

The coordinator assigns (server-side `uniform`/`range`), members reconcile with ConsumerGroupHeartbeat,
commits carry the member epoch. Short consumer-group session and heartbeat settings keep it fast.
"""
from __future__ import annotations

import json
import logging
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from clients_scenario import _NotYet as NotYet, wait_for
from cohort_process import CohortServer, clean_env, metric_value, run_cohort

import confluent_kafka  # the test command installs every real client: a missing one fails, never skips
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import (
    ConsumerGroupDescribeRequest,
    DescribeGroupsRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)

pytestmark = pytest.mark.timeout(180)

CLIENT_LOGGER = "tests.confluent_kafka.consumer_protocol"
SESSION_MS = 4000
CONSUMER_GROUP_SETTINGS = (
    "--group.consumer.session.timeout.ms", str(SESSION_MS), "--group.consumer.min.session.timeout.ms", "1000",
    "--group.consumer.heartbeat.interval.ms", "300", "--group.consumer.min.heartbeat.interval.ms", "100",
)


def test_librdkafka_speaks_the_consumer_protocol():
    assert confluent_kafka.libversion()[1] >= 0x020C0000, confluent_kafka.libversion()  # 2.12+


@pytest.fixture
def consumer_server(tmp_path):
    server = CohortServer(tmp_path / "data", *CONSUMER_GROUP_SETTINGS).start()
    yield server
    assert server.stop() == 0, server.stderr()


def restarted(server: CohortServer) -> CohortServer:
    """The same server (data dir, ports, settings) started again after a clean stop."""
    assert server.stop() == 0, server.stderr()
    again = CohortServer(server.data_dir)
    again.port, again.metrics_port, again.args = server.port, server.metrics_port, server.args
    again.stderr_path = server.stderr_path.with_suffix(".restarted")
    return again.start()


def admin(server: CohortServer) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap, "logger": logging.getLogger(CLIENT_LOGGER)})


def create_topic(server: CohortServer, name: str, partitions: int) -> None:
    client = admin(server)  # kept alive until the result is in (a dropped client cancels its futures)
    client.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(20)


def consumer(server: CohortServer, group: str, name: str, topics: list[str]) -> Consumer:
    c = Consumer({
        "bootstrap.servers": server.bootstrap, "group.id": group, "group.protocol": "consumer", "client.id": name,
        "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
        "logger": logging.getLogger(CLIENT_LOGGER),
    })
    c.subscribe(topics)
    return c


def assignment(c: Consumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in c.assignment()}


def poll_until(consumers: list[Consumer], condition, timeout: float, what: str):
    """Poll every consumer (assignments are applied in poll) until `condition()` holds."""
    deadline = time.monotonic() + timeout
    while True:
        for c in consumers:
            c.poll(0.05)
        outcome = condition()
        if outcome:
            return outcome
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}; last: {outcome!r}")


def spread_over(consumers: list[Consumer], partitions: set[tuple[str, int]]):
    """True when the consumers own `partitions` exactly once between them, as evenly as possible."""
    def check():
        owned = [assignment(c) for c in consumers]
        flat = [tp for a in owned for tp in a]
        sizes = sorted(len(a) for a in owned)
        return (len(flat) == len(set(flat)) and set(flat) == partitions and sizes[-1] - sizes[0] <= 1) or NotYet(owned)
    return check


def describe(server: CohortServer, group: str):
    client = admin(server)
    return client.describe_consumer_groups([group])[group].result(10)


def test_join_scale_one_to_four_to_one_with_server_side_assignment(consumer_server):
    create_topic(consumer_server, "cg-scale", 8)
    everything = {("cg-scale", p) for p in range(8)}
    first = consumer(consumer_server, "cg-scale-group", "c0", ["cg-scale"])
    members = [first]
    try:
        poll_until(members, spread_over(members, everything), 30, "one member owns all 8 partitions")
        members += [consumer(consumer_server, "cg-scale-group", f"c{i}", ["cg-scale"]) for i in range(1, 4)]
        poll_until(members, spread_over(members, everything), 30, "four members own 2 partitions each")
        # the last acknowledgements may still be on their way: Reconciling (librdkafka: UNKNOWN) until then
        group = poll_until(members, lambda: (lambda g: g if g.state is ConsumerGroupState.STABLE else None)(
            describe(consumer_server, "cg-scale-group")), 15, "the group is Stable")
        assert group.type is ConsumerGroupType.CONSUMER
        assert len(group.members) == 4
        assert {tp.partition for m in group.members for tp in m.assignment.topic_partitions} == set(range(8))
        for extra in members[1:]:
            extra.close()
        members = [first]
        poll_until(members, spread_over(members, everything), 30, "the first member owns all 8 again")
        wait_for(lambda: len(describe(consumer_server, "cg-scale-group").members) == 1, 15, "3 members left")
    finally:
        for c in members:
            c.close()


def rebalances(server: CohortServer, group: str) -> list[dict]:
    """The group's rebalance journal as `cohort groups rebalances G --output json` prints it."""
    result = run_cohort("groups", "rebalances", group, "--bootstrap-server", server.bootstrap, "--output", "json")
    assert result.returncode == 0, result.stderr
    return [e for e in json.loads(result.stdout) if e["kind"] == "rebalance"]


def test_joins_a_leave_and_a_topic_change_are_journaled_with_the_consumer_groups_epochs(consumer_server):
    create_topic(consumer_server, "cg-journal", 4)
    group = "cg-journal-group"
    everything = {("cg-journal", p) for p in range(4)}
    first = consumer(consumer_server, group, "j0", ["cg-journal"])
    members = [first]
    try:
        poll_until(members, spread_over(members, everything), 30, "j0 owns all 4 partitions")
        second = consumer(consumer_server, group, "j1", ["cg-journal"])
        members.append(second)
        poll_until(members, spread_over(members, everything), 30, "j0 and j1 own 2 partitions each")
        poll_until(members, lambda: len(rebalances(consumer_server, group)) >= 2 or NotYet(
            rebalances(consumer_server, group)), 30, "j1's join is journaled once the group is Stable")
        second.close()
        members = [first]
        poll_until(members, spread_over(members, everything), 30, "j0 owns all 4 again")
        client = admin(consumer_server)  # kept alive until the result is in
        client.create_partitions([NewPartitions("cg-journal", 6)])["cg-journal"].result(10)
        everything |= {("cg-journal", 4), ("cg-journal", 5)}
        poll_until(members, spread_over(members, everything), 30, "j0 is given the 2 new partitions")
        entries = poll_until(members, lambda: (lambda es: es if len(es) >= 4 else NotYet(es))(
            rebalances(consumer_server, group)), 30, "four rebalances journaled")
    finally:
        for c in members:
            c.close()
    assert all(e["group_type"] == "consumer" for e in entries), entries
    first_join, second_join, leave, grown = entries[:4]
    j0 = [m["member_id"] for m in first_join["members"] if m["client_id"] == "j0"][0]

    def summary(e):
        return (e["trigger"], {m["client_id"]: m["role"] for m in e["members"]}, e["state_after"])
    assert summary(first_join) == ("member_joined", {"j0": "joined"}, "Stable")
    assert {(mv["partition"], mv["from"], mv["to"]) for mv in first_join["moves"]} == {(p, None, j0) for p in range(4)}
    assert summary(second_join) == ("member_joined", {"j1": "joined"}, "Stable")
    j1 = second_join["members"][0]["member_id"]
    assert sorted((mv["from"], mv["to"]) for mv in second_join["moves"]) == [(j0, j1)] * 2
    assert summary(leave) == ("member_left", {"j1": "removed"}, "Stable")
    assert sorted((mv["from"], mv["to"]) for mv in leave["moves"]) == [(j1, j0)] * 2
    assert summary(grown)[0] == "topic_change"
    assert {(mv["partition"], mv["from"], mv["to"]) for mv in grown["moves"]} == {(4, None, j0), (5, None, j0)}
    epochs = [(e["epoch_before"], e["epoch_after"]) for e in entries[:4]]
    assert epochs[0] == (1, 2), epochs  # a consumer group is created at epoch 1; the first join bumps it
    assert all(after > before for before, after in epochs) and all(
        epochs[i][1] <= epochs[i + 1][0] for i in range(3)), epochs
    assert all(e["ended_ms"] >= e["started_ms"] > 0 for e in entries)
    # j0 closed too: the group is Empty, and an admin reset is journaled with the consumer group's epoch
    emptied = wait_for(lambda: (lambda es: es[4] if len(es) >= 5 else None)(rebalances(consumer_server, group)), 30,
                       "j0's leave journaled")
    assert (emptied["trigger"], emptied["state_after"]) == ("member_left", "Empty")
    reset = run_cohort("groups", "reset-offsets", "--group", group, "--topic", "cg-journal", "--to-earliest",
                       "--execute", "--bootstrap-server", consumer_server.bootstrap)
    assert reset.returncode == 0, reset.stderr
    admin_entries = wait_for(lambda: [e for e in json.loads(run_cohort(
        "groups", "rebalances", group, "--bootstrap-server", consumer_server.bootstrap, "--output", "json").stdout)
        if e["kind"] == "admin"], 30, "the reset journaled")
    assert [(e["trigger"], e["group_type"], e["epoch_after"], e["state_after"]) for e in admin_entries] == [
        ("reset_offsets", "consumer", emptied["epoch_after"], "Empty")]
    server = restarted(consumer_server)
    consumer_server.process, consumer_server._stderr = server.process, server._stderr  # the fixture stops it
    assert rebalances(server, group)[:4] == entries[:4]  # persisted through the Store: a restart keeps them


def test_a_killed_member_expires_and_its_partitions_move(consumer_server, tmp_path):
    create_topic(consumer_server, "cg-kill", 4)
    script = tmp_path / "member.py"
    script.write_text(textwrap.dedent(f"""
        from confluent_kafka import Consumer
        c = Consumer({{"bootstrap.servers": "{consumer_server.bootstrap}", "group.id": "cg-kill-group",
                      "group.protocol": "consumer", "client.id": "doomed"}})
        c.subscribe(["cg-kill"])
        while True:
            c.poll(0.1)
            if c.assignment():
                print("assigned", flush=True)
    """))
    survivor = consumer(consumer_server, "cg-kill-group", "survivor", ["cg-kill"])
    doomed = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env=clean_env())
    try:
        everything = {("cg-kill", p) for p in range(4)}
        poll_until([survivor], lambda: len(assignment(survivor)) == 2 or NotYet(assignment(survivor)), 30,
                   "the survivor owns half the partitions")
        readable, _, _ = select.select([doomed.stdout], [], [], 30)
        assert readable and doomed.stdout.readline() == b"assigned\n"
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        killed_at = time.monotonic()
        poll_until([survivor], lambda: assignment(survivor) == everything or NotYet(assignment(survivor)), SESSION_MS / 1000 + 20,
                   "the survivor owns every partition after the session expired")
        assert time.monotonic() - killed_at >= SESSION_MS / 1000 * 0.5  # by expiry, not at once
        assert [m.client_id for m in describe(consumer_server, "cg-kill-group").members] == ["survivor"]
    finally:
        if doomed.poll() is None:
            doomed.kill()
        survivor.close()


def test_commits_carry_the_member_epoch_and_stale_ones_are_refused(consumer_server, raw_client):
    create_topic(consumer_server, "cg-commit", 2)
    c = consumer(consumer_server, "cg-commit-group", "committer", ["cg-commit"])
    try:
        everything = {("cg-commit", 0), ("cg-commit", 1)}
        poll_until([c], lambda: assignment(c) == everything or NotYet(assignment(c)), 30, "assigned")
        c.commit(offsets=[TopicPartition("cg-commit", 0, 42, metadata="m")], asynchronous=False)
        [got] = c.committed([TopicPartition("cg-commit", 0)], timeout=10)
        assert (got.offset, got.metadata) == (42, "m")
        [member] = describe(consumer_server, "cg-commit-group").members
        client = raw_client(consumer_server.port)
        Topic = OffsetCommitRequest.OffsetCommitRequestTopic

        def commit(member_id: str, epoch: int, version: int = 9) -> int:
            request = OffsetCommitRequest(group_id="cg-commit-group", generation_id_or_member_epoch=epoch,
                                          member_id=member_id, topics=[Topic(name="cg-commit", partitions=[
                                              Topic.OffsetCommitRequestPartition(partition_index=1,
                                                                                 committed_offset=7)])])
            return client.request(request, version).topics[0].partitions[0].error_code

        epoch = consumer_server_member_epoch(client, "cg-commit-group", member.member_id)
        assert commit(member.member_id, epoch) == ErrorCode.NONE
        assert commit(member.member_id, epoch - 1) == ErrorCode.STALE_MEMBER_EPOCH
        assert commit("not-a-member", epoch) == ErrorCode.UNKNOWN_MEMBER_ID
        assert commit("", -1) == ErrorCode.UNKNOWN_MEMBER_ID  # a simple commit while the group has members

        Group = OffsetFetchRequest.OffsetFetchRequestGroup
        def fetch_error(member_id, epoch) -> int:
            request = OffsetFetchRequest(groups=[Group(group_id="cg-commit-group", member_id=member_id,
                                                       member_epoch=epoch, topics=None)])
            return client.request(request, 9).groups[0].error_code
        assert fetch_error(member.member_id, epoch) == ErrorCode.NONE
        assert fetch_error(member.member_id, epoch + 5) == ErrorCode.STALE_MEMBER_EPOCH
        assert fetch_error("stranger", epoch) == ErrorCode.UNKNOWN_MEMBER_ID
        assert fetch_error(None, -1) == ErrorCode.NONE  # admin tools
    finally:
        c.close()


def consumer_server_member_epoch(client, group: str, member_id: str) -> int:
    response = client.request(ConsumerGroupDescribeRequest(group_ids=[group]), 1)
    [described] = response.groups
    return next(m.member_epoch for m in described.members if m.member_id == member_id)


def test_a_regex_subscription_picks_up_topics_created_and_grown_later(consumer_server):
    create_topic(consumer_server, "cg-re-a", 2)
    c = consumer(consumer_server, "cg-regex-group", "regex", ["^cg-re-.*"])
    try:
        poll_until([c], lambda: assignment(c) == {("cg-re-a", 0), ("cg-re-a", 1)} or NotYet(assignment(c)), 30,
                   "the regex resolved to cg-re-a")
        create_topic(consumer_server, "cg-re-b", 1)
        create_topic(consumer_server, "cg-other", 1)
        poll_until([c], lambda: assignment(c) == {("cg-re-a", 0), ("cg-re-a", 1), ("cg-re-b", 0)} or NotYet(assignment(c)),
                   30, "the new matching topic is assigned, the other one is not")
        client = admin(consumer_server)
        client.create_partitions([NewPartitions("cg-re-b", 2)])["cg-re-b"].result(10)
        poll_until([c], lambda: ("cg-re-b", 1) in assignment(c) or NotYet(assignment(c)), 30, "the new partition is assigned")
        [member] = describe(consumer_server, "cg-regex-group").members
        assert member.client_id == "regex"
    finally:
        c.close()


def test_a_restart_keeps_the_group_without_a_rebalance(consumer_server, raw_client):
    create_topic(consumer_server, "cg-restart", 4)
    members = [consumer(consumer_server, "cg-restart-group", f"r{i}", ["cg-restart"]) for i in range(2)]
    everything = {("cg-restart", p) for p in range(4)}
    try:
        poll_until(members, spread_over(members, everything), 30, "two members own 2 partitions each")
        before = _described(raw_client, consumer_server)
        owned_before = [assignment(c) for c in members]
        server = restarted(consumer_server)
        consumer_server.process, consumer_server._stderr = server.process, server._stderr  # the fixture stops it
        # The members go on heartbeating with the epochs they had; the replayed group accepts them.
        poll_until(members, lambda: metric_value(server.scrape(), "cohort_group_heartbeats_total",
                                                 type="consumer") >= 6, 30, "heartbeats reach the restarted server")
        after = _described(raw_client, server)
        assert after.group_state == "Stable"
        assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
        assert {(m.member_id, m.member_epoch) for m in after.members} == {
            (m.member_id, m.member_epoch) for m in before.members}
        assert [assignment(c) for c in members] == owned_before
        assert metric_value(server.scrape(), "cohort_group_epoch_bumps_total", type="consumer") == 0
    finally:
        for c in members:
            c.close()


def _described(raw_client, server):
    return raw_client(server.port).request(ConsumerGroupDescribeRequest(group_ids=["cg-restart-group"]), 1).groups[0]


def test_classic_apis_meet_a_consumer_group_with_kafkas_answers(consumer_server, raw_client):
    create_topic(consumer_server, "cg-classic", 1)
    c = consumer(consumer_server, "cg-mixed", "new-protocol", ["cg-classic"])
    try:
        poll_until([c], lambda: assignment(c) == {("cg-classic", 0)} or NotYet(assignment(c)), 30, "assigned")
        client = raw_client(consumer_server.port)
        Protocol = JoinGroupRequest.JoinGroupRequestProtocol
        join = client.request(JoinGroupRequest(group_id="cg-mixed", session_timeout_ms=10000,
                                               rebalance_timeout_ms=10000, member_id="", protocol_type="connect",
                                               protocols=[Protocol(name="range", metadata=b"")]), 7)
        assert join.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL  # not the consumer protocol type
        [described] = client.request(DescribeGroupsRequest(groups=["cg-mixed"]), 5).groups
        assert (described.error_code, described.group_state, described.members) == (0, "Dead", [])
        [described] = client.request(DescribeGroupsRequest(groups=["cg-mixed"]), 6).groups  # KIP-1043
        assert (described.error_code, described.error_message) == (
            ErrorCode.GROUP_ID_NOT_FOUND, "Group cg-mixed is not a classic group.")
        admin_client = admin(consumer_server)
        listed = admin_client.list_consumer_groups().result(10).valid
        mine = [g for g in listed if g.group_id == "cg-mixed"]
        assert [(g.type, g.state) for g in mine] == [(ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE)]
        refused = admin_client.delete_consumer_groups(["cg-mixed"])["cg-mixed"]
        with pytest.raises(KafkaException, match="NON_EMPTY_GROUP"):
            refused.result(10)
    finally:
        c.close()
    # Empty now: it can be deleted, and its id is free for a classic group again.
    wait_for(lambda: describe(consumer_server, "cg-mixed").state is ConsumerGroupState.EMPTY, 15, "group empty")
    admin_client.delete_consumer_groups(["cg-mixed"])["cg-mixed"].result(10)
    described = client.request(ConsumerGroupDescribeRequest(group_ids=["cg-mixed"]), 0).groups[0]
    assert described.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_workers_serve_consumer_groups_whose_worker_does_not_keep_the_topic_registry(tmp_path):
    from workers_harness import WorkersServer, group_on_worker

    server = WorkersServer(tmp_path / "data", 2, *CONSUMER_GROUP_SETTINGS).start()
    try:
        create_topic(server, "cg-workers", 3)
        group = group_on_worker("cg-workers-group", 1, 2)  # worker 1: the registry is on worker 0
        c = consumer(server, group, "on-worker-1", ["cg-workers"])
        try:
            everything = {("cg-workers", p) for p in range(3)}
            poll_until([c], lambda: assignment(c) == everything or NotYet(assignment(c)), 30,
                       "the member on worker 1 owns every partition")
            client = admin(server)
            client.create_partitions([NewPartitions("cg-workers", 4)])["cg-workers"].result(10)
            poll_until([c], lambda: ("cg-workers", 3) in assignment(c) or NotYet(assignment(c)), 30,
                       "a partition added on worker 0's registry reaches the group on worker 1")
        finally:
            c.close()
    finally:
        assert server.stop() == 0, server.stderr()
