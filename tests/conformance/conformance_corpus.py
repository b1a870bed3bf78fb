"""The conformance corpus: group-protocol exchanges as real clients send them, and their error paths.

Each scenario drives one group (`w.group`) through a server with raw frames and records every
exchange (tests/conformance/conformance_wire.py). The classic scenarios run once per client profile, at the
versions that client sends (/work/shared/reference/clients.md: kafka-python 3.0, librdkafka 2.16,
aiokafka 0.14; the Java client 4.x sends the newest versions both servers share; "older" is the lower
versions other clients are seen sending). The servers run
with `group.initial.rebalance.delay.ms=0` and `group.max.size=3` (SERVER_SETTINGS), everything
else at its default.

`SCENARIOS` lists (name, coroutine function) in the order they run.
"""
from __future__ import annotations

from cohort.protocol.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    encode_assignment,
    encode_subscription,
)
from cohort.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)

# Both servers run with these (Kafka's names; Cohort takes the same).
SERVER_SETTINGS = {"group.initial.rebalance.delay.ms": 0, "group.max.size": 3}

# Versions each client sends (clients.md; "java" = Kafka's Java client 4.x, capped at what the codecs know).
CLIENTS = {
    "kafka-python": dict(find=6, join=7, sync=5, heartbeat=4, leave=5, commit=8, fetch=8, describe=5, list=5, delete=2),
    "librdkafka": dict(find=2, join=5, sync=3, heartbeat=3, leave=1, commit=9, fetch=9, describe=5, list=5, delete=2),
    "aiokafka": dict(find=1, join=5, sync=3, heartbeat=1, leave=1, commit=3, fetch=3, describe=3, list=1, delete=2),
    "java": dict(find=6, join=9, sync=5, heartbeat=4, leave=5, commit=9, fetch=9, describe=5, list=5, delete=2),
    # older clients seen in the wild (clients.md): the first flexible JoinGroup and SyncGroup, pre-batch offsets
    "older": dict(find=2, join=6, sync=4, heartbeat=2, leave=3, commit=7, fetch=7, describe=2, list=2, delete=1),
}

SESSION_MS = 10000
REBALANCE_MS = 10000
_JoinProtocol = JoinGroupRequest.JoinGroupRequestProtocol
_Assign = SyncGroupRequest.SyncGroupRequestAssignment
_CommitTopic = OffsetCommitRequest.OffsetCommitRequestTopic
_CommitPartition = _CommitTopic.OffsetCommitRequestPartition
_FetchTopic = OffsetFetchRequest.OffsetFetchRequestTopic
_FetchGroup = OffsetFetchRequest.OffsetFetchRequestGroup
_FetchGroupTopic = _FetchGroup.OffsetFetchRequestTopics
_Leaving = LeaveGroupRequest.MemberIdentity
_DeleteTopic = OffsetDeleteRequest.OffsetDeleteRequestTopic
_DeletePartition = _DeleteTopic.OffsetDeleteRequestPartition


def subscription(*topics: str) -> bytes:
    return encode_subscription(ConsumerProtocolSubscription(topics=list(topics), owned_partitions=[]), 1)


def assignment(topic: str, *partitions: int) -> bytes:
    return encode_assignment(ConsumerProtocolAssignment(assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=list(partitions))]), 1)


def protocols(*names: str, topics=("conf-a",)) -> list:
    return [_JoinProtocol(name=n, metadata=subscription(*topics)) for n in names]


