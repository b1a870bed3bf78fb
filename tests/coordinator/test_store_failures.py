"""A failed write leaves no trace: the real server over the real log, whose disk stops taking appends.

Each scenario takes the group as far as it goes with a working disk, makes appends fail (the log's
`Store.append` refuses them as a full disk does: KAFKA_STORAGE_ERROR), sends the request, and checks
that the client gets the error Kafka's group coordinator answers a failed append with (KAFKA_STORAGE_ERROR
maps to NOT_COORDINATOR: `GroupCoordinatorService`, `appendGroupMetadataErrorToResponseError`) and that
what the server holds in memory is what it held before. Then the disk recovers and the server restarts
from its files: the group is what memory said.
"""
from __future__ import annotations

import asyncio
import errno

import pytest

from cohort.coordinator.contracts.store import StorageError
from cohort.coordinator.log import OffsetsLog
from cohort.coordinator.server.node import CoordinatorServer
from cohort.protocol import messages as m
from cohort.protocol.consumer_protocol import ConsumerProtocolSubscription, encode_subscription
from cohort.protocol.errors import ErrorCode
from server_harness import RawClient, ServerThread, make_config

E = ErrorCode


class FullDiskLog(OffsetsLog):
    """The real offsets log, whose appends fail while `full` is set, as a full disk's do: the append's
    future fails with KAFKA_STORAGE_ERROR after the partition's earlier appends finished (a log finishes
    a partition's appends in order)."""

    full = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._last: dict[int, asyncio.Future] = {}

    def append(self, partition, records):
        if not self.full:
            appended = self._last[partition] = super().append(partition, records)
            return appended
        earlier = self._last.get(partition)
        failed = self._last[partition] = asyncio.get_running_loop().create_future()

        def fail(_=None) -> None:
            if not failed.done():
                failed.set_exception(StorageError("No space left on device", E.KAFKA_STORAGE_ERROR, errno.ENOSPC))

        if earlier is None or earlier.done():
            failed.get_loop().call_soon(fail)
        else:
            earlier.add_done_callback(fail)
        return failed


class FailingServer:
    """A real server (real sockets, real files) over a `FullDiskLog`."""

    def __init__(self, data_dir, metrics_port: int = 0) -> None:
        self.data_dir = data_dir
        self.config = make_config(data_dir, offsets_topic_num_partitions=3, offsets_flush_policy="always")
        self.thread = ServerThread(self.config)
        self.log = FullDiskLog(data_dir, num_partitions=3, flush_policy="always", partitions=())
        self.thread.server = CoordinatorServer(self.config, store=self.log)
        self.thread.start()
        self.client = RawClient(self.thread.port)

    def disk_full(self, full: bool) -> None:
        def set_full() -> None:
            self.log.full = full
        self.thread.run(set_full)

    def state(self, group_id: str):
        """What the server holds of the group: its classic or consumer group, and its offsets."""
        def read():
            coordinator = self.thread.server.groups
            classic = coordinator.group(group_id)
            consumer = coordinator.consumer_group(group_id)
            offsets = {(t, p): o.offset for t, parts in coordinator.offsets.group_offsets(group_id).items()
                       for p, o in parts.items()}
            if classic is not None:
                return ("classic", classic.generation_id, classic.protocol_name, classic.membership.leader_id,
                        {mid: mem.assignment for mid, mem in classic.members.items()}, offsets)
            if consumer is not None:
                return ("consumer", consumer.group_epoch, consumer.target_assignment_epoch,
                        {mid: (mem.member_epoch, dict(mem.assigned)) for mid, mem in consumer.members.items()},
                        offsets)
            return (None, offsets)
        return self.thread.run(read)

    def group_state(self, group_id: str) -> str | None:
        def read():
            group = self.thread.server.groups.group(group_id)
            return group.state.value if group is not None else None
        return self.thread.run(read)

    def restart(self) -> "FailingServer":
        self.stop()
        return FailingServer(self.data_dir)

    def stop(self) -> None:
        self.client.close()
        self.thread.stop()


@pytest.fixture
def failing_server(tmp_path):
    servers = [FailingServer(tmp_path / "data")]
    yield servers
    for server in servers:
        server.stop()


