"""Protocol-level group members driven by the load generator.

A `BenchMember` speaks the classic group protocol directly (no client
library), the way a consumer does: JoinGroup with an empty member id, the
MEMBER_ID_REQUIRED round trip (v4+), JoinGroup again, SyncGroup (the leader
sends a trivially computed round-robin assignment of the bench topic), then
Heartbeat, OffsetCommit and LeaveGroup. A REBALANCE_IN_PROGRESS or
ILLEGAL_GENERATION answer sends it back to JoinGroup, as a real client would.

Each member has its own connection, as a consumer has: Kafka brokers (and
Tansu) handle one request per connection at a time, so a JoinGroup parked in
the join phase would block every other member sharing its connection.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from cohort.protocol.consumer_protocol import (ConsumerProtocolAssignment, ConsumerProtocolSubscription,
                                        encode_assignment, encode_subscription)
from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import (DescribeGroupsRequest, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
                               OffsetCommitRequest, SyncGroupRequest)

from bench.targets import BENCH_TOPIC, BENCH_TOPIC_PARTITIONS
from bench.wire import KafkaSession

PROTOCOL_TYPE = "consumer"
ASSIGNOR = "roundrobin"

# Answers that mean "the group is rebalancing: join again", not failures.
REJOIN_CODES = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION})


class MemberError(RuntimeError):
    """The server answered a member with an error the protocol gives no way around."""

    def __init__(self, api: str, code: int) -> None:
        super().__init__(f"{api} failed with {ErrorCode(code).name if code in ErrorCode._value2member_map_ else code}")
        self.code = code


@dataclass(slots=True)
class ProtocolVersions:
    """The versions every member uses against one target (negotiated once)."""

    join: int
    sync: int
    heartbeat: int
    leave: int
    commit: int
    describe: int

    @classmethod
    def negotiate(cls, session: KafkaSession) -> "ProtocolVersions":
        return cls(join=session.pick_version(JoinGroupRequest.API_KEY, 7),
                   sync=session.pick_version(SyncGroupRequest.API_KEY, 5),
                   heartbeat=session.pick_version(HeartbeatRequest.API_KEY, 4),
                   leave=session.pick_version(LeaveGroupRequest.API_KEY, 4),
                   commit=session.pick_version(OffsetCommitRequest.API_KEY, 8),
                   describe=session.pick_version(DescribeGroupsRequest.API_KEY, 5))


_SUBSCRIPTION = encode_subscription(ConsumerProtocolSubscription(topics=[BENCH_TOPIC]), 1)


def round_robin_assignments(member_ids: list[str], topic: str = BENCH_TOPIC,
                            partitions: int = BENCH_TOPIC_PARTITIONS) -> list[SyncGroupRequest.SyncGroupRequestAssignment]:
    """The leader's trivial assignment: partition p goes to the (p mod n)-th member, sorted by id."""
    ordered = sorted(member_ids)
    owned: dict[str, list[int]] = {m: [] for m in ordered}
    for p in range(partitions):
        owned[ordered[p % len(ordered)]].append(p)
    Assignment = SyncGroupRequest.SyncGroupRequestAssignment
    TopicPartition = ConsumerProtocolAssignment.TopicPartition
    return [Assignment(member_id=m, assignment=encode_assignment(ConsumerProtocolAssignment(
        assigned_partitions=[TopicPartition(topic=topic, partitions=ps)] if ps else []), 1)) for m, ps in owned.items()]


class BenchMember:
    """One dynamic consumer-group member, spoken at the protocol level."""

    def __init__(self, session: KafkaSession, group_id: str, versions: ProtocolVersions, *,
                 session_timeout_ms: int = 30000, rebalance_timeout_ms: int = 60000) -> None:
        self.session = session
        self.group_id = group_id
        self.versions = versions
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.member_id = ""
        self.generation_id = -1
        self.leader = False
        self.assignment: bytes | None = None
        self.assigned_at = 0.0          # perf_counter when the last assignment arrived
        self.first_join_response_at = 0.0  # first JoinGroup answer that completed a join phase
        self.rejoins = 0

    async def join(self) -> list:
        """JoinGroup until the join phase completes; returns the member list (leader only)."""
        v = self.versions.join
        while True:
            response = await self.session.request(JoinGroupRequest(
                group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=ASSIGNOR, metadata=_SUBSCRIPTION)]),
                v, timeout=self.rebalance_timeout_ms / 1000 + 30)
            code = response.error_code
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = response.member_id
                continue
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                continue
            if code != ErrorCode.NONE:
                raise MemberError("JoinGroup", code)
            if not self.first_join_response_at:
                self.first_join_response_at = time.perf_counter()
            self.member_id = response.member_id
            self.generation_id = response.generation_id
            self.leader = response.leader == response.member_id
            return list(response.members)

    async def sync(self, members: list) -> int:
        """SyncGroup; the leader carries everyone's assignment. Returns the error code."""
        assignments = round_robin_assignments([m.member_id for m in members]) if self.leader else []
        response = await self.session.request(SyncGroupRequest(
            group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
            protocol_type=PROTOCOL_TYPE, protocol_name=ASSIGNOR, assignments=assignments),
            self.versions.sync, timeout=self.rebalance_timeout_ms / 1000 + 30)
        if response.error_code == ErrorCode.NONE:
            self.assignment = response.assignment
            self.assigned_at = time.perf_counter()
        return response.error_code

    async def join_and_sync(self, deadline: float) -> None:
        """Join and sync until this member holds an assignment of the current generation."""
        while time.monotonic() < deadline:
            members = await self.join()
            code = await self.sync(members)
            if code == ErrorCode.NONE:
                return
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            elif code not in REJOIN_CODES:
                raise MemberError("SyncGroup", code)
            self.rejoins += 1
        raise TimeoutError(f"member of {self.group_id} got no assignment before the deadline")

    @classmethod
    async def open(cls, host: str, port: int, group_id: str, versions: ProtocolVersions,
                   **timeouts) -> "BenchMember":
        session = await KafkaSession.open(host, port, negotiate=False)
        return cls(session, group_id, versions, **timeouts)

    async def close(self) -> None:
        await self.session.close()

    def heartbeat_request(self) -> HeartbeatRequest:
        return HeartbeatRequest(group_id=self.group_id, generation_id=self.generation_id,
                                member_id=self.member_id)

    async def heartbeat(self) -> int:
        response = await self.session.request(self.heartbeat_request(), self.versions.heartbeat)
        return response.error_code

    def commit_request(self, partitions: int, offset: int) -> OffsetCommitRequest:
        Topic = OffsetCommitRequest.OffsetCommitRequestTopic
        Partition = Topic.OffsetCommitRequestPartition
        return OffsetCommitRequest(
            group_id=self.group_id, generation_id_or_member_epoch=self.generation_id, member_id=self.member_id,
            topics=[Topic(name=BENCH_TOPIC, partitions=[
                Partition(partition_index=p, committed_offset=offset, committed_metadata="")
                for p in range(partitions)])])

    async def leave(self) -> int:
        v = self.versions.leave
        if v >= 3:
            request = LeaveGroupRequest(group_id=self.group_id, members=[
                LeaveGroupRequest.MemberIdentity(member_id=self.member_id, reason="bench")])
        else:
            request = LeaveGroupRequest(group_id=self.group_id, member_id=self.member_id)
        response = await self.session.request(request, v)
        codes = [response.error_code] + [m.error_code for m in getattr(response, "members", []) or []]
        return next((c for c in codes if c), 0)