class Member:
    """One classic member on its own connection, speaking one client's versions."""

    def __init__(self, w, conn: str, v: dict, *, group: str | None = None, instance: str | None = None,
                 protocol_type: str = "consumer", names=("range", "roundrobin")) -> None:
        self.w, self.conn, self.v = w, conn, v
        self.group = group or w.group
        self.instance = instance
        self.protocol_type = protocol_type
        self.names = names
        self.member_id = ""
        self.generation = -1
        self.protocol = None

    def join_request(self, session_ms: int = SESSION_MS) -> JoinGroupRequest:
        return JoinGroupRequest(group_id=self.group, session_timeout_ms=session_ms, rebalance_timeout_ms=REBALANCE_MS,
                                member_id=self.member_id, group_instance_id=self.instance,
                                protocol_type=self.protocol_type, protocols=protocols(*self.names))

    def _joined(self, answer):
        if answer.member_id:
            self.member_id = answer.member_id
        if answer.error_code == 0:
            self.generation = answer.generation_id
            self.protocol = answer.protocol_name
        return answer

    async def join(self, step: str = "join"):
        return self._joined(await self.w.call(self.conn, self.join_request(), self.v["join"], step))

    async def join_new(self):
        """A new member's two round trips (MEMBER_ID_REQUIRED, then the join), as clients do."""
        first = await self.join("join without member id")
        if first.error_code == 79:  # MEMBER_ID_REQUIRED
            return await self.join("join with member id")
        return first

    async def start_join(self, step: str = "join (held)"):
        future = await self.w.start(self.conn, self.join_request(), self.v["join"], step)

        async def joined():
            return self._joined(await future)
        return joined()

    async def sync(self, assignments=(), step: str = "sync", generation: int | None = None):
        return await self.w.call(self.conn, SyncGroupRequest(
            group_id=self.group, generation_id=self.generation if generation is None else generation,
            member_id=self.member_id, group_instance_id=self.instance, protocol_type=self.protocol_type,
            protocol_name=self.protocol, assignments=list(assignments)), self.v["sync"], step)

    async def heartbeat(self, step: str = "heartbeat", generation: int | None = None, member_id: str | None = None):
        return await self.w.call(self.conn, HeartbeatRequest(
            group_id=self.group, generation_id=self.generation if generation is None else generation,
            member_id=self.member_id if member_id is None else member_id, group_instance_id=self.instance),
            self.v["heartbeat"], step)

    async def leave(self, step: str = "leave"):
        return await self.w.call(self.conn, LeaveGroupRequest(
            group_id=self.group, member_id=self.member_id,
            members=[_Leaving(member_id=self.member_id, group_instance_id=self.instance, reason="done")]),
            self.v["leave"], step)

    async def commit(self, offset: int, *, partitions=(0,), topic: str = "conf-a", generation: int | None = None,
                     member_id: str | None = None, metadata: str = "m", step: str = "commit"):
        return await commit(self.w, self.conn, self.v, self.group, offset, partitions=partitions, topic=topic,
                            generation=self.generation if generation is None else generation,
                            member_id=self.member_id if member_id is None else member_id,
                            instance=self.instance, metadata=metadata, step=step)


async def commit(w, conn: str, v: dict, group: str, offset: int, *, partitions=(0,), topic: str = "conf-a",
                 generation: int = -1, member_id: str = "", instance: str | None = None, metadata: str = "m",
                 step: str = "commit"):
    return await w.call(conn, OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=instance,
        topics=[_CommitTopic(name=topic, partitions=[_CommitPartition(partition_index=p, committed_offset=offset,
                                                                       committed_metadata=metadata)
                                                      for p in partitions])]), v["commit"], step)


async def fetch(w, conn: str, v: dict, group: str, topics: dict | None, step: str = "fetch", *,
                member_id: str | None = None, member_epoch: int = -1, require_stable: bool = False):
    """OffsetFetch in the form the version has: one group (v1-7) or the Groups[] batch (v8+)."""
    if v["fetch"] >= 8:
        request = OffsetFetchRequest(groups=[_FetchGroup(
            group_id=group, member_id=member_id, member_epoch=member_epoch,
            topics=None if topics is None else [_FetchGroupTopic(name=t, partition_indexes=list(p))
                                                for t, p in topics.items()])], require_stable=require_stable)
    else:
        request = OffsetFetchRequest(group_id=group, topics=None if topics is None else [
            _FetchTopic(name=t, partition_indexes=list(p)) for t, p in topics.items()], require_stable=require_stable)
    return await w.call(conn, request, v["fetch"], step)


