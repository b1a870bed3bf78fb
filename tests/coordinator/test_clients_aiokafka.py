"""aiokafka 0.14 against ``cohort serve``: consumer groups, commits and the admin client."""
from __future__ import annotations

import asyncio

import pytest

from clients_scenario import ClientAdapter, LogCapture, run_group_scenario

import aiokafka  # the test command installs every real client: a missing one fails, never skips
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import OffsetAndMetadata

pytestmark = pytest.mark.timeout(150)


def aiokafka_adapter(bootstrap: str, topic: str) -> ClientAdapter:
    async def open_consumer(group_id: str) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group_id, client_id=f"ak-{group_id}",
            enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=6000, heartbeat_interval_ms=300, fetch_max_wait_ms=100, retry_backoff_ms=50,
        )
        await consumer.start()
        return consumer

    async def poll(c: AIOKafkaConsumer) -> None:
        await c.getmany(timeout_ms=100)

    async def assignment(c: AIOKafkaConsumer):
        return {(tp.topic, tp.partition) for tp in c.assignment()}

    async def commit(c: AIOKafkaConsumer, offsets) -> None:
        await c.commit({TopicPartition(t, p): OffsetAndMetadata(o, m) for (t, p), (o, m) in offsets.items()})

    async def committed(c: AIOKafkaConsumer, partitions):
        # The public `committed()` returns the offset only; the coordinator call also gives the metadata.
        found = await c._coordinator.fetch_committed_offsets([TopicPartition(t, p) for t, p in partitions])
        result = {}
        for t, p in partitions:
            om = found.get(TopicPartition(t, p))
            result[(t, p)] = None if om is None or om.offset < 0 else (om.offset, om.metadata)
        return result

    async def close(c: AIOKafkaConsumer) -> None:
        await c.stop()

    return ClientAdapter(name="aiokafka", open=open_consumer, poll=poll, assignment=assignment, commit=commit,
                         committed=committed, close=close, asyncio_loop=True)


async def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="ak-admin")
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        assert name in await admin.list_topics()
    finally:
        await admin.close()


def test_aiokafka_group_rebalances_and_keeps_commits(cohort_serve):
    with LogCapture("aiokafka") as logs:
        asyncio.run(create_topic(cohort_serve.bootstrap, "ak-topic", 6))
        run_group_scenario(aiokafka_adapter(cohort_serve.bootstrap, "ak-topic"), "ak-topic", "ak-group")
    logs.assert_no_repeated_errors()


async def test_aiokafka_admin_lists_describes_and_alters_offsets(cohort_serve):
    bootstrap = cohort_serve.bootstrap
    topic, group = "ak-admin-topic", "ak-admin-group"
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with LogCapture("aiokafka") as logs:
        await create_topic(bootstrap, topic, 2)
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="ak-admin")
        await admin.start()
        member = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id="ak-member",
                                  enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=300)
        await member.start()
        try:
            # Given a stable one-member group with commits on both partitions
            async with asyncio.timeout(45):
                while len(member.assignment()) != 2:
                    await member.getmany(timeout_ms=100)
            await member.commit({tp0: OffsetAndMetadata(7, "x"), tp1: OffsetAndMetadata(8, "y")})

            # list groups (ListGroups v1)
            assert (group, "consumer") in await admin.list_consumer_groups()

            # describe (DescribeGroups v3): state, protocol, the member's client id and host
            [response] = await admin.describe_consumer_groups([group])
            [described] = response.groups
            error_code, group_id, state, protocol_type, protocol, members = described[:6]
            assert (error_code, group_id, state, protocol_type, protocol) == (0, group, "Stable", "consumer",
                                                                               "roundrobin")
            [m] = members
            assert m[1] == "ak-member" and m[2].lstrip("/") == "127.0.0.1"

            # list committed offsets (OffsetFetch v3, all topics)
            offsets = await admin.list_consumer_group_offsets(group)
            assert {tp: (om.offset, om.metadata) for tp, om in offsets.items()} == {tp0: (7, "x"), tp1: (8, "y")}

            # When the member leaves, a standalone consumer alters the empty group's offset.
            await member.stop()
            [response] = await admin.describe_consumer_groups([group])
            assert response.groups[0][2] == "Empty"
            editor = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
            await editor.start()
            try:
                editor.assign([tp0])
                await editor.commit({tp0: OffsetAndMetadata(3, "reset")})
            finally:
                await editor.stop()
            offsets = await admin.list_consumer_group_offsets(group)
            assert {tp: (om.offset, om.metadata) for tp, om in offsets.items()} == {tp0: (3, "reset"), tp1: (8, "y")}
        finally:
            if member._closed is False:
                await member.stop()
            await admin.close()
    logs.assert_no_repeated_errors()