SUBSCRIPTION = encode_subscription(ConsumerProtocolSubscription(topics=["t"]), 0)


def join(client: RawClient, group_id: str, member_id: str = "") -> m.JoinGroupResponse:
    return client.request(m.JoinGroupRequest(
        group_id=group_id, session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id=member_id,
        group_instance_id=None, protocol_type="consumer",
        protocols=[m.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=SUBSCRIPTION)],
        reason=None), 7)


def joined(client: RawClient, group_id: str) -> m.JoinGroupResponse:
    """A new member's two JoinGroups (the first one only gets its member id)."""
    first = join(client, group_id)
    assert first.error_code == E.MEMBER_ID_REQUIRED
    response = join(client, group_id, first.member_id)
    assert response.error_code == E.NONE, response
    return response


def sync(client: RawClient, group_id: str, member_id: str, generation: int, assignment: bytes):
    return client.request(m.SyncGroupRequest(
        group_id=group_id, generation_id=generation, member_id=member_id, group_instance_id=None,
        protocol_type="consumer", protocol_name="range",
        assignments=[m.SyncGroupRequest.SyncGroupRequestAssignment(member_id=member_id, assignment=assignment)]), 5)


def commit(client: RawClient, group_id: str, offset: int, member_id: str = "", generation: int = -1):
    Topic = m.OffsetCommitRequest.OffsetCommitRequestTopic
    return client.request(m.OffsetCommitRequest(
        group_id=group_id, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
        topics=[Topic(name="t", partitions=[Topic.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")])]), 8)


def consumer_heartbeat(client: RawClient, group_id: str, member_id: str):
    return client.request(m.ConsumerGroupHeartbeatRequest(
        group_id=group_id, member_id=member_id, member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000, subscribed_topic_names=["t"], subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=[]), 1)


def test_a_join_group_whose_new_group_cannot_be_written_leaves_no_group(failing_server):
    server = failing_server[0]
    server.disk_full(True)
    assert join(server.client, "g").error_code == E.NOT_COORDINATOR  # a new group is written first
    assert server.state("g") == (None, {})
    server.disk_full(False)
    joined(server.client, "g")  # the disk is back: the group is made as usual
    assert server.state("g")[0] == "classic"


def test_a_sync_group_whose_assignment_cannot_be_written_keeps_the_last_durable_assignment(failing_server):
    server = failing_server[0]
    leader = joined(server.client, "g")
    assert sync(server.client, "g", leader.member_id, leader.generation_id, b"first").error_code == E.NONE
    rejoined = join(server.client, "g", leader.member_id)  # a new generation; its assignment is to come
    assert rejoined.error_code == E.NONE and rejoined.generation_id == leader.generation_id + 1
    before = server.state("g")
    server.disk_full(True)
    response = sync(server.client, "g", leader.member_id, rejoined.generation_id, b"second")
    assert response.error_code == E.NOT_COORDINATOR
    # The assignment that could not be stored is nowhere in memory; the generation and the members are
    # what they were. Kafka's rule for an assignment that could not be stored follows: assignments are
    # reset and the group rebalances.
    after = server.state("g")
    assert after[:4] == before[:4] and after[5] == before[5]
    assert after[4] == {leader.member_id: b""}
    assert server.group_state("g") == "PreparingRebalance"
    server.disk_full(False)
    failing_server[0] = server = server.restart()
    assert server.state("g")[4] == {leader.member_id: b"first"}


def test_an_offset_commit_that_cannot_be_written_leaves_the_committed_offsets(failing_server):
    server = failing_server[0]
    assert commit(server.client, "g", 5).topics[0].partitions[0].error_code == E.NONE
    before = server.state("g")
    server.disk_full(True)
    assert commit(server.client, "g", 9).topics[0].partitions[0].error_code == E.NOT_COORDINATOR
    assert server.state("g") == before
    fetched = server.client.request(m.OffsetFetchRequest(group_id="g", topics=None), 5)
    assert fetched.topics[0].partitions[0].committed_offset == 5


def test_a_delete_groups_that_cannot_be_written_leaves_the_group_and_its_offsets(failing_server):
    server = failing_server[0]
    leader = joined(server.client, "g")
    assert sync(server.client, "g", leader.member_id, leader.generation_id, b"a").error_code == E.NONE
    assert commit(server.client, "g", 5, leader.member_id, leader.generation_id) \
        .topics[0].partitions[0].error_code == E.NONE
    left = server.client.request(m.LeaveGroupRequest(group_id="g", members=[
        m.LeaveGroupRequest.MemberIdentity(member_id=leader.member_id, group_instance_id=None, reason=None)]), 5)
    assert left.error_code == E.NONE
    before = server.state("g")
    server.disk_full(True)
    deleted = server.client.request(m.DeleteGroupsRequest(groups_names=["g"]), 2)
    assert deleted.results[0].error_code == E.NOT_COORDINATOR
    assert server.state("g") == before
    assert server.group_state("g") == "Empty"
    server.disk_full(False)
    assert server.client.request(m.DeleteGroupsRequest(groups_names=["g"]), 2).results[0].error_code == E.NONE
    assert server.state("g") == (None, {})


def test_a_consumer_group_heartbeat_that_cannot_be_written_leaves_the_group_as_it_was(failing_server):
    server = failing_server[0]
    first = consumer_heartbeat(server.client, "cg", "member-a")
    assert first.error_code == E.NONE and first.member_epoch == 2
    before = server.state("cg")
    server.disk_full(True)
    refused = consumer_heartbeat(server.client, "cg", "member-b")
    assert refused.error_code == E.NOT_COORDINATOR
    assert server.state("cg") == before  # no member-b, no new group epoch
    server.disk_full(False)
    again = consumer_heartbeat(server.client, "cg", "member-b")
    assert again.error_code == E.NONE and again.member_epoch == 3
    failing_server[0] = server = server.restart()
    assert set(server.state("cg")[3]) == {"member-a", "member-b"}


def test_a_new_consumer_group_whose_first_heartbeat_cannot_be_written_is_not_kept(failing_server):
    server = failing_server[0]
    server.disk_full(True)
    assert consumer_heartbeat(server.client, "cg", "member-a").error_code == E.NOT_COORDINATOR
    assert server.state("cg") == (None, {})


def leave_consumer_group(client: RawClient, group_id: str, member_id: str, epoch: int):
    return client.request(m.ConsumerGroupHeartbeatRequest(
        group_id=group_id, member_id=member_id, member_epoch=-1, instance_id=None, rack_id=None,
        rebalance_timeout_ms=-1, subscribed_topic_names=None, subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=None), 1)


def test_an_empty_consumer_group_whose_tombstones_cannot_be_written_does_not_give_way(failing_server):
    server = failing_server[0]
    first = consumer_heartbeat(server.client, "cg", "member-a")
    assert first.error_code == E.NONE
    assert leave_consumer_group(server.client, "cg", "member-a", first.member_epoch).error_code == E.NONE
    before = server.state("cg")
    assert before[0] == "consumer" and before[3] == {}
    server.disk_full(True)
    # A classic JoinGroup to an empty consumer group replaces it: its tombstones come first, and fail.
    assert join(server.client, "cg").error_code == E.NOT_COORDINATOR
    assert server.state("cg") == before


def test_an_empty_classic_group_whose_tombstone_cannot_be_written_is_not_converted(failing_server):
    server = failing_server[0]
    assert commit(server.client, "g", 5).topics[0].partitions[0].error_code == E.NONE  # a simple group
    leader = joined(server.client, "g")
    left = server.client.request(m.LeaveGroupRequest(group_id="g", members=[
        m.LeaveGroupRequest.MemberIdentity(member_id=leader.member_id, group_instance_id=None, reason=None)]), 5)
    assert left.error_code == E.NONE
    before = server.state("g")
    assert before[0] == "classic"
    server.disk_full(True)
    assert consumer_heartbeat(server.client, "g", "member-a").error_code == E.NOT_COORDINATOR
    assert server.state("g") == before
    server.disk_full(False)
    assert consumer_heartbeat(server.client, "g", "member-a").error_code == E.NONE
    assert server.state("g")[0] == "consumer"