async def describe(w, v: dict, *groups: str, step: str = "describe"):
    return await w.call("admin", DescribeGroupsRequest(groups=list(groups or [w.group]),
                                                       include_authorized_operations=True), v["describe"], step)


async def list_groups(w, v: dict, states=(), types=(), step: str = "list groups"):
    return await w.call("admin", ListGroupsRequest(states_filter=list(states), types_filter=list(types)),
                        v["list"], step)


async def delete_groups(w, v: dict, *groups: str, step: str = "delete groups"):
    return await w.call("admin", DeleteGroupsRequest(groups_names=list(groups)), v["delete"], step)


async def offset_delete(w, group: str, topic: str, *partitions: int, step: str = "offset delete"):
    return await w.call("admin", OffsetDeleteRequest(group_id=group, topics=[_DeleteTopic(
        name=topic, partitions=[_DeletePartition(partition_index=p) for p in partitions])]), 0, step)


def _state(state: str, members: int | None = None):
    return lambda g: g.group_state == state and (members is None or len(g.members) == members)


# --- classic groups, once per client -----------------------------------------------------------

def _per_client(body):
    """One scenario per client profile."""
    return [(f"{body.__name__.removeprefix('_')}-{client}", _bind(body, v)) for client, v in CLIENTS.items()]


def _bind(body, v):
    async def scenario(w):
        await body(w, v)
    scenario.__name__ = body.__name__
    return scenario


async def _lifecycle(w, v):
    """One member: find the coordinator, join, sync, heartbeat, commit, fetch, describe, leave."""
    if v["find"] >= 4:
        await w.call("admin", FindCoordinatorRequest(key_type=0, coordinator_keys=[w.group]), v["find"], "find")
    else:
        await w.call("admin", FindCoordinatorRequest(key=w.group, key_type=0), v["find"], "find")
    m = Member(w, "m1", v)
    await m.join_new()
    await m.sync([_Assign(member_id=m.member_id, assignment=assignment("conf-a", 0, 1, 2))], "leader sync")
    await m.heartbeat()
    await m.commit(42, partitions=(0, 1), metadata="m")
    await fetch(w, "m1", v, w.group, {"conf-a": (0, 1, 2)}, "fetch committed and uncommitted")
    await fetch(w, "m1", v, w.group, None, "fetch all topics")
    await describe(w, v, step="describe stable")
    await m.leave()
    await describe(w, v, step="describe empty")
    await list_groups(w, v, step="list groups")
    await commit(w, "admin", v, w.group, 7, step="simple commit to the empty group")
    await fetch(w, "admin", v, w.group, {"conf-a": (0,)}, "fetch after the simple commit")


async def _rebalance(w, v):
    """A second member joins a stable group: the first learns of it by heartbeat and rejoins."""
    m1, m2 = Member(w, "m1", v), Member(w, "m2", v)
    await m1.join_new()
    await m1.sync([_Assign(member_id=m1.member_id, assignment=assignment("conf-a", 0, 1, 2))], "first sync")
    await m2.join("m2 join without member id")
    held = await m2.start_join("m2 join (held until m1 rejoins)")
    await w.until(_state("PreparingRebalance", 2))
    await m1.heartbeat("m1 heartbeat during the rebalance")
    await m1.commit(5, step="m1 commit during the rebalance")
    await m1.sync([], "m1 sync of the old generation during the rebalance")
    await m1.join("m1 rejoins")
    await held
    follower = await w.start("m2", SyncGroupRequest(
        group_id=w.group, generation_id=m2.generation, member_id=m2.member_id, protocol_type="consumer",
        protocol_name=m2.protocol, assignments=[]), v["sync"], "follower sync (held until the leader syncs)")
    await w.until(_state("CompletingRebalance", 2))
    await m1.sync([_Assign(member_id=m1.member_id, assignment=assignment("conf-a", 0, 1)),
                   _Assign(member_id=m2.member_id, assignment=assignment("conf-a", 2))], "leader sync")
    await follower
    await m2.heartbeat("m2 heartbeat with the new generation")
    await m2.heartbeat("m2 heartbeat with the old generation", generation=m2.generation - 1)
    await m1.commit(6, step="m1 commit with the old generation", generation=m1.generation - 1)
    await m2.commit(9, partitions=(2,), step="m2 commit of its partition")
    await describe(w, v, step="describe two members")
    await m1.leave("leader leaves")
    await m2.heartbeat("m2 heartbeat after the leader left")
    await describe(w, v, step="describe after the leader left")


