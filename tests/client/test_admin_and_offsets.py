"""Offsets and admin operations against a real `cohort serve`, async and through the blocking facade."""
from __future__ import annotations

import asyncio

import pytest

from cohort.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Admin, NewTopic
from cohort.client.blocking import BlockingAdmin
from cohort.client.errors import GroupIdNotFoundError, GroupNotEmptyError, KafkaError, UnknownMemberIdError
from cohort.client.membership import GroupMember
from cohort.client.offsets import OffsetAndMetadata
from cohort.client.topic_partition import TopicPartition
from client_harness import CohortServe
from cohort.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(60)


async def test_simple_commit_and_fetch_round_trip_metadata_exactly(shared_cohort_server):
    async with Admin(shared_cohort_server.bootstrap) as admin:
        await admin.create_topics([NewTopic("orders", 3)])
        await admin.alter_offsets("g-roundtrip", {
            ("orders", 0): (42, "m"),
            ("orders", 1): OffsetAndMetadata(7, "ünïcode\x00", leader_epoch=3),
            ("orders", 2): 0,
        })
        everything = await admin.fetch_offsets("g-roundtrip")
        assert everything == {
            TopicPartition("orders", 0): OffsetAndMetadata(42, "m"),
            TopicPartition("orders", 1): OffsetAndMetadata(7, "ünïcode\x00", 3),
            TopicPartition("orders", 2): OffsetAndMetadata(0, ""),
        }
        # Partitions without a committed offset are simply absent.
        some = await admin.fetch_offsets("g-roundtrip", [("orders", 0), ("orders", 9), ("other", 0)])
        assert some == {TopicPartition("orders", 0): OffsetAndMetadata(42, "m")}
        assert await admin.fetch_offsets("g-never-committed") == {}


async def test_fetch_offsets_of_many_groups_at_once(shared_cohort_server):
    async with Admin(shared_cohort_server.bootstrap) as admin:
        for i in range(3):
            await admin.alter_offsets(f"g-many-{i}", {("many", 0): 100 + i})
        result = await admin.fetch_offsets_many({"g-many-0": None, "g-many-1": [("many", 0)], "g-many-2": None, "g-many-none": None})
        assert result == {
            "g-many-0": {TopicPartition("many", 0): OffsetAndMetadata(100)},
            "g-many-1": {TopicPartition("many", 0): OffsetAndMetadata(101)},
            "g-many-2": {TopicPartition("many", 0): OffsetAndMetadata(102)},
            "g-many-none": {},
        }


