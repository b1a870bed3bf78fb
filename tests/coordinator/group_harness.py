"""A GroupCoordinator over a real OffsetsLog in a temp dir, with a hand-driven clock.

Scenario tests speak the request API exactly as the server does (decoded `cohort.protocol.messages`
requests in, responses out); only time is simulated, so timeouts are deterministic.
"""
from __future__ import annotations

import asyncio
from pathlib import Path

from bounded_wait import wait_until_async

from cohort.coordinator.config import CoordinatorConfig
from cohort.coordinator.contracts.partition_lifecycle import PartitionLifecycle
from cohort.coordinator.groups.classic.events import RebalanceRequested
from cohort.coordinator.groups.classic.rebalance import RebalanceCause, RebalanceReason
from cohort.coordinator.groups.runtime.scheduler import ManualScheduler
from cohort.coordinator.contracts.answers import PendingAnswer
from cohort.coordinator.contracts.requests import RequestContext
from cohort.coordinator.groups.coordinator import GroupCoordinator
from cohort.coordinator.log import OffsetsLog
from cohort.coordinator.contracts.store import StorageError
from cohort.protocol import messages as m
from cohort.protocol.consumer_protocol import ConsumerProtocolSubscription, encode_subscription
from cohort.protocol.errors import ErrorCode

E = ErrorCode
CTX = RequestContext(client_id="client", client_host="/127.0.0.1")


def subscription(*topics: str) -> bytes:
    return encode_subscription(ConsumerProtocolSubscription(topics=list(topics)), 0)


async def answered(result):
    """A handler's response: given at once, or by the `PendingAnswer` it handed back because it had to wait
    (a coroutine handler's, once it returns)."""
    if asyncio.iscoroutine(result):
        result = await result
    if type(result) is PendingAnswer:
        result = await result
    return result.response if type(result) is PendingAnswer else result  # (one to encode off the loop)


class FailingLog(OffsetsLog):
    """The real log, except that appends fail while `fail_with` is set (a full or broken disk), and loads
    wait while `loads_held` is an unset event (a slow disk: the partitions stay loading)."""

    fail_with: ErrorCode | None = None
    loads_held: asyncio.Event | None = None

    async def load(self, partition, epoch=0):
        if self.loads_held is not None:
            await self.loads_held.wait()
        async for chunk in super().load(partition, epoch):
            yield chunk

    def append(self, partition, records):
        if self.fail_with is not None:
            failed = asyncio.get_running_loop().create_future()
            failed.set_exception(StorageError("injected failure", self.fail_with))
            return failed
        return super().append(partition, records)