async def _unknown_members(w, v):
    """Requests naming members the group does not have, and groups that do not exist."""
    m = Member(w, "m1", v)
    await m.join_new()
    await m.sync([_Assign(member_id=m.member_id, assignment=assignment("conf-a", 0))])
    await m.heartbeat("heartbeat of an unknown member", member_id="not-a-member")
    await w.call("m2", SyncGroupRequest(group_id=w.group, generation_id=m.generation, member_id="not-a-member",
                                        protocol_type="consumer", protocol_name=m.protocol, assignments=[]),
                 v["sync"], "sync of an unknown member")
    await m.commit(1, member_id="not-a-member", step="commit of a non-member")
    await commit(w, "m2", v, w.group, 1, step="simple commit to a group with members")
    await w.call("m2", LeaveGroupRequest(group_id=w.group, member_id="not-a-member", members=[
        _Leaving(member_id="not-a-member")]), v["leave"], "leave of an unknown member")
    await w.call("m2", JoinGroupRequest(group_id=w.group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
                                        member_id="not-a-member", protocol_type="consumer",
                                        protocols=protocols("range")), v["join"], "join with an unknown member id")
    await w.call("m2", HeartbeatRequest(group_id=w.group + "-none", generation_id=1, member_id="not-a-member"),
                 v["heartbeat"], "heartbeat to a group that does not exist")
    await commit(w, "m2", v, w.group + "-none", 3, generation=1, member_id="not-a-member",
                 step="commit with a generation to a group that does not exist")
    await fetch(w, "m2", v, w.group + "-none", {"conf-a": (0,)}, "fetch of a group that does not exist")
    await describe(w, v, w.group + "-none", step="describe a group that does not exist")


async def _generations(w, v):
    """Illegal generations: ahead of and behind the group's."""
    m = Member(w, "m1", v)
    await m.join_new()
    await m.sync([], "sync with a generation ahead", generation=m.generation + 1)
    await m.sync([_Assign(member_id=m.member_id, assignment=assignment("conf-a", 0))])
    await m.heartbeat("heartbeat with a generation ahead", generation=m.generation + 1)
    await m.heartbeat("heartbeat with a generation behind", generation=m.generation - 1)
    await m.commit(3, generation=m.generation + 1, step="commit with a generation ahead")
    await m.commit(3, generation=-1, step="commit with generation -1 by a member")
    await m.commit(4, step="commit with the current generation")


async def _protocols(w, v):
    """Inconsistent protocols: another protocol type, no protocol in common, an empty protocol list."""
    m = Member(w, "m1", v, names=("range",))
    await m.join_new()
    other_type = Member(w, "m2", v, protocol_type="connect", names=("range",))
    await other_type.join("join with another protocol type")
    no_common = Member(w, "m3", v, names=("sticky",))
    await no_common.join("join with no protocol in common")
    await w.call("m4", JoinGroupRequest(group_id=w.group + "-empty", session_timeout_ms=SESSION_MS,
                                        rebalance_timeout_ms=REBALANCE_MS, member_id="", protocol_type="consumer",
                                        protocols=[]), v["join"], "join with no protocols")
    await w.call("m4", JoinGroupRequest(group_id=w.group + "-short", session_timeout_ms=1000,
                                        rebalance_timeout_ms=REBALANCE_MS, member_id="", protocol_type="consumer",
                                        protocols=protocols("range")), v["join"], "join with a session timeout too short")
    await w.call("m4", JoinGroupRequest(group_id="", session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
                                        member_id="", protocol_type="consumer", protocols=protocols("range")),
                 v["join"], "join with an empty group id")


