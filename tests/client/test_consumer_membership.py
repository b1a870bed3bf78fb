"""The thin client as a KIP-848 member (`ConsumerGroupMember`), and the admin CLI on consumer groups,
against a real `cohort serve` (short consumer-group heartbeats keep reconciliation fast)."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from cohort.client.admin import Admin, NewTopic
from cohort.client.consumer_membership import ConsumerGroupMember, ConsumerMemberState
from cohort.client.errors import KafkaError
from cohort.client.membership import RebalanceListener
from cohort.client.topic_partition import TopicPartition
from cohort.protocol.errors import ErrorCode
from client_harness import CohortServe, run_cli

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def consumer_server(tmp_path_factory):
    server = CohortServe(tmp_path_factory.mktemp("cohort") / "data",
                         "--group.consumer.heartbeat.interval.ms", "200",
                         "--group.consumer.min.heartbeat.interval.ms", "100").start()
    try:
        yield server
    finally:
        server.stop()


async def until(condition, timeout: float, what: str):
    """Poll `condition` (bounded) until it holds; the value it returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.05)


class Recorder(RebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, frozenset]] = []

    async def on_partitions_revoked(self, revoked):
        self.events.append(("revoked", revoked))

    async def on_partitions_assigned(self, assigned):
        self.events.append(("assigned", assigned))


def partitions(topic: str, n: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(n)}


async def test_members_share_partitions_commit_with_their_epoch_and_leave(consumer_server):
    async with Admin(consumer_server.bootstrap) as admin:
        await admin.create_topics([NewTopic("thin-cg", 4)])
    listener = Recorder()
    first = ConsumerGroupMember(consumer_server.bootstrap, "thin-cg-group", ["thin-cg"], client_id="thin-1",
                                listener=listener)
    second = ConsumerGroupMember(consumer_server.bootstrap, "thin-cg-group", ["thin-cg"], client_id="thin-2")
    try:
        assert await first.start(timeout=30) == partitions("thin-cg", 4)
        await second.start(wait=False)
        await until(lambda: len(first.assignment) == 2 and len(second.assignment) == 2, 30, "two partitions each")
        assert first.assignment | second.assignment == partitions("thin-cg", 4)
        # revoke before assign: the first member gave two up, then nothing more was added to it
        assert [kind for kind, _ in listener.events] == ["assigned", "revoked"]
        assert first.state is ConsumerMemberState.STABLE and first.member_epoch > 0

        [tp, *_] = sorted(first.assignment)
        await first.commit({(tp.topic, tp.partition): (11, "thin")})
        committed = await first.committed([tp])
        assert (committed[tp].offset, committed[tp].metadata) == (11, "thin")
        first.member_epoch -= 1  # as if this member missed an epoch: the coordinator refuses its commit
        with pytest.raises(KafkaError) as refused:
            await first.commit({(tp.topic, tp.partition): (12, "")})
        assert refused.value.code == ErrorCode.STALE_MEMBER_EPOCH
        first.member_epoch += 1

        await second.close()
        await until(lambda: first.assignment == partitions("thin-cg", 4), 30, "the first member owns all again")
    finally:
        await first.close()
        await second.close()


async def test_groups_cli_shows_type_epochs_and_current_vs_target(consumer_server):
    async with Admin(consumer_server.bootstrap) as admin:
        await admin.create_topics([NewTopic("thin-cli", 3)])
    member = ConsumerGroupMember(consumer_server.bootstrap, "thin-cli-group", ["thin-cli"], client_id="cli-member",
                                 server_assignor="range")
    try:
        await member.start(timeout=30)

        def cli(*args):
            return run_cli("groups", *args, "--bootstrap-server", consumer_server.bootstrap)

        listed = await asyncio.to_thread(cli, "list", "--type", "consumer", "--output", "json")
        assert {"group": "thin-cli-group", "type": "consumer", "state": "Stable", "protocol_type": "consumer"} \
            in json.loads(listed.stdout)
        state = await asyncio.to_thread(cli, "describe", "thin-cli-group", "--state", "--output", "json")
        [row] = json.loads(state.stdout)
        assert (row["type"], row["assignment_strategy"], row["state"], row["members"]) == (
            "consumer", "range", "Stable", 1)
        # created at epoch 1, bumped once by the one member's join (with its subscription), as Kafka's
        assert row["group_epoch"] == row["target_assignment_epoch"] == member.member_epoch == 2
        members = await asyncio.to_thread(cli, "describe", "thin-cli-group", "--members", "--verbose")
        lines = [line.split() for line in members.stdout.splitlines() if line.strip()]
        assert lines[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",  # no instance ids: no column
                            "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
        assert lines[1][0] == "thin-cli-group" and lines[1][1] == member.member_id
        assert lines[1][-4:] == [str(member.member_epoch), "thin-cli:0,1,2", str(row["target_assignment_epoch"]),
                                 "thin-cli:0,1,2"]
    finally:
        await member.close()


async def test_spark_committer_sees_consumer_group_members_and_commits_once_it_is_empty(consumer_server):
    from cohort.client.spark.coordinator_link import CoordinatorLink, GroupActive

    async with Admin(consumer_server.bootstrap) as admin:
        await admin.create_topics([NewTopic("thin-spark", 1)])
    member = ConsumerGroupMember(consumer_server.bootstrap, "thin-spark-group", ["thin-spark"])
    link = CoordinatorLink(consumer_server.bootstrap, 10000, 0)
    try:
        await member.start(timeout=30)
        with pytest.raises(GroupActive):
            await asyncio.to_thread(link.ensure_no_active_members, "thin-spark-group")
        await member.close()
        await asyncio.to_thread(link.ensure_no_active_members, "thin-spark-group")  # Empty consumer group
        await asyncio.to_thread(link.commit, "thin-spark-group", {TopicPartition("thin-spark", 0): 17}, "batch 1")
        committed = await asyncio.to_thread(link.committed_offsets, "thin-spark-group")
        assert committed[TopicPartition("thin-spark", 0)].offset == 17
    finally:
        await member.close()
        await asyncio.to_thread(link.close)