async def describe_state(session: KafkaSession, group_id: str, version: int) -> tuple[str, int]:
    """(state, member count) of a group as DescribeGroups reports it."""
    response = await session.request(DescribeGroupsRequest(groups=[group_id]), version)
    group = response.groups[0]
    return group.group_state, len(group.members)


async def form_groups(members: list[BenchMember], timeout_s: float) -> None:
    """Bring every member to a settled assignment, rejoining whoever the rebalances disturb.

    With no initial delay, members trickling in cause several rebalances; a
    member learns about each from its heartbeat (REBALANCE_IN_PROGRESS) and
    rejoins, exactly like a client. Settled = one full round of heartbeats
    with no error. While some members join, the others keep heartbeating (as
    a client's heartbeat thread does): on a loaded machine 5 000 joins can take
    longer than a session, and members left silent that long would expire and
    start the rebalances over, so the fleet never settled.
    """
    deadline = time.monotonic() + timeout_s
    await _join_keeping_alive(members, set(members), deadline)
    while time.monotonic() < deadline:
        codes = await asyncio.gather(*(m.heartbeat() for m in members))
        disturbed = [m for m, code in zip(members, codes) if code != ErrorCode.NONE]
        if not disturbed:
            return
        for m, code in zip(members, codes):
            _follow_heartbeat_answer(m, code)
        await _join_keeping_alive(members, set(disturbed), deadline)
    raise TimeoutError(f"{len(members)} members did not settle within {timeout_s:.0f} s")


def _follow_heartbeat_answer(member: BenchMember, code: int) -> None:
    """Check a heartbeat answer during formation: only rejoin signals are expected."""
    if code not in (ErrorCode.NONE, *REJOIN_CODES, ErrorCode.UNKNOWN_MEMBER_ID):
        raise MemberError("Heartbeat", code)
    if code == ErrorCode.UNKNOWN_MEMBER_ID:
        member.member_id = ""


async def _join_keeping_alive(members: list[BenchMember], to_join: set[BenchMember], deadline: float) -> None:
    """Join and sync `to_join`; every member not joining heartbeats every third of its session
    (rejoining when told to) until all of them hold an assignment."""
    if not to_join:
        return
    joining = len(to_join)
    all_joined = asyncio.Event()

    async def rejoin(m: BenchMember) -> None:
        nonlocal joining
        await m.join_and_sync(deadline)
        joining -= 1
        if joining == 0:
            all_joined.set()

    async def live(m: BenchMember) -> None:
        nonlocal joining
        if m in to_join:
            await rejoin(m)
        while not all_joined.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(all_joined.wait(), m.session_timeout_ms / 3000)
            if all_joined.is_set():
                return
            code = await m.heartbeat()
            if code != ErrorCode.NONE:
                _follow_heartbeat_answer(m, code)
                joining += 1
                await rejoin(m)

    await asyncio.gather(*(live(m) for m in members))


@contextlib.asynccontextmanager
async def keep_alive(members: list[BenchMember], interval_s: float):
    """Heartbeat `members` in the background; yields the set of members whose heartbeat failed."""
    disturbed: set[str] = set()

    async def beat() -> None:
        while True:
            await asyncio.sleep(interval_s)
            codes = await asyncio.gather(*(m.heartbeat() for m in members), return_exceptions=True)
            for m, code in zip(members, codes):
                if code != ErrorCode.NONE:
                    disturbed.add(m.member_id)

    task = asyncio.get_running_loop().create_task(beat())
    try:
        yield disturbed
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