CLASSIC = [*_per_client(_lifecycle), *_per_client(_rebalance), *_per_client(_unknown_members),
           *_per_client(_generations), *_per_client(_protocols)]


# --- classic groups, once ----------------------------------------------------------------------

V = CLIENTS["java"]
LIBRDKAFKA = CLIENTS["librdkafka"]


async def group_max_size(w):
    """group.max.size=3: a fourth member is refused."""
    members = [Member(w, f"m{i}", V) for i in range(4)]
    await members[0].join_new()
    await members[0].sync([_Assign(member_id=members[0].member_id, assignment=assignment("conf-a", 0))])
    for i in (1, 2):
        await members[i].join(f"m{i} join without member id")
    held = [await members[i].start_join(f"m{i} join (held)") for i in (1, 2)]
    await w.until(_state("PreparingRebalance", 3))
    await members[0].heartbeat("m0 heartbeat during the rebalance")
    await members[0].join("m0 rejoins")
    for h in held:
        await h
    await members[3].join("a fourth member's join without member id")
    await members[3].join("a fourth member's join with its member id")
    await describe(w, V, step="describe three members")


async def static_members(w):
    """Static membership: a restarted instance replaces its old member id, which is then fenced."""
    m = Member(w, "m1", V, instance="instance-1")
    await m.join("static join")  # static members get their id at once (no MEMBER_ID_REQUIRED)
    await m.sync([_Assign(member_id=m.member_id, assignment=assignment("conf-a", 0, 1, 2))])
    old_id = m.member_id
    again = Member(w, "m2", V, instance="instance-1")
    await again.join("the same instance joins again without member id")
    await m.heartbeat("the replaced member's heartbeat")
    await m.commit(3, step="the replaced member's commit")
    await m.sync([], "the replaced member's sync")
    await again.heartbeat("the new member's heartbeat")
    await w.call("m3", HeartbeatRequest(group_id=w.group, generation_id=again.generation, member_id=old_id,
                                        group_instance_id="instance-2"), V["heartbeat"],
                 "heartbeat naming another instance id")
    await describe(w, V, step="describe the static member")
    await w.call("m3", LeaveGroupRequest(group_id=w.group, members=[
        _Leaving(member_id=old_id, group_instance_id="instance-1"),
        _Leaving(member_id="", group_instance_id="instance-9")]), V["leave"],
        "batch leave: a fenced member id and an unknown instance")
    await w.call("m3", LeaveGroupRequest(group_id=w.group, members=[
        _Leaving(member_id="", group_instance_id="instance-1")]), V["leave"], "leave by instance id")
    await describe(w, V, step="describe after the static member left")


async def static_member_old_client(w):
    """librdkafka-era static member (JoinGroup v5): fenced ids on SyncGroup v3 and Heartbeat v3."""
    m = Member(w, "m1", LIBRDKAFKA, instance="i-1")
    await m.join("static join")
    await m.sync([_Assign(member_id=m.member_id, assignment=assignment("conf-a", 0))])
    replacement = Member(w, "m2", LIBRDKAFKA, instance="i-1")
    await replacement.join("replacement join")
    await m.heartbeat("fenced heartbeat")
    await replacement.sync([_Assign(member_id=replacement.member_id, assignment=assignment("conf-a", 0))],
                           "replacement sync")
    await replacement.heartbeat("replacement heartbeat")


async def commit_errors(w):
    """Commits refused per partition: unknown topics and partitions, metadata too large."""
    await commit(w, "c", V, w.group, 1, topic="no-such-topic", step="commit to an unknown topic")
    await commit(w, "c", V, w.group, 1, partitions=(7,), step="commit to a partition the topic lacks")
    await commit(w, "c", V, w.group, 1, metadata="x" * 5000, step="commit with metadata above offset.metadata.max.bytes")
    await commit(w, "c", V, w.group, 1, metadata=None, step="commit with null metadata")
    await commit(w, "c", V, w.group, -1, step="commit of offset -1")
    await fetch(w, "c", V, w.group, {"conf-a": (0,), "no-such-topic": (0,)}, "fetch of known and unknown topics")
    await commit(w, "c", V, "", 1, step="commit with an empty group id")
    await fetch(w, "c", V, w.group, None, "fetch all topics")
    await fetch(w, "c", CLIENTS["aiokafka"], w.group, None, "fetch all topics (v3)")
    await fetch(w, "c", V, w.group, {"conf-a": (0,)}, "fetch with require_stable", require_stable=True)