class Harness:
    def __init__(self, data_dir: Path, flush_policy: str = "never", log_type: type[FailingLog] = FailingLog,
                 **overrides) -> None:
        settings = dict(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=5)
        settings.update(overrides)
        self.config = CoordinatorConfig(**settings)
        self.clock = ManualScheduler()
        self.data_dir = data_dir
        self.log = log_type(data_dir, num_partitions=self.config.offsets_topic_num_partitions,
                              flush_policy=flush_policy, partitions=())  # the coordinator loads them
        self.coordinator = GroupCoordinator(self.config, self.log, scheduler=self.clock)

    async def start(self) -> "Harness":
        await self.coordinator.load(start_retention=False)
        return self

    async def start_loading(self) -> asyncio.Task:
        """Start the load with every partition's read held (the partitions stay LOADING until
        `self.log.loads_held` is set); the load's task."""
        self.log.loads_held = asyncio.Event()
        loading = self._loading = asyncio.create_task(self.coordinator.load(start_retention=False))
        every = self.config.offsets_topic_num_partitions
        await wait_until_async(lambda: len(self.coordinator.partitions.states.partitions(PartitionLifecycle.LOADING))
                               == every, 5, "every partition loading")
        return loading

    async def close(self) -> None:
        if self.log.loads_held is not None:
            self.log.loads_held.set()
            await asyncio.wait_for(self._loading, 10)
        self.coordinator.shutdown()
        await self.settle()
        await self.log.close()

    async def restart(self) -> "Harness":
        """Stop this coordinator and load a fresh one from the same directory (same clock)."""
        await self.close()
        self.log = FailingLog(self.data_dir, num_partitions=self.config.offsets_topic_num_partitions,
                              flush_policy="never", partitions=())
        self.coordinator = GroupCoordinator(self.config, self.log, scheduler=self.clock)
        await self.coordinator.load(start_retention=False)
        return self

    async def settle(self) -> None:
        """Let every runnable task, in-flight write and batch of answers finish (bounded)."""
        async def drain() -> None:
            runtime = self.coordinator.group_manager.runtime
            for _ in range(2000):
                for _ in range(5):
                    await asyncio.sleep(0)
                if runtime.writes_in_flight():
                    await asyncio.wait_for(runtime.settle(), timeout=1)
                elif self.coordinator.partitions.writes_in_flight():
                    await self.coordinator.partitions.wait_for_writes()
                elif not runtime.answers_in_flight():
                    for _ in range(5):
                        await asyncio.sleep(0)
                    if (not self.coordinator.partitions.writes_in_flight() and not runtime.writes_in_flight()
                            and not runtime.answers_in_flight()):
                        return
        await asyncio.wait_for(drain(), timeout=10)

    async def expire_offsets(self) -> int:
        """One expiry pass, its writes finished (durable and replayed, or failed) when it returns; how many
        tombstones it handed to the write gate."""
        written = await self.coordinator.expire_offsets()
        await self.settle()
        return written

    async def advance(self, ms: int) -> None:
        await self.settle()
        self.clock.advance(ms)
        await self.settle()

    def group(self, group_id: str):
        return self.coordinator.group(group_id)

    def request_rebalance(self, group_id: str, detail: str) -> None:
        """What an admin action or a topic metadata change does: start a rebalance."""
        self.coordinator.group_manager.runtime.submit(self.group(group_id), RebalanceRequested(
            RebalanceReason(RebalanceCause.REQUESTED, detail=detail)))

    # ---------------------------------------------------------------- requests
    def join(self, group_id: str, member_id: str = "", *, version: int = 7, instance_id: str | None = None,
             protocols=None, protocol_type: str = "consumer", session_ms: int = 10000,
             rebalance_ms: int = 10000, reason: str | None = None, ctx: RequestContext = CTX) -> asyncio.Task:
        if protocols is None:
            protocols = (("range", subscription("t")),)
        req = m.JoinGroupRequest(
            group_id=group_id, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
            member_id=member_id, group_instance_id=instance_id, protocol_type=protocol_type,
            protocols=[m.JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=md) for n, md in protocols],
            reason=reason)
        return asyncio.ensure_future(answered(self.coordinator.join_group(req, version, ctx)))

    async def join_now(self, *args, **kwargs):
        task = self.join(*args, **kwargs)
        await self.settle()
        assert task.done(), "JoinGroup is still parked"
        return task.result()

    async def new_member(self, group_id: str, **kwargs) -> str:
        """MEMBER_ID_REQUIRED round trip; returns the member id to rejoin with."""
        r = await self.join_now(group_id, **kwargs)
        assert r.error_code == E.MEMBER_ID_REQUIRED, r
        return r.member_id

    def sync(self, group_id: str, member_id: str, generation: int, assignments=None, *, version: int = 5,
             instance_id: str | None = None, protocol_type: str | None = "consumer",
             protocol_name: str | None = "range") -> asyncio.Task:
        req = m.SyncGroupRequest(
            group_id=group_id, generation_id=generation, member_id=member_id, group_instance_id=instance_id,
            protocol_type=protocol_type, protocol_name=protocol_name,
            assignments=[m.SyncGroupRequest.SyncGroupRequestAssignment(member_id=k, assignment=v)
                         for k, v in (assignments or {}).items()])
        return asyncio.ensure_future(answered(self.coordinator.sync_group(req, version, CTX)))

    async def sync_now(self, *args, **kwargs):
        task = self.sync(*args, **kwargs)
        await self.settle()
        assert task.done(), "SyncGroup is still parked"
        return task.result()

    async def heartbeat(self, group_id: str, member_id: str, generation: int, *, version: int = 4,
                        instance_id: str | None = None) -> int:
        req = m.HeartbeatRequest(group_id=group_id, generation_id=generation, member_id=member_id,
                                 group_instance_id=instance_id)
        return self.coordinator.heartbeat(req, version, CTX).error_code

    async def leave(self, group_id: str, members, *, version: int = 5):
        """members: list of (member_id, instance_id) for v3+, or one member id for v0-2."""
        if version <= 2:
            req = m.LeaveGroupRequest(group_id=group_id, member_id=members)
        else:
            req = m.LeaveGroupRequest(group_id=group_id, members=[
                m.LeaveGroupRequest.MemberIdentity(member_id=mid, group_instance_id=iid, reason="test")
                for mid, iid in members])
        response = await self.coordinator.leave_group(req, version, CTX)
        await self.settle()
        return response

    async def commit(self, group_id: str, offsets: dict, *, member_id: str = "", generation: int = -1,
                     instance_id: str | None = None, version: int = 8, retention_ms: int = -1):
        """offsets: {(topic, partition): offset or (offset, metadata)}; returns {(topic, partition): error}."""
        by_topic: dict[str, list] = {}
        for (topic, partition), value in offsets.items():
            offset, metadata = value if isinstance(value, tuple) else (value, "")
            by_topic.setdefault(topic, []).append(
                m.OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                    partition_index=partition, committed_offset=offset, committed_metadata=metadata))
        req = m.OffsetCommitRequest(
            group_id=group_id, generation_id_or_member_epoch=generation, member_id=member_id,
            group_instance_id=instance_id, retention_time_ms=retention_ms,
            topics=[m.OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()])
        response = await answered(self.coordinator.offset_commit(req, version, CTX))
        return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}

    async def fetch(self, group_id: str, topics: dict | None = None, *, version: int = 8):
        """Returns (group error, {(topic, partition): (offset, metadata, error)})."""
        if version >= 8:
            req = m.OffsetFetchRequest(groups=[m.OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id=group_id, topics=None if topics is None else [
                    m.OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                        name=t, partition_indexes=ps) for t, ps in topics.items()])])
            response = await answered(self.coordinator.offset_fetch(req, version, CTX))
            (g,) = response.groups
            return g.error_code, {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
                                  for t in g.topics for p in t.partitions}
        req = m.OffsetFetchRequest(group_id=group_id, topics=None if topics is None else [
            m.OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in topics.items()])
        response = await answered(self.coordinator.offset_fetch(req, version, CTX))
        return response.error_code, {(t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
                                     for t in response.topics for p in t.partitions}

    # ---------------------------------------------------------------- composite steps
    async def stable_group(self, group_id: str, n: int = 1, *, version: int = 7, **join_kwargs) -> list[str]:
        """n dynamic members, joined and synced; returns their ids, leader first."""
        ids = [await self.new_member(group_id, version=version, **join_kwargs) for _ in range(n)]
        tasks = [self.join(group_id, mid, version=version, **join_kwargs) for mid in ids]
        await self.advance(self.config.group_initial_rebalance_delay_ms)
        responses = [t.result() for t in tasks]
        assert all(r.error_code == 0 for r in responses), responses
        leader = responses[0].leader
        generation = responses[0].generation_id
        syncs = [self.sync(group_id, mid, generation,
                           {x: f"assign-{x}".encode() for x in ids} if mid == leader else None,
                           protocol_type=responses[0].protocol_type, protocol_name=responses[0].protocol_name)
                 for mid in ids]
        await self.settle()
        assert all(s.result().error_code == 0 for s in syncs), [s.result() for s in syncs]
        assert self.group(group_id).state.value == "Stable"
        return [leader] + [x for x in ids if x != leader]