async def test_group_admin_respects_active_members(shared_cohort_server):
    bootstrap = shared_cohort_server.bootstrap
    member = GroupMember(bootstrap, "g-active", ["active"], session_timeout_ms=6000, heartbeat_interval_ms=200)
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic("active", 2)])
        try:
            await member.start(timeout=15)
            await member.commit({("active", 0): 5})
            listed = {g.group_id: g for g in await admin.list_groups()}
            assert listed["g-active"].state == "Stable" and listed["g-active"].protocol_type == "consumer"
            assert [g.group_id for g in await admin.list_groups(states=["stable"])].count("g-active") == 1
            assert "g-active" not in [g.group_id for g in await admin.list_groups(states=["Empty"])]

            with pytest.raises(UnknownMemberIdError):  # a simple commit on an active group
                await admin.alter_offsets("g-active", {("active", 0): 1})
            # Kafka decides per topic for a consumer group: the subscribed topic is refused.
            assert await admin.delete_offsets("g-active", [("active", 0)]) == {
                TopicPartition("active", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            }
            result = await admin.delete_groups(["g-active"])
            assert isinstance(result["g-active"], GroupNotEmptyError)
        finally:
            await member.close()
        assert (await admin.describe_group("g-active")).state == "Empty"
        assert await admin.delete_offsets("g-active", [("active", 0), ("active", 1)]) == {
            TopicPartition("active", 0): 0, TopicPartition("active", 1): 0,
        }
        assert await admin.delete_groups(["g-active"]) == {"g-active": None}
        assert (await admin.describe_group("g-active")).state == "Dead"
        unknown = await admin.delete_groups(["g-never-existed"])
        assert isinstance(unknown["g-never-existed"], GroupIdNotFoundError)
        with pytest.raises(GroupIdNotFoundError):
            await admin.delete_offsets("g-never-existed", [("active", 0)])


async def test_topic_admin_and_log_offsets(shared_cohort_server):
    async with Admin(shared_cohort_server.bootstrap) as admin:
        assert await admin.create_topics([NewTopic("topics-a", 2), NewTopic("topics-b", 1)]) == {
            "topics-a": None, "topics-b": None,
        }
        again = await admin.create_topics([NewTopic("topics-a", 2)])
        assert again["topics-a"].code == ErrorCode.TOPIC_ALREADY_EXISTS
        assert await admin.create_topics([NewTopic("topics-dry", 4)], validate_only=True) == {"topics-dry": None}
        listed = await admin.list_topics()
        assert len(listed["topics-a"].partitions) == 2 and "topics-dry" not in listed

        assert await admin.create_partitions({"topics-a": 5}) == {"topics-a": None}
        shrink = await admin.create_partitions({"topics-a": 3})
        assert shrink["topics-a"].code == ErrorCode.INVALID_PARTITIONS
        described = await admin.describe_topics(["topics-a", "topics-missing"])
        assert len(described["topics-a"].partitions) == 5
        assert described["topics-missing"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        # A record-less log: earliest 0, latest = the highest committed offset.
        await admin.alter_offsets("g-topics", {("topics-a", 1): 77})
        offsets = await admin.list_partition_offsets({("topics-a", 0): EARLIEST_TIMESTAMP, ("topics-a", 1): LATEST_TIMESTAMP})
        assert offsets[TopicPartition("topics-a", 0)].offset == 0
        assert offsets[TopicPartition("topics-a", 1)].offset == 77
        with pytest.raises(KafkaError) as info:
            await admin.list_partition_offsets({("topics-missing", 0): LATEST_TIMESTAMP})
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        assert await admin.delete_topics(["topics-b"]) == {"topics-b": None}
        assert "topics-b" not in await admin.list_topics()
        gone = await admin.delete_topics(["topics-b"])
        assert gone["topics-b"].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_offsets_survive_a_restart_and_the_client_retries_through_it(tmp_path):
    server = CohortServe(tmp_path / "data").start()
    try:
        async with Admin(server.bootstrap, api_timeout_ms=30000) as admin:
            await admin.alter_offsets("g-restart", {("restart", 0): (9, "before")})
            server.stop()
            server.start()
            # Same Admin: its connections broke; it reconnects, rediscovers and retries.
            assert await admin.fetch_offsets("g-restart") == {TopicPartition("restart", 0): OffsetAndMetadata(9, "before")}
    finally:
        server.stop()


def test_blocking_admin_for_synchronous_callers(shared_cohort_server):
    with BlockingAdmin(shared_cohort_server.bootstrap) as admin:
        admin.commit_offsets("g-blocking", {("spark-topic", 0): (1234, "batch 7"), ("spark-topic", 1): 99})
        assert admin.fetch_offsets("g-blocking") == {
            TopicPartition("spark-topic", 0): OffsetAndMetadata(1234, "batch 7"),
            TopicPartition("spark-topic", 1): OffsetAndMetadata(99, ""),
        }
        description = admin.describe_group("g-blocking")
        assert description.state == "Empty" and description.members == () and description.is_inactive
        assert admin.describe_group("g-blocking-unknown").state == "Dead"
    with pytest.raises(RuntimeError, match="closed"):
        admin.fetch_offsets("g-blocking")


async def test_blocking_admin_works_from_inside_a_running_event_loop(shared_cohort_server):
    # The Spark driver or a notebook may already run a loop in this thread.
    with BlockingAdmin(shared_cohort_server.bootstrap) as admin:
        admin.commit_offsets("g-blocking-loop", {("t", 0): 1})
        assert admin.fetch_offsets("g-blocking-loop")[TopicPartition("t", 0)].offset == 1
    await asyncio.sleep(0)