async def offsets_in_batches(w):
    """OffsetFetch v8's Groups[] batch over several groups, one unknown."""
    other = w.group + "-b"
    await commit(w, "c", V, w.group, 10, partitions=(0, 1, 2))
    await commit(w, "c", V, other, 20, topic="conf-b", partitions=(1,))
    await w.call("c", OffsetFetchRequest(groups=[
        _FetchGroup(group_id=w.group, topics=[_FetchGroupTopic(name="conf-a", partition_indexes=[2, 0])]),
        _FetchGroup(group_id=other, topics=None),
        _FetchGroup(group_id=w.group + "-none", topics=None)]), 8, "fetch three groups at once")


async def delete_and_offset_delete(w):
    """DeleteGroups and OffsetDelete on empty, non-empty, unknown and subscribed groups."""
    busy = Member(w, "m1", V, group=w.group + "-busy")
    await busy.join_new()
    await busy.sync([_Assign(member_id=busy.member_id, assignment=assignment("conf-a", 0, 1, 2))])
    await busy.commit(5, partitions=(0,))
    await commit(w, "c", V, w.group, 3, partitions=(0, 1))
    await commit(w, "c", V, w.group, 4, topic="conf-b", partitions=(0,))
    await offset_delete(w, w.group, "conf-a", 1, step="offset delete on an empty group")
    await fetch(w, "c", V, w.group, None, "fetch after the offset delete")
    await offset_delete(w, busy.group, "conf-a", 0, step="offset delete of a topic the group subscribes to")
    await offset_delete(w, busy.group, "conf-b", 0, step="offset delete of a topic the group does not subscribe to")
    await offset_delete(w, w.group + "-none", "conf-a", 0, step="offset delete on a group that does not exist")
    await offset_delete(w, w.group, "no-such-topic", 0, step="offset delete of an unknown topic")
    await delete_groups(w, V, busy.group, step="delete a group with members")
    await delete_groups(w, V, w.group, w.group + "-none", step="delete an empty group and an unknown one")
    await delete_groups(w, V, w.group, step="delete it again")
    await fetch(w, "c", V, w.group, None, "fetch of the deleted group")
    await describe(w, V, w.group, busy.group, step="describe the deleted and the busy group")


async def find_coordinator(w):
    """FindCoordinator at every version clients send: one key, a batch of keys, an empty key."""
    await w.call("c", FindCoordinatorRequest(key=w.group), 1, "v1")
    await w.call("c", FindCoordinatorRequest(key=w.group, key_type=0), 2, "v2")
    await w.call("c", FindCoordinatorRequest(key=w.group, key_type=0), 3, "v3")
    await w.call("c", FindCoordinatorRequest(key_type=0, coordinator_keys=[w.group, w.group + "-2"]), 4, "v4 batch")
    await w.call("c", FindCoordinatorRequest(key_type=0, coordinator_keys=[w.group]), 6, "v6")
    await w.call("c", FindCoordinatorRequest(key_type=0, coordinator_keys=[""]), 6, "v6 empty key")


async def list_and_describe(w):
    """ListGroups with state and type filters; DescribeGroups of several groups."""
    m = Member(w, "m1", V, group=w.group + "-stable")
    await m.join_new()
    await m.sync([_Assign(member_id=m.member_id, assignment=assignment("conf-a", 0))])
    await commit(w, "c", V, w.group + "-empty", 1)
    for v in (1, 3, 4, 5):
        await list_groups(w, dict(V, list=v), step=f"list v{v}")
    await list_groups(w, V, states=["Stable"], step="list stable groups")
    await list_groups(w, V, states=["Empty"], step="list empty groups")
    await list_groups(w, V, states=["stable"], step="list with a lower-case state")
    await list_groups(w, V, types=["classic"], step="list classic groups")
    await list_groups(w, V, types=["consumer"], step="list consumer groups")
    for v in (3, 5):
        await describe(w, dict(V, describe=v), m.group, w.group + "-empty", w.group + "-none", step=f"describe v{v}")


# --- consumer groups (KIP-848) -------------------------------------------------------------------

_Owned = ConsumerGroupHeartbeatRequest.HeartbeatOwnedTopicPartitions


def cgh(group: str, member_id: str, epoch: int, **fields) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(group_id=group, member_id=member_id, member_epoch=epoch, **fields)


def _owned(answer) -> list:
    if answer.assignment is None:
        return None
    return [_Owned(topic_id=t.topic_id, partitions=list(t.partitions)) for t in answer.assignment.topic_partitions]


async def consumer_group(w):
    """A consumer group: join (v0, server id; v1, client id), heartbeats, a second member, leave."""
    first = await w.call("m1", cgh(w.group, "", 0, rebalance_timeout_ms=REBALANCE_MS,
                                   subscribed_topic_names=["conf-a"], topic_partitions=[]), 0, "v0 join")
    owned = _owned(first)
    await w.call("m1", cgh(w.group, first.member_id, first.member_epoch, topic_partitions=owned), 0,
                 "v0 heartbeat acknowledging the assignment")
    await w.call("m1", cgh(w.group, first.member_id, first.member_epoch), 0, "v0 heartbeat")
    await w.call("admin", ConsumerGroupDescribeRequest(group_ids=[w.group], include_authorized_operations=True), 0,
                 "describe one member")
    second_id = "AAAAAAAAAAAAAAAAAAAAAA"
    second = await w.call("m2", cgh(w.group, second_id, 0, rebalance_timeout_ms=REBALANCE_MS,
                                    subscribed_topic_names=["conf-a"], subscribed_topic_regex=None,
                                    topic_partitions=[]), 1, "v1 join with a client-generated id")
    await w.call("m1", cgh(w.group, first.member_id, first.member_epoch), 0, "first member learns of the new epoch")
    await w.call("m1", cgh(w.group, first.member_id, first.member_epoch + 7), 0, "heartbeat with an epoch ahead")
    await w.call("m1", cgh(w.group, "not-a-member-xxxxxxxxx", 1), 0, "heartbeat of an unknown member")
    await w.call("m2", cgh(w.group, second_id, second.member_epoch), 1, "second member heartbeat")
    await w.call("admin", ConsumerGroupDescribeRequest(group_ids=[w.group, w.group + "-none"],
                                                       include_authorized_operations=False), 1,
                 "describe two members and an unknown group")
    await describe(w, V, step="DescribeGroups of a consumer group")
    await list_groups(w, V, types=["consumer"], step="list consumer groups")
    await commit(w, "m2", V, w.group, 8, generation=second.member_epoch + 3, member_id=second_id,
                 step="commit with a member epoch ahead")
    await commit(w, "m2", V, w.group, 8, generation=0, member_id=second_id,
                 step="commit with a stale member epoch")
    await commit(w, "m2", V, w.group, 8, generation=1, member_id="not-a-member-xxxxxxxxx",
                 step="commit of an unknown member")
    await commit(w, "m2", V, w.group, 8, step="simple commit to a consumer group with members")
    await w.call("m1", JoinGroupRequest(group_id=w.group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
                                        member_id="", protocol_type="connect", protocols=protocols("range")), 9,
                 "classic join with another protocol type")
    await delete_groups(w, V, w.group, step="delete a consumer group with members")
    await w.call("m2", cgh(w.group, second_id, -1), 1, "second member leaves")
    await w.call("m1", cgh(w.group, first.member_id, -1), 0, "first member leaves")
    await w.call("admin", ConsumerGroupDescribeRequest(group_ids=[w.group], include_authorized_operations=False), 1,
                 "describe the empty consumer group")
    await delete_groups(w, V, w.group, step="delete the empty consumer group")


async def consumer_group_errors(w):
    """KIP-848 requests refused: a bad regex, an unknown assignor, missing fields, static ids in use."""
    def join(**fields):
        base = dict(rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=["conf-a"], topic_partitions=[])
        base.update(fields)
        return base
    await w.call("m1", cgh(w.group, "BBBBBBBBBBBBBBBBBBBBBB", 0, **join(subscribed_topic_names=None,
                                                                         subscribed_topic_regex="conf-(")), 1,
                 "join with an invalid regex")
    await w.call("m1", cgh(w.group, "BBBBBBBBBBBBBBBBBBBBBB", 0, **join(server_assignor="no-such-assignor")), 1,
                 "join with an unknown assignor")
    await w.call("m1", cgh(w.group, "BBBBBBBBBBBBBBBBBBBBBB", 0, **join(rebalance_timeout_ms=-1)), 1,
                 "join without a rebalance timeout")
    await w.call("m1", cgh(w.group, "BBBBBBBBBBBBBBBBBBBBBB", 0, **join(subscribed_topic_names=None)), 1,
                 "join without a subscription")
    await w.call("m1", cgh(w.group, "", 0, **join()), 1, "v1 join without a member id")
    await w.call("m1", cgh("", "BBBBBBBBBBBBBBBBBBBBBB", 0, **join()), 1, "join with an empty group id")
    static = await w.call("m1", cgh(w.group, "BBBBBBBBBBBBBBBBBBBBBB", 0, **join(instance_id="static-1")), 1,
                          "static member joins")
    await w.call("m2", cgh(w.group, "CCCCCCCCCCCCCCCCCCCCCC", 0, **join(instance_id="static-1")), 1,
                 "another member takes the instance id in use")
    await w.call("m1", cgh(w.group, "BBBBBBBBBBBBBBBBBBBBBB", -2), 1, "temporary leave without the instance id")
    await w.call("m1", cgh(w.group, "BBBBBBBBBBBBBBBBBBBBBB", -2, instance_id="static-1"), 1,
                 "static member leaves for a while")
    await w.call("m2", cgh(w.group, "CCCCCCCCCCCCCCCCCCCCCC", 0, **join(instance_id="static-1")), 1,
                 "another member takes the released instance id")
    await w.call("m1", cgh(w.group, "BBBBBBBBBBBBBBBBBBBBBB", static.member_epoch), 1,
                 "the replaced static member heartbeats")
    await w.call("admin", ConsumerGroupDescribeRequest(group_ids=[w.group], include_authorized_operations=False), 1,
                 "describe the group after the replacement")
    connect = Member(w, "m3", V, group=w.group + "-connect", protocol_type="connect")
    await connect.join_new()
    await w.call("m1", cgh(connect.group, "DDDDDDDDDDDDDDDDDDDDDD", 0, **join()), 1,
                 "consumer join to a classic group of another protocol type")
    await commit(w, "c", V, w.group + "-empty", 4)
    await w.call("m4", cgh(w.group + "-empty", "EEEEEEEEEEEEEEEEEEEEEE", 0, **join()), 1,
                 "consumer join converts an empty classic group")
    await w.call("admin", ConsumerGroupDescribeRequest(group_ids=[w.group + "-empty", connect.group],
                                                       include_authorized_operations=False),
                 1, "ConsumerGroupDescribe of the converted group and of a classic group")
    await fetch(w, "c", V, w.group + "-empty", None, "the converted group kept its offsets")


SCENARIOS = [*CLASSIC, ("group-max-size", group_max_size), ("static-members", static_members),
             ("static-member-old-client", static_member_old_client), ("commit-errors", commit_errors),
             ("offsets-in-batches", offsets_in_batches), ("delete-and-offset-delete", delete_and_offset_delete),
             ("find-coordinator", find_coordinator), ("list-and-describe", list_and_describe),
             ("consumer-group", consumer_group), ("consumer-group-errors", consumer_group_errors)]
