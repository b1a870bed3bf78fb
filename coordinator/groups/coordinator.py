"""`GroupCoordinator`: the one owner of every group (classic and KIP-848 consumer) and of the
committed-offsets table.

The server decodes a request and calls the coordinator method for its API (the dispatch table in
`cohort.coordinator.server.handlers`): ``join_group``, ``sync_group``, ``heartbeat``, ``leave_group``,
``offset_commit``, ``offset_fetch``, ``describe_groups``, ``list_groups``, ``delete_groups``,
``offset_delete``, ``consumer_group_heartbeat``, ``consumer_group_describe`` and Cohort's own
``group_report``, each called as ``method(request, api_version, RequestContext)``. The coordinator
never sees bytes or sockets, and what it answers is already shaped for ``api_version`` (JoinGroup's
"" vs null protocol name, LeaveGroup v0-2's single error, OffsetFetch's error placement, ...). The
answer is not one shape: the methods that may wait (a parked JoinGroup or SyncGroup, a write) are
coroutines; the hot ones are plain methods: Heartbeat always answers at once, OffsetFetch and
ConsumerGroupHeartbeat answer at once when they can and otherwise hand back a coroutine, and
OffsetCommit hands back an `AnswerWhenDone` (answered from its append's done-callback, with no
task); a large response comes wrapped in `EncodeInThread` so the connection encodes it off the
loop. Besides the request API:

* Partitions come and go through the `Ownership` listener: `acquired(p, epoch)` loads p from the
  `Store` (its groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile, Heartbeat NONE), `lost(p)`
  answers p's parked requests NOT_COORDINATOR, forgets its groups and offsets and releases it in
  the store. A partition this node does not own, or that failed to load, answers NOT_COORDINATOR.
  `await load()` does it for every partition at once (a single node without an `Ownership`).
* `start_retention()` runs KIP-211 offset expiry every `offsets.retention.check.interval.ms`;
  `await expire_offsets()` runs one pass (tests, tools).
* Operator reports for the CLI and the console: `rebalance_journal`, `offset_history`,
  `reset_plan_to_commit_at`, `group_health`.
* `high_watermark(topic, partition)`: the highest non-negative offset any group has committed for
  that partition (0 if none), O(1); what ListOffsets/Fetch report as the end of a record-less log.
* `partition_for(group_id)`, `shutdown()` (cancel every timer, answer parked requests).

Write path (one per operation): validate -> build typed records -> `store.append(partition,
records)` (a future) -> apply to memory once it is done -> answer. A failed append
(`StorageError`) answers the error Kafka's group coordinator maps a failed write to
(`map_write_error`) and applies nothing. The group engines themselves are in
`cohort.coordinator.groups` (`classic`, `consumer`); `cohort.coordinator.groups.runtime` hosts
them on the loop (parked requests, timers, their appends through `_store_record`).
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable

from cohort.coordinator.groups.lag import LogEnds
from cohort.coordinator.groups.reports import GroupReports
from cohort.coordinator.groups.classic import ClassicGroup, GroupState, JoinRequest, JoinResult, SyncResult
from cohort.coordinator.groups.consumer import (
    ConvertedFromClassic,
    ConsumerGroup,
    ConsumerGroupHeartbeat,
    ConsumerGroupState,
    HeartbeatError,
    HeartbeatResult,
    RecordReplayed,
    TopicMetadata,
    TopicsChanged,
    missing_group_result,
    validate_heartbeat,
)
from cohort.coordinator.groups.migration import UpgradeRefused, check_upgrade, upgrade_records
from cohort.coordinator.groups.partition_runtime import MEMBERS_ENCODED_ON_LOOP, PartitionRuntime, map_write_error
from cohort.coordinator.groups.runtime import GroupRuntime, LoopScheduler, Scheduler
from cohort.coordinator.contracts.partition_lifecycle import PartitionLifecycle
from cohort.coordinator.contracts.store import LogLoadError, StorageError
from cohort.coordinator.metrics import GROUP_TYPES
from cohort.coordinator.groups.offsets_table import OffsetsTable
from cohort.coordinator.records.types import (
    RECORD_TYPES,
    GroupJournalRecord,
    GroupJournalTombstone,
    GroupMetadataRecord,
    GroupMetadataTombstone,
    OffsetCommitRecord,
    OffsetCommitSourceRecord,
    OffsetCommitSourceTombstone,
    OffsetCommitRun,
    OffsetCommitTombstone,
    Record,
    decode_for_load,
    encode_offset_commit,
    encode_record,
)
from cohort.coordinator.contracts.store import Store
from cohort.coordinator.contracts.requests import RequestContext
from cohort.coordinator.contracts.answers import AnswerWhenDone, EncodeInThread
from cohort.protocol import messages as m
from cohort.protocol.errors import ErrorCode
from cohort.protocol.partitioning import partition_for as _partition_for

# Records of KIP-848 consumer groups (Kafka's key types 3-8), records and tombstones: replayed into the group.
CONSUMER_GROUP_RECORDS = frozenset(cls for key in (3, 5, 6, 7, 8) if key in RECORD_TYPES
                                   for cls in (RECORD_TYPES[key].record, RECORD_TYPES[key].tombstone))
CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE = 0, 1  # ConsumerGroupDescribe v1 MemberType
_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)

log = logging.getLogger("cohort.coordinator")

E = ErrorCode
INT32_MIN = -2147483648
# With no authorizer Kafka reports every operation a group supports: READ(3), DELETE(6), DESCRIBE(8).
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)

def java_string_length(text: str) -> int:
    """Java `String.length()`: UTF-16 code units (characters outside the BMP count twice)."""
    if text.isascii():
        return len(text)
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


# A request touching more partitions than this is handled in slices, letting other connections
# in between (one OffsetFetch of a 1 M-partition group held the loop for 5 s), and its answer is
# encoded off the loop. Smaller requests (nearly all) take the single-pass path untouched.
LARGE_REQUEST_PARTITIONS = 20_000
_PARTITIONS_PER_SLICE = 5_000
class _Commit:
    """One OffsetCommit on its way: its records, what to apply once they are durable, its answer."""

    __slots__ = ("req", "version", "group_id", "partition", "created", "now", "expire", "encoded", "commits",
                 "answers", "error", "member_id", "generation", "ctx", "admin_reset", "journaled")

    def __init__(self, req, version: int, group_id: str, partition: int, created, now: int, expire: int,
                 member_id: str, generation: int, ctx: RequestContext, admin_reset: bool) -> None:
        self.req = req
        self.version = version
        self.group_id = group_id
        self.partition = partition
        self.created = created  # the simple group this commit created (dropped again if it fails)
        self.now = now
        self.expire = expire
        self.member_id = member_id
        self.generation = generation  # or member epoch
        self.ctx = ctx
        self.admin_reset = admin_reset
        self.journaled = None  # the journal entry of an admin reset, applied once durable
        self.encoded: list[tuple[bytes, bytes]] = []
        self.commits: list[tuple] = []
        self.answers: list = []
        self.error = E.NONE


# The answers a heartbeat usually gets, made once (answers are only read: encoded and counted).
_HEARTBEAT_ANSWERS = {code: m.HeartbeatResponse(throttle_time_ms=0, error_code=int(code)) for code in (
    E.NONE, E.REBALANCE_IN_PROGRESS, E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION, E.FENCED_INSTANCE_ID)}


def _request_partitions(topics, field: str) -> int:
    """How many partitions a request's topic list names (0 for None: "all of them")."""
    count = 0  # (a loop: a generator expression costs a frame of its own on every fetch and commit)
    for t in topics or ():
        count += len(getattr(t, field))
    return count


class GroupCoordinator:
    """Owns every classic group and the committed offsets of one coordinator node."""

    # Slots, not an instance dict: past 30 attributes CPython 3.11 keeps an instance's attributes in a
    # plain dict, and every `self.x` and `self.method()` on the request path stops being specialized
    # (a method call ~18 -> ~33 ns). tests/coordinator/test_hot_path_layout.py keeps it so.
    __slots__ = (
        "config", "metrics", "_heartbeats", "offsets", "scheduler", "reports", "_keeps_history",
        "_commit_sources", "runtime", "_other_records",
        "_groups", "_consumer_groups", "_topics", "_topics_announce", "partitions", "_loaded", "_high_watermarks",
        "_retention_timer", "_retention_task", "partition_for",
    )

    def __init__(
        self,
        config,
        store: Store,
        offsets: OffsetsTable | None = None,
        *,
        scheduler: Scheduler | None = None,
        other_records: Callable[[Record], None] | None = None,
        metrics=None,
    ) -> None:
        """`other_records` receives replayed records that are not about groups (the topic registry);
        `metrics` (coordinator.metrics.CoordinatorMetrics) counts rebalances, expiries and loads."""
        self.config = config
        self.metrics = metrics
        self._heartbeats = {t: metrics.group_heartbeats(t) for t in GROUP_TYPES} if metrics is not None else None
        self.offsets = offsets if offsets is not None else OffsetsTable()
        self.scheduler: Scheduler = scheduler or LoopScheduler()
        # Commit sources are written only where a history can be read back (the local log, not etcd).
        self._keeps_history = config.offsets_history_retention_ms > 0 and hasattr(store, "history")
        # group -> the (member, generation, client, host) of its last commit-source record in the log
        self._commit_sources: dict[str, tuple[str, int, str, str]] = {}
        self._other_records = other_records
        self._groups: dict[str, ClassicGroup] = {}
        # KIP-848 groups; a group id is in at most one of the two maps (Kafka's shared group id space)
        self._consumer_groups: dict[str, ConsumerGroup] = {}
        self.partition_for = functools.lru_cache(maxsize=65536)(self._partition_for)
        self.partitions = PartitionRuntime(store, config.offsets_topic_num_partitions, self, metrics)
        self._loaded = self.partitions.loaded
        self.reports = GroupReports(config, self.scheduler, store, self.offsets, self.partition_for,
                                    self.partitions.error, self._loaded, self._groups, self._consumer_groups,
                                    self.partitions.append_encoded, self.offset_commit)
        self.runtime = GroupRuntime(self.scheduler, self.partitions.append_group_record, metrics, journal=self.reports.journal_rebalance)
        self.runtime.converted_to_classic = self._converted_to_classic
        self._topics = None  # the TopicRegistry consumer groups resolve subscriptions against (watch_topics)
        self._topics_announce = None  # a pending TopicsChanged for every consumer group (once per loop turn)
        self._high_watermarks: dict[str, dict[int, int]] = {}
        # Per partition: appends started / finished, and RequireStable fetches waiting for a count.
        # The log completes a partition's appends in order, so "finished >= n" means the first n are done.
        self._retention_timer = None
        self._retention_task: asyncio.Task | None = None

    # =========================================================================================
    # Partitions, load, replay
    # =========================================================================================
    def _partition_for(self, group_id: str) -> int:
        """The offsets partition that owns `group_id` (Kafka's hash rule)."""
        return _partition_for(group_id, self.config.offsets_topic_num_partitions)

    async def load(self, *, start_retention: bool = True) -> None:
        """Open the store and load every partition (a single node without an `Ownership`); raises
        `LogLoadError` if some failed (those answer NOT_COORDINATOR, the rest serve normally)."""
        try:
            await self.partitions.load_all()
        finally:
            if start_retention:
                self.start_retention()

    # -- the shard side of the partition runtime: what a partition's records mean --------------
    def replay_chunk(self, records: list[tuple[bytes, bytes]], loaded_groups: set[str]) -> None:
        groups = self._groups
        for item in decode_for_load(records):
            if type(item) is OffsetCommitRun:
                if item.group not in groups and item.group not in self._consumer_groups:
                    groups[item.group] = self._new_group(item.group)  # a simple group
                loaded_groups.add(item.group)
                self.offsets.put_run(item)
                self._raise_high_watermarks(item.topic, item.partitions, item.offsets)
            else:
                self.replay(item)
                group_id = getattr(item, "group", None)
                if group_id is not None:
                    loaded_groups.add(group_id)

    def partition_replayed(self, partition: int, loaded_groups: set[str]) -> None:
        """Every record of `partition` is replayed: its groups' timers start."""
        for group_id in loaded_groups:
            group = self._groups.get(group_id) or self._consumer_groups.get(group_id)
            if group is not None:
                self.runtime.load_completed(group)

    def partition_lost(self, partition: int) -> None:
        """Another node coordinates `partition` now: answer its parked requests NOT_COORDINATOR and
        forget its groups and offsets."""
        for group_id in [g for g in self._groups if self.partition_for(g) == partition]:
            group = self._groups.pop(group_id)
            self.runtime.unload(group, E.NOT_COORDINATOR)
        for group_id in [g for g in self._consumer_groups if self.partition_for(g) == partition]:
            self.runtime.unload(self._consumer_groups.pop(group_id), E.NOT_COORDINATOR)
        for group_id in [g for g in self.offsets.groups() if self.partition_for(g) == partition]:
            self.offsets.delete_group(group_id)
        self.reports.forget_partition(partition)
        for group_id in [g for g in self._commit_sources if self.partition_for(g) == partition]:
            del self._commit_sources[group_id]

    def replay(self, record: Record) -> None:
        """Apply one record read back from the log (no writes, no timers)."""
        if type(record) is OffsetCommitRecord:
            if record.group not in self._groups and record.group not in self._consumer_groups:
                self._groups[record.group] = self._new_group(record.group)  # a simple group
            self._apply_commit(record)
        elif type(record) is OffsetCommitTombstone:
            self.offsets.delete(record.group, record.topic, record.partition)
        elif type(record) is GroupMetadataRecord:
            group = self._groups.get(record.group)
            if group is None:
                group = self._groups[record.group] = self._new_group(record.group)
            self.runtime.load(group, record)
        elif type(record) is GroupMetadataTombstone:
            group = self._groups.pop(record.group, None)
            if group is not None:
                self.runtime.unload(group)
        elif type(record) in CONSUMER_GROUP_RECORDS:
            self._replay_consumer_group_record(record)
        elif type(record) is GroupJournalRecord:
            self.reports.journal.apply(record)
        elif type(record) in _HISTORY_ONLY:
            pass  # read back by the offset history, not kept in memory
        elif self._other_records is not None:
            self._other_records(record)

    # =========================================================================================
    # Groups, records, writes
    # =========================================================================================
    def _new_group(self, group_id: str) -> ClassicGroup:
        return ClassicGroup(group_id, config=self.config, created_ms=self.scheduler.now_ms())

    def group(self, group_id: str) -> ClassicGroup | None:
        """Read-only access for tests and tools; mutate only through the request methods."""
        return self._groups.get(group_id)

    def groups(self) -> list[ClassicGroup]:
        return list(self._groups.values())

    def _apply_commit(self, rec: OffsetCommitRecord) -> None:
        self._apply_commit_fields(rec.group, rec.topic, rec.partition, rec.offset, rec.leader_epoch, rec.metadata,
                                  rec.commit_timestamp, rec.expire_timestamp)

    def _apply_commit_fields(self, group_id: str, topic: str, partition: int, offset: int, leader_epoch: int,
                             metadata: str, commit_timestamp: int, expire_timestamp: int) -> None:
        self.offsets.put_fields(group_id, topic, partition, offset, leader_epoch, metadata, commit_timestamp,
                                expire_timestamp)
        if offset >= 0:
            by_partition = self._high_watermarks.get(topic)
            if by_partition is None:
                by_partition = self._high_watermarks[topic] = {}
            if offset > by_partition.get(partition, 0):
                by_partition[partition] = offset

    def _raise_high_watermarks(self, topic: str, partitions: Iterable[int], offsets: Iterable[int]) -> None:
        by_partition = self._high_watermarks.get(topic)
        if by_partition is None:
            by_partition = self._high_watermarks[topic] = {}
        current = by_partition.get
        for partition, offset in zip(partitions, offsets):
            if offset > current(partition, 0):
                by_partition[partition] = offset

    def high_watermark(self, topic: str, partition: int) -> int:
        """Highest non-negative offset committed for the partition by any group since start (0 if none).

        Never lowered by offset deletion, so no position a consumer was handed goes out of range.
        """
        by_partition = self._high_watermarks.get(topic)
        return 0 if by_partition is None else by_partition.get(partition, 0)

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's high watermarks start again from 0 if it is re-created."""
        self._high_watermarks.pop(topic, None)

    def _drop_group(self, group: ClassicGroup) -> None:
        if self._groups.get(group.group_id) is group:
            del self._groups[group.group_id]
            self.reports.forget([group.group_id])
        if group.state is not GroupState.DEAD:
            self.runtime.delete(group)

    def _delete_consumer_group(self, group: ConsumerGroup) -> None:
        """An empty consumer group goes: its tombstones are written (in order, before what follows)
        and it is Dead at once; its committed offsets stay."""
        for record in group.tombstones():
            self.partitions.append_group_record(record)
        self._drop_consumer_group(group)

    def _drop_consumer_group(self, group: ConsumerGroup) -> None:
        if self._consumer_groups.get(group.group_id) is group:
            del self._consumer_groups[group.group_id]
        if group.state is not ConsumerGroupState.DEAD:
            self.runtime.delete(group)

    # =========================================================================================
    # JoinGroup
    # =========================================================================================
    async def join_group(self, req, version: int, ctx: RequestContext):
        group_id, member_id = req.group_id, req.member_id
        if not group_id:
            return self._join_response(version, JoinResult(error=E.INVALID_GROUP_ID, member_id=member_id))
        if not (self.config.group_min_session_timeout_ms <= req.session_timeout_ms
                <= self.config.group_max_session_timeout_ms):
            return self._join_response(version, JoinResult(error=E.INVALID_SESSION_TIMEOUT, member_id=member_id))
        partition = self.partition_for(group_id)
        error = self.partitions.error(partition)
        if error:
            return self._join_response(version, JoinResult(error=error, member_id=member_id))
        consumer_group = self._consumer_groups.get(group_id)
        if consumer_group is not None and consumer_group.state is not ConsumerGroupState.DEAD:
            if not consumer_group.is_empty:
                # A classic member inside a consumer group (Kafka's migration): answered from its target.
                return self._join_response(version, await self.runtime.join(consumer_group, self._join_request(
                    req, version, ctx)))
            # An empty consumer group gives way to the classic group (Kafka's maybeDeleteEmptyConsumerGroup).
            self._delete_consumer_group(consumer_group)
        group = self._groups.get(group_id)
        new_group_write = None
        if group is None:
            if member_id:
                return self._join_response(version, JoinResult(error=E.UNKNOWN_MEMBER_ID, member_id=member_id))
            group = self._groups[group_id] = self._new_group(group_id)
            log.info("group %s: created by a JoinGroup from client %s", group_id, ctx.client_id)
            # Commit the new group to the log (Kafka's "empty" GroupMetadata record, generation 0).
            new_group_write = self.partitions.append_group_record(group.metadata_record({}))
        join = self._join_request(req, version, ctx)
        if join.reason:
            log.info("group %s: JoinGroup from %r (client %s), reason: %s", group_id, member_id,
                     ctx.client_id, join.reason)
        future = self.runtime.join(group, join)
        if new_group_write is not None:
            error = await new_group_write
            if error:
                log.warning("group %s: could not write the new group's metadata: %s", group_id, E(error).name)
                if self._groups.get(group_id) is group and group.state is not GroupState.DEAD:
                    self._drop_group(group)
                if not future.done():
                    future.cancel()
                return self._join_response(version, JoinResult(error=error))
        result: JoinResult = await future
        response = self._join_response(version, result)
        # The leader of a big group gets every member's metadata: encode that off the loop.
        return EncodeInThread(response) if len(result.members) > MEMBERS_ENCODED_ON_LOOP else response

    @staticmethod
    def _join_request(req, version: int, ctx: RequestContext) -> JoinRequest:
        return JoinRequest(
            member_id=req.member_id,
            group_instance_id=req.group_instance_id if version >= 5 else None,
            client_id=ctx.client_id,
            client_host=ctx.client_host,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=req.session_timeout_ms if version == 0 else req.rebalance_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
            reason=req.reason if version >= 8 else None,
            require_known_member_id=version >= 4,
            supports_skip_assignment=version >= 9,
        )

    @staticmethod
    def _join_response(version: int, r: JoinResult):
        if r.error and r.error != E.MEMBER_ID_REQUIRED:
            r = JoinResult(error=r.error, member_id=r.member_id)
        protocol_name = r.protocol_name
        if version < 7 and protocol_name is None:
            protocol_name = ""  # v0-6 cannot say null
        elif version >= 7 and protocol_name == "":
            protocol_name = None
        return m.JoinGroupResponse(
            throttle_time_ms=0,
            error_code=int(r.error),
            generation_id=r.generation_id,
            protocol_type=r.protocol_type,
            protocol_name=protocol_name,
            leader=r.leader,
            skip_assignment=r.skip_assignment,
            member_id=r.member_id,
            # (member_id, group_instance_id, metadata: positional, the leader's list may hold 10 000)
            members=[_JoinAnswerMember(mid, iid, meta) for mid, iid, meta in r.members],
        )

    # =========================================================================================
    # SyncGroup, Heartbeat, LeaveGroup
    # =========================================================================================
    async def sync_group(self, req, version: int, ctx: RequestContext):
        group_id = req.group_id
        if not group_id:
            return self._sync_response(SyncResult(error=E.INVALID_GROUP_ID))
        if version >= 5 and (req.protocol_type is None or req.protocol_name is None):
            return self._sync_response(SyncResult(error=E.INCONSISTENT_GROUP_PROTOCOL))
        error = self.partitions.error(self.partition_for(group_id))
        if error:
            return self._sync_response(SyncResult(error=error))
        group = self._groups.get(group_id) or self._consumer_groups.get(group_id)  # classic members may be in either
        if group is None:
            return self._sync_response(SyncResult(error=E.UNKNOWN_MEMBER_ID))
        assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
        future = self.runtime.sync(
            group,
            req.member_id,
            req.group_instance_id if version >= 3 else None,
            req.generation_id,
            req.protocol_type if version >= 5 else None,
            req.protocol_name if version >= 5 else None,
            assignments,
        )
        return self._sync_response(await future)

    @staticmethod
    def _sync_response(r: SyncResult):
        return m.SyncGroupResponse(throttle_time_ms=0, error_code=int(r.error), protocol_type=r.protocol_type,
                                   protocol_name=r.protocol_name, assignment=r.assignment)

    def heartbeat(self, req, version: int, ctx: RequestContext):
        group_id = req.group_id
        if not group_id:
            return m.HeartbeatResponse(throttle_time_ms=0, error_code=E.INVALID_GROUP_ID)
        error = self.partitions.error(self.partition_for(group_id))
        if error == E.COORDINATOR_LOAD_IN_PROGRESS:
            # Kafka: a member heartbeating while its coordinator loads is fine; it'll be there after.
            return m.HeartbeatResponse(throttle_time_ms=0, error_code=E.NONE)
        if error:
            return m.HeartbeatResponse(throttle_time_ms=0, error_code=error)
        group = self._groups.get(group_id) or self._consumer_groups.get(group_id)
        if group is None:
            return _HEARTBEAT_ANSWERS[E.UNKNOWN_MEMBER_ID]
        error = self.runtime.heartbeat(group, req.member_id, req.group_instance_id if version >= 3 else None,
                                       req.generation_id)
        if self._heartbeats is not None:
            self._heartbeats["classic"].inc()
        return _HEARTBEAT_ANSWERS.get(error) or m.HeartbeatResponse(throttle_time_ms=0, error_code=int(error))

    async def leave_group(self, req, version: int, ctx: RequestContext):
        if version <= 2:
            identities = [(req.member_id, None, None)]
        else:
            identities = [(x.member_id, x.group_instance_id, x.reason if version >= 5 else None)
                          for x in req.members]
        top_error, member_errors = self._leave(req.group_id, identities)
        if version <= 2:
            error = top_error or (member_errors[0] if member_errors else E.NONE)
            return m.LeaveGroupResponse(throttle_time_ms=0, error_code=int(error))
        return m.LeaveGroupResponse(
            throttle_time_ms=0,
            error_code=int(top_error),
            members=[] if top_error else [
                m.LeaveGroupResponse.MemberResponse(member_id=mid, group_instance_id=iid, error_code=int(err))
                for (mid, iid, _), err in zip(identities, member_errors)],
        )

    def _leave(self, group_id: str, identities: list) -> tuple[int, list[int]]:
        if not group_id:
            return E.INVALID_GROUP_ID, []
        error = self.partitions.error(self.partition_for(group_id))
        if error:
            return error, []
        group = self._groups.get(group_id) or self._consumer_groups.get(group_id)
        if group is None:
            return E.NONE, [E.UNKNOWN_MEMBER_ID] * len(identities)
        if group.state is GroupState.DEAD or group.state is ConsumerGroupState.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE, []
        return E.NONE, self.runtime.leave(group, identities)

    # =========================================================================================
    # OffsetCommit
    # =========================================================================================
    def offset_commit(self, req, version: int, ctx: RequestContext):
        """The OffsetCommit answer: at once when refused, else an `AnswerWhenDone` of the append.

        A commit of more partitions than a slice hands back a coroutine instead, which builds its
        records a slice at a time so other connections are served in between.
        """
        group_id = req.group_id
        generation = req.generation_id_or_member_epoch if version >= 1 else -1
        member_id = req.member_id if version >= 1 else ""
        instance_id = req.group_instance_id if version >= 7 else None
        created: ClassicGroup | None = None
        if group_id is None:
            return self._commit_error_response(req, E.INVALID_GROUP_ID)
        partition = self.partition_for(group_id)
        if partition not in self._loaded or time.monotonic() >= self.partitions.serving_deadline:
            # (`_partition_error`'s usual answer, inline)
            error = self.partitions.error(partition)
            if error:
                return self._commit_error_response(req, error)
        consumer_group = self._consumer_groups.get(group_id)
        group = self._groups.get(group_id)
        if consumer_group is not None:
            error = consumer_group.validate_offset_commit(member_id, instance_id, generation, version)
            if error:
                return self._commit_error_response(req, error)
        elif group is None:
            if generation >= 0:
                return self._commit_error_response(req, E.GROUP_ID_NOT_FOUND if version >= 9 else E.ILLEGAL_GENERATION)
            # A standalone consumer or admin tool: a "simple" group exists through its offsets.
            log.info("group %s: simple group created by a manual offset commit", group_id)
            group = created = self._groups[group_id] = self._new_group(group_id)
        else:
            error = group.validate_offset_commit(member_id, instance_id, generation)
            if error:
                return self._commit_error_response(req, error)
        if group is not None and member_id:  # a standalone consumer's or admin tool's commit keeps no session alive
            self.runtime.offset_committed(group, member_id)
        now = self.scheduler.now_ms()
        retention = req.retention_time_ms if 2 <= version <= 4 else -1
        # A retention of "forever" (up to 2^63-1 ms) must not overflow the record's int64.
        expire = max(min(now + retention, _INT64_MAX), _INT64_MIN) if retention != -1 else -1
        # An admin tool's reset: a commit outside group management to a consumer group (Kafka lets only an
        # inactive group take one). Simple groups (no protocol type) commit this way as their normal work.
        admin_reset = generation < 0 and not member_id and (
            consumer_group is not None or (group is not None and group.protocol_type is not None))
        commit = _Commit(req, version, group_id, partition, created, now, expire, member_id, generation, ctx,
                         admin_reset)
        topics = req.topics
        if _request_partitions(topics, "partitions") > _PARTITIONS_PER_SLICE:
            return self._offset_commit_in_slices(commit)
        try:
            for topic in topics:
                self._build_partitions(commit, topic.name, topic.partitions)
        except (ValueError, TypeError) as exc:
            self._unencodable(commit, exc)
        return self._append_commit(commit)

    async def _offset_commit_in_slices(self, commit: "_Commit") -> object:
        """`offset_commit` for a huge commit: its records built a slice at a time, other connections served between."""
        try:
            for topic in commit.req.topics:
                parts = None
                partitions = topic.partitions
                for start in range(0, max(len(partitions), 1), _PARTITIONS_PER_SLICE):  # (a topic of none answers too)
                    parts = self._build_partitions(commit, topic.name, partitions[start:start + _PARTITIONS_PER_SLICE],
                                                   parts)
                    await asyncio.sleep(0)
        except (ValueError, TypeError) as exc:
            self._unencodable(commit, exc)
        answer = self._append_commit(commit)
        return await answer if type(answer) is AnswerWhenDone else answer

    def _build_partitions(self, commit: "_Commit", name: str, partitions, parts: list | None = None) -> list:
        """Add the log records of `partitions` (of topic `name`) to `commit`, what to apply once they are
        durable, and their answers (accepted ones answer NONE unless the write fails): to `parts`, the
        topic's answer list already in `commit.answers`, or to a new topic answer, whose list is returned."""
        if parts is None:
            parts = []
            commit.answers.append(_CommitTopicAnswer(name, parts))  # name, partitions
        version, group_id, now, expire = commit.version, commit.group_id, commit.now, commit.expire
        max_metadata = self.config.offset_metadata_max_bytes
        with_epoch = version >= 6
        encoded, commits = commit.encoded, commit.commits
        for p in partitions:
            metadata = p.committed_metadata
            if metadata is None:
                metadata = ""
            elif metadata and _metadata_too_large(metadata, max_metadata):  # (most commits carry none)
                parts.append(_CommitAnswer(partition_index=p.partition_index, error_code=_METADATA_TOO_LARGE))
                continue
            commit_ts = p.commit_timestamp if version == 1 and p.commit_timestamp != -1 else now
            leader_epoch = p.committed_leader_epoch if with_epoch else -1
            offset = p.committed_offset
            index = p.partition_index
            encoded.append(encode_offset_commit(group_id, name, index, offset, leader_epoch, metadata, commit_ts,
                                                expire))
            commits.append((name, index, offset, leader_epoch, metadata, commit_ts))
            parts.append(_CommitAnswer(index, 0))  # partition_index, error_code (see _CommitAnswer)
        return parts

    @staticmethod
    def _unencodable(commit: "_Commit", exc: Exception) -> None:
        log.error("cannot encode records for offsets partition %d: %s", commit.partition, exc)
        commit.error = E.UNKNOWN_SERVER_ERROR

    def _append_commit(self, commit: "_Commit"):
        """The answer once the commit's records are durable (at once if there are none to write)."""
        if commit.error or not commit.encoded:
            return self._commit_answer(commit, None)
        if commit.admin_reset:
            commit.journaled = self.reports.admin_record(commit.group_id, "reset_offsets", commit.ctx,
                                                  self._reset_changes(commit.group_id, commit.commits))
            commit.encoded.append(encode_record(commit.journaled))
        if self._keeps_history:
            # Who made these commits, for the offset history: written when a group's committer changes (a
            # source record per request cost a tenth of the commit rate); the history attributes a commit
            # to the last source before it in the log.
            source = (commit.member_id, commit.generation, commit.ctx.client_id, commit.ctx.client_host)
            if self._commit_sources.get(commit.group_id) != source:
                self._commit_sources[commit.group_id] = source
                commit.encoded.insert(0, encode_record(OffsetCommitSourceRecord(
                    commit.group_id, *source, commit.now)))
        return AnswerWhenDone(self.partitions.start_append(commit.partition, commit.encoded), self._commit_answer, commit)

    def _commit_answer(self, commit: "_Commit", durable: asyncio.Future | None):
        """Apply a durable commit and answer it, or answer why it failed (`durable`: its append, done; None
        if it wrote nothing)."""
        group_id = commit.group_id
        error = commit.error
        if durable is not None:
            self.partitions.write_finished(commit.partition)
            exc = durable.exception()  # (raises CancelledError if cancelled: never answered)
            if exc is not None:
                if not isinstance(exc, StorageError):
                    raise exc
                log.warning("offsets partition %d: append failed: %s", commit.partition, exc)
                self._commit_sources.pop(group_id, None)  # its source record may not be in the log
                error = map_write_error(exc.error_code)
        if not error and commit.journaled is not None:
            self.reports.journal.apply(commit.journaled)
        if error:
            created = commit.created
            if created is not None and self._groups.get(group_id) is created and created.state is GroupState.EMPTY \
                    and not self.offsets.has_offsets(group_id) and not created.members:
                self._drop_group(created)
            return self._commit_response(commit.req, error)
        commits = commit.commits
        if commits:
            if group_id not in self._groups and group_id not in self._consumer_groups:
                # The group was deleted while we wrote: the offsets still exist, so does a simple group.
                self._groups[group_id] = self._new_group(group_id)
            apply = self._apply_commit_fields
            expire = commit.expire
            for name, index, offset, leader_epoch, metadata, commit_ts in commits:
                apply(group_id, name, index, offset, leader_epoch, metadata, commit_ts, expire)
            if commit.member_id:  # (a standalone commit has no member to keep track of)
                self.reports.health.member_committed(group_id, commit.member_id, commit.now)
            if self.metrics is not None:
                self.metrics.offsets_committed(len(commits))
        if len(commits) > LARGE_REQUEST_PARTITIONS:
            return EncodeInThread(_CommitResponse(0, commit.answers))
        return _CommitResponse(0, commit.answers)  # throttle_time_ms, topics

    def _reset_changes(self, group_id: str, commits: list[tuple]) -> list[str]:
        """What an admin reset changes, per partition: "topic:partition old->new"."""
        changes = []
        for name, index, offset, *_ in commits:
            old = self.offsets.get(group_id, name, index)
            changes.append(f"{name}:{index} {old.offset if old is not None else '-'}->{offset}")
        return changes

    def _commit_response(self, req, error: int):
        """Every partition answers `error`, except those refused for their metadata size (a failed write)."""
        max_metadata = self.config.offset_metadata_max_bytes

        def code(p) -> int:
            md = p.committed_metadata
            return _METADATA_TOO_LARGE if md is not None and _metadata_too_large(md, max_metadata) else error
        return m.OffsetCommitResponse(throttle_time_ms=0, topics=[
            _CommitTopicAnswer(name=t.name, partitions=[
                _CommitAnswer(partition_index=p.partition_index, error_code=int(code(p))) for p in t.partitions])
            for t in req.topics])

    @staticmethod
    def _commit_error_response(req, error: int):
        """Every partition answers `error` (the request as a whole was refused)."""
        return m.OffsetCommitResponse(throttle_time_ms=0, topics=[
            _CommitTopicAnswer(name=t.name, partitions=[
                _CommitAnswer(partition_index=p.partition_index, error_code=int(error)) for p in t.partitions])
            for t in req.topics])

    # =========================================================================================
    # OffsetFetch
    # =========================================================================================
    def offset_fetch(self, req, version: int, ctx: RequestContext):
        """The OffsetFetch answer, at once; or, when it must wait (RequireStable behind this
        partition's writes in flight) or is huge (built in slices), a coroutine that returns it.

        Nearly every fetch answers at once, and an answer made without a coroutine costs the
        server no task: that is most of a fetch's cost on Python 3.11.
        """
        if version < 8:  # one group (every client before Kafka 3.0's): its checks made once, in one frame
            group_id = req.group_id
            error = self._fetch_error(group_id)
            if not error and self._group_fetch_must_wait(group_id, req.topics, version >= 7 and req.require_stable):
                return self._offset_fetch_waiting(req, version)
            return self._group_fetch_response(req, version, error, None)
        if self._fetch_must_wait(req, version):
            return self._offset_fetch_waiting(req, version)
        return self._offset_fetch_response(req, version, {})

    def _fetched_groups(self, req, version: int) -> list[tuple[str, object]]:
        return [(g.group_id, g.topics) for g in req.groups] if version >= 8 else [(req.group_id, req.topics)]

    def _fetch_must_wait(self, req, version: int) -> bool:
        require_stable = version >= 7 and req.require_stable
        return any(self._group_fetch_must_wait(group_id, topics, require_stable)
                   for group_id, topics in self._fetched_groups(req, version) if not self._fetch_error(group_id))

    def _group_fetch_must_wait(self, group_id: str, topics, require_stable: bool) -> bool:
        """A readable group's fetch waits: with RequireStable behind its partition's writes in flight, or when
        it is huge (built in slices)."""
        return ((require_stable and self.partitions.writes_pending(self.partition_for(group_id)))
                or self._is_large_fetch(group_id, topics))

    async def _offset_fetch_waiting(self, req, version: int):
        """`offset_fetch` for a fetch that waits for writes in flight or is built in slices."""
        require_stable = version >= 7 and req.require_stable
        if version >= 8:
            Topic = m.OffsetFetchResponse.OffsetFetchResponseGroup.OffsetFetchResponseTopics
            topic_cls, partition_cls = Topic, Topic.OffsetFetchResponsePartitions
        else:
            topic_cls, partition_cls = _FetchTopicAnswer, _FetchAnswer
        sliced: dict[str, list] = {}
        for group_id, topics in self._fetched_groups(req, version):
            if self._fetch_error(group_id):
                continue
            if require_stable:
                await self.partitions.wait_for_writes(self.partition_for(group_id))
            if self._is_large_fetch(group_id, topics):
                sliced[group_id] = await self._fetch_answers_in_slices(group_id, topics, topic_cls, partition_cls)
        response = self._offset_fetch_response(req, version, sliced)
        return EncodeInThread(response) if sliced else response

    def _offset_fetch_response(self, req, version: int, sliced: dict[str, list]):
        """The answer, from the offsets table (or, for huge fetches, from the slices already built)."""
        if version >= 8:
            Group = m.OffsetFetchResponse.OffsetFetchResponseGroup
            Topic = Group.OffsetFetchResponseTopics
            groups = []
            for g in req.groups:
                error = self._fetch_error(g.group_id)
                if not error and version >= 9:
                    consumer_group = self._consumer_groups.get(g.group_id)
                    if consumer_group is not None:
                        error = consumer_group.validate_offset_fetch(g.member_id, g.member_epoch)
                if error:
                    topics = []
                elif g.group_id in sliced:
                    topics = sliced[g.group_id]
                else:
                    topics = self._fetch_answers(g.group_id, g.topics, Topic, Topic.OffsetFetchResponsePartitions)
                groups.append(Group(group_id=g.group_id, error_code=int(error), topics=topics))
            return m.OffsetFetchResponse(throttle_time_ms=0, groups=groups)
        return self._group_fetch_response(req, version, self._fetch_error(req.group_id), sliced.get(req.group_id))

    def _group_fetch_response(self, req, version: int, error: int, sliced: list | None):
        """The answer of a one-group fetch (v0-7) whose group error is `error` (`sliced`: a huge one's topics)."""
        if sliced is not None and not error:
            return m.OffsetFetchResponse(throttle_time_ms=0, error_code=0, topics=sliced)
        if not error:
            topics = self._fetch_answers(req.group_id, req.topics, _FetchTopicAnswer, _FetchAnswer)
        elif version <= 1:
            # v0-1 have no group-level error: every requested partition carries it.
            topics = [_FetchTopicAnswer(name=t.name, partitions=[
                _FetchAnswer(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                             error_code=int(error))
                for p in t.partition_indexes]) for t in (req.topics or [])]
        else:
            topics = []
        return m.OffsetFetchResponse(throttle_time_ms=0, error_code=int(error) if version >= 2 else 0, topics=topics)

    def _is_large_fetch(self, group_id: str, topics) -> bool:
        if topics is None:
            return self.offsets.group_offset_count(group_id) > LARGE_REQUEST_PARTITIONS
        return _request_partitions(topics, "partition_indexes") > LARGE_REQUEST_PARTITIONS

    async def _fetch_answers_in_slices(self, group_id: str, topics, topic_cls, partition_cls) -> list:
        """`_fetch_answers` for a huge request: the same answers, built a slice at a time."""
        wanted = ([(name, self.offsets.partitions(group_id, name)) for name in self.offsets.topics(group_id)]
                  if topics is None else [(t.name, t.partition_indexes) for t in topics])
        answers = []
        for name, indexes in wanted:
            partitions = []
            for start in range(0, len(indexes), _PARTITIONS_PER_SLICE):
                chunk = indexes[start:start + _PARTITIONS_PER_SLICE]
                for p, c in zip(chunk, self.offsets.committed(group_id, name, chunk)):
                    partitions.append(partition_cls(p, -1, -1, "", 0) if c is None
                                      else partition_cls(p, c[0], c[1], c[2], 0))
                await asyncio.sleep(0)
            answers.append(topic_cls(name, partitions))
        return answers

    def _fetch_error(self, group_id) -> int:
        """Why the group's offsets cannot be read (NONE if they can)."""
        if group_id is None:
            return E.INVALID_GROUP_ID
        return self.partitions.error(self.partition_for(group_id))

    def _fetch_answers(self, group_id: str, topics, topic_cls, partition_cls) -> list:
        """The response topics of a readable group: requested partitions (-1/"" where none is committed),
        or every committed one when `topics` is None."""
        if topics is None:
            return [topic_cls(name=name, partitions=[
                partition_cls(partition_index=p, committed_offset=o.offset, committed_leader_epoch=o.leader_epoch,
                              metadata=o.metadata, error_code=0)
                for p, o in sorted(parts.items())])
                for name, parts in self.offsets.group_offsets(group_id).items()]
        committed = self.offsets.committed
        answers = []
        for t in topics:
            partitions = []
            for p, c in zip(t.partition_indexes, committed(group_id, t.name, t.partition_indexes)):
                # positional: partition_index, committed_offset, committed_leader_epoch, metadata, error_code
                if c is None:
                    partitions.append(partition_cls(p, -1, -1, "", 0))
                else:
                    partitions.append(partition_cls(p, c[0], c[1], c[2], 0))
            answers.append(topic_cls(t.name, partitions))  # name, partitions
        return answers

    # =========================================================================================
    # DescribeGroups, ListGroups
    # =========================================================================================
    async def describe_groups(self, req, version: int, ctx: RequestContext):
        operations = GROUP_AUTHORIZED_OPERATIONS if version >= 3 and req.include_authorized_operations else INT32_MIN
        out = []
        for group_id in req.groups:
            out.append(self._describe(group_id, version, operations))
        return m.DescribeGroupsResponse(throttle_time_ms=0, groups=out)

    def _describe(self, group_id, version: int, operations: int):
        Described = m.DescribeGroupsResponse.DescribedGroup
        if group_id is None:
            return Described(error_code=E.INVALID_GROUP_ID, group_id="", group_state="", protocol_type="",
                             protocol_data="", members=[], authorized_operations=operations)
        error = self.partitions.error(self.partition_for(group_id))
        if error:
            return Described(error_code=int(error), group_id=group_id, group_state="", protocol_type="",
                             protocol_data="", members=[], authorized_operations=operations)
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return Described(error_code=E.GROUP_ID_NOT_FOUND if version >= 6 else E.NONE, group_id=group_id,
                             group_state=GroupState.DEAD.value, protocol_type="", protocol_data="", members=[],
                             authorized_operations=operations)
        stable = group.state is GroupState.STABLE
        return Described(
            error_code=E.NONE,
            group_id=group_id,
            group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "",
            members=[m.DescribeGroupsResponse.DescribedGroup.DescribedGroupMember(
                member_id=mem.member_id, group_instance_id=mem.group_instance_id, client_id=mem.client_id,
                client_host=mem.client_host,
                member_metadata=mem.metadata(group.protocol_name) if stable and group.protocol_name else b"",
                member_assignment=mem.assignment)
                for mem in group.members.values()],
            authorized_operations=operations,
        )

    async def list_groups(self, req, version: int, ctx: RequestContext):
        if any(self.partitions.error(p) == E.COORDINATOR_LOAD_IN_PROGRESS for p in range(self.config.offsets_topic_num_partitions)):
            return m.ListGroupsResponse(throttle_time_ms=0, error_code=E.COORDINATOR_LOAD_IN_PROGRESS, groups=[])
        states = {s.lower() for s in req.states_filter} if version >= 4 else set()
        types = {t.lower() for t in req.types_filter} if version >= 5 else set()
        listed = []
        if not types or "consumer" in types:
            for consumer_group in self._consumer_groups.values():
                state = consumer_group.state.value
                if consumer_group.state is ConsumerGroupState.DEAD \
                        or self.partition_for(consumer_group.group_id) in self.partitions.states.in_state[PartitionLifecycle.FAILED]:
                    continue
                if states and state.lower() not in states:
                    continue
                listed.append(m.ListGroupsResponse.ListedGroup(
                    group_id=consumer_group.group_id, protocol_type="consumer", group_state=state,
                    group_type="consumer"))
        if types and "classic" not in types:
            return m.ListGroupsResponse(throttle_time_ms=0, error_code=E.NONE, groups=listed)
        for group in self._groups.values():
            if group.state is GroupState.DEAD or self.partition_for(group.group_id) in self.partitions.states.in_state[PartitionLifecycle.FAILED]:
                continue
            if states and group.state.value.lower() not in states:
                continue
            listed.append(m.ListGroupsResponse.ListedGroup(
                group_id=group.group_id, protocol_type=group.protocol_type or "",
                group_state=group.state.value, group_type="classic"))
        return m.ListGroupsResponse(throttle_time_ms=0, error_code=E.NONE, groups=listed)

    # =========================================================================================
    # DeleteGroups, OffsetDelete
    # =========================================================================================
    async def delete_groups(self, req, version: int, ctx: RequestContext):
        names = list(dict.fromkeys(req.groups_names))  # duplicates removed, order kept
        results: dict[str | None, int] = {}
        by_partition: dict[int, list[tuple[ClassicGroup, list[Record]]]] = {}
        for group_id in names:
            if group_id is None:
                results[group_id] = E.INVALID_GROUP_ID
                continue
            if self.offsets.group_offset_count(group_id) > LARGE_REQUEST_PARTITIONS:
                await asyncio.sleep(0)  # a huge group's tombstones take a while: let others in first
            partition = self.partition_for(group_id)
            error = self.partitions.error(partition)
            group = self._groups.get(group_id) or self._consumer_groups.get(group_id)
            if not error:
                if isinstance(group, ConsumerGroup):
                    error = E.NONE if group.is_empty else E.NON_EMPTY_GROUP
                else:
                    error = E.GROUP_ID_NOT_FOUND if group is None else group.validate_delete()
            if error:
                results[group_id] = error
                continue
            records: list[Record] = [OffsetCommitTombstone(group_id, topic, p)
                                     for topic, parts in self.offsets.group_offsets(group_id).items()
                                     for p in parts]
            records += group.tombstones() if isinstance(group, ConsumerGroup) else [GroupMetadataTombstone(group_id)]
            deleted = sum(1 for r in records if type(r) is OffsetCommitTombstone)
            records.append(self.reports.admin_record(group_id, "delete_group", ctx, [f"{deleted} offsets deleted"]))
            by_partition.setdefault(partition, []).append((group, records))

        async def delete_in(partition: int, entries) -> None:
            error = await self.partitions.append(partition, [r for _, recs in entries for r in recs])
            for group, recs in entries:
                results[group.group_id] = error
                if error:
                    continue
                for r in recs:
                    if type(r) is OffsetCommitTombstone:
                        self.offsets.delete(r.group, r.topic, r.partition)
                    elif type(r) is GroupJournalRecord:
                        self.reports.journal.apply(r)
                if isinstance(group, ConsumerGroup):
                    self._drop_consumer_group(group)
                else:
                    self._drop_group(group)
                log.info("group %s: deleted", group.group_id)

        await asyncio.gather(*(delete_in(p, entries) for p, entries in by_partition.items()))
        return m.DeleteGroupsResponse(throttle_time_ms=0, results=[
            m.DeleteGroupsResponse.DeletableGroupResult(group_id=g if g is not None else "", error_code=int(results[g]))
            for g in names])

    async def offset_delete(self, req, version: int, ctx: RequestContext):
        group_id = req.group_id
        error = E.INVALID_GROUP_ID if not group_id else self.partitions.error(self.partition_for(group_id))
        group = None
        if not error:
            group = self._groups.get(group_id) or self._consumer_groups.get(group_id)
            if isinstance(group, ConsumerGroup):
                error = E.NONE  # Kafka decides per topic for consumer groups (GROUP_SUBSCRIBED_TO_TOPIC)
            else:
                error = E.GROUP_ID_NOT_FOUND if group is None else group.validate_offset_delete()
        if error:
            return m.OffsetDeleteResponse(error_code=int(error), throttle_time_ms=0, topics=[])
        records: list[OffsetCommitTombstone] = []
        answers: list[tuple[str, list[tuple[int, int]]]] = []
        for topic in req.topics:
            if group.is_subscribed_to(topic.name):
                answers.append((topic.name, [(p.partition_index, E.GROUP_SUBSCRIBED_TO_TOPIC) for p in topic.partitions]))
                continue
            for p in topic.partitions:
                if self.offsets.get(group_id, topic.name, p.partition_index) is not None:
                    records.append(OffsetCommitTombstone(group_id, topic.name, p.partition_index))
            answers.append((topic.name, [(p.partition_index, E.NONE) for p in topic.partitions]))
        if records:
            entry = self.reports.admin_record(group_id, "delete_offsets", ctx, [f"{r.topic}:{r.partition}" for r in records])
            error = await self.partitions.append(self.partition_for(group_id), [*records, entry])
            if error:
                return m.OffsetDeleteResponse(error_code=int(error), throttle_time_ms=0, topics=[])
            for r in records:
                self.offsets.delete(r.group, r.topic, r.partition)
            self.reports.journal.apply(entry)
        return m.OffsetDeleteResponse(error_code=0, throttle_time_ms=0, topics=[
            m.OffsetDeleteResponse.OffsetDeleteResponseTopic(name=name, partitions=[
                m.OffsetDeleteResponse.OffsetDeleteResponseTopic.OffsetDeleteResponsePartition(partition_index=p, error_code=int(e))
                for p, e in parts])
            for name, parts in answers])

    # =========================================================================================
    # KIP-848 consumer groups: ConsumerGroupHeartbeat, ConsumerGroupDescribe, records, topics
    # =========================================================================================
    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """Read-only access for tests and tools; mutate only through the request methods."""
        return self._consumer_groups.get(group_id)

    def consumer_groups(self) -> list[ConsumerGroup]:
        return list(self._consumer_groups.values())

    def _new_consumer_group(self, group_id: str) -> ConsumerGroup:
        config = self.config
        return ConsumerGroup(group_id, session_timeout_ms=config.group_consumer_session_timeout_ms,
                             heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
                             max_size=config.group_consumer_max_size,
                             assignment_interval_ms=config.group_consumer_assignment_interval_ms,
                             migration_policy=config.group_consumer_migration_policy,
                             classic_max_size=config.group_max_size,
                             assignors=config.group_consumer_assignors.split(","), image=self._topic_image(),
                             topic_access_checked=bool(config.authorizer_class_name))

    def _replay_consumer_group_record(self, record: Record) -> None:
        group = self._consumer_groups.get(record.group)
        if group is None:
            if _is_tombstone(record):
                return  # a tombstone of a group that is gone already
            # Offsets replayed first made a simple classic group: the consumer group replaces it (Kafka's rule).
            classic = self._groups.get(record.group)
            if classic is not None and not classic.members:
                del self._groups[record.group]
            group = self._consumer_groups[record.group] = self._new_consumer_group(record.group)
        self.runtime.submit(group, RecordReplayed(record))

    def _converted_to_classic(self, group: ConsumerGroup, record: GroupMetadataRecord) -> None:
        """The consumer group's last consumer-protocol member left (Kafka's online downgrade): its
        records are replaced by `record` (durable now); a classic group loaded from it serves the id."""
        if self._consumer_groups.get(group.group_id) is group:
            del self._consumer_groups[group.group_id]
        self.runtime.delete(group)
        classic = self._groups[group.group_id] = self._new_group(group.group_id)
        self.runtime.load(classic, record)
        self.runtime.load_completed(classic)
        log.info("group %s: consumer group converted back to a classic group (online downgrade)", group.group_id)

    # -- the topic registry --------------------------------------------------------------------
    def watch_topics(self, registry) -> None:
        """Resolve consumer groups' subscriptions against `registry` (a TopicRegistry), and tell every
        consumer group when a topic is created, deleted or grows, so its target assignment follows."""
        self._topics = registry
        self.reports.log_ends = LogEnds(registry.reported_end)
        registry.on_change = self._topics_changed

    def _topic_image(self) -> dict[str, TopicMetadata]:
        if self._topics is None:
            return {}
        return {t.name: TopicMetadata(t.topic_id, t.partitions) for t in self._topics}

    def _topics_changed(self) -> None:
        if self._topics_announce is not None or not self._consumer_groups:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet: groups made later take the image as it is then
        self._topics_announce = loop.call_soon(self._announce_topics)

    def _announce_topics(self) -> None:
        self._topics_announce = None
        image = self._topic_image()
        for group_id, group in list(self._consumer_groups.items()):
            if self.partition_for(group_id) in self._loaded and group.state is not ConsumerGroupState.DEAD:
                self.runtime.submit(group, TopicsChanged(image))

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------------
    def consumer_group_heartbeat(self, req, version: int, ctx: RequestContext):
        """The answer now (an error, or a heartbeat that changed nothing), or a future that resolves
        once the heartbeat's records are durable."""
        group_id = req.group_id
        owned = req.topic_partitions
        event = ConsumerGroupHeartbeat(
            0, req.member_id, req.member_epoch, version, req.instance_id, req.rack_id, req.rebalance_timeout_ms,
            req.subscribed_topic_names, req.subscribed_topic_regex if version >= 1 else None, req.server_assignor,
            None if owned is None else [(tp.topic_id, list(tp.partitions)) for tp in owned],
            ctx.client_id, ctx.client_host, self._describable_topics(req, ctx))
        try:
            validate_heartbeat(group_id, event, self.config.group_consumer_assignors.split(","))
        except HeartbeatError as exc:
            return _heartbeat_response(HeartbeatResult(exc.error, exc.message))
        error = self.partitions.error(self.partition_for(group_id))
        if error:
            return _heartbeat_response(HeartbeatResult(error))
        group = self._consumer_groups.get(group_id)
        if group is None or group.state is ConsumerGroupState.DEAD:
            classic = self._groups.get(group_id)
            if classic is not None and classic.state is not GroupState.DEAD and (
                    classic.members or classic.state is not GroupState.EMPTY):
                if req.member_epoch != 0:
                    return _heartbeat_response(missing_group_result(group_id))
                # Kafka's online upgrade: the classic members stay, inside a consumer group.
                try:
                    check_upgrade(classic, self.config.group_consumer_migration_policy,
                                  self.config.group_consumer_max_size)
                    records = upgrade_records(classic, self._topic_image())
                except UpgradeRefused as refused:
                    log.info("group %s: not converted to a consumer group: %s", group_id, refused)
                    return _heartbeat_response(HeartbeatResult(
                        E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."))
                self._drop_group(classic)
                group = self._consumer_groups[group_id] = self._new_consumer_group(group_id)
                self.runtime.submit(group, ConvertedFromClassic(records))
                log.info("group %s: classic group with %d members converted to a consumer group (online upgrade)",
                         group_id, len(classic.members))
            elif classic is not None and classic.state is not GroupState.DEAD:
                # An empty classic group (or a simple one, offsets only) becomes a consumer group; its
                # offsets stay. The tombstone goes first, so a reload sees the consumer group only.
                self.partitions.append_group_record(GroupMetadataTombstone(group_id))
                self._drop_group(classic)
                log.info("group %s: empty classic group converted to a consumer group", group_id)
        if group is None or group.state is ConsumerGroupState.DEAD:
            if req.member_epoch != 0:
                return _heartbeat_response(missing_group_result(group_id))
            group = self._consumer_groups[group_id] = self._new_consumer_group(group_id)
            log.info("group %s: consumer group created by member %s (client %s)", group_id, req.member_id,
                     ctx.client_id)
        if self._heartbeats is not None:
            self._heartbeats["consumer"].inc()
        answer = self.runtime.ask(group, lambda request_id: _with_request_id(event, request_id))
        if isinstance(answer, HeartbeatResult):
            return _heartbeat_response(answer)
        return _heartbeat_answer_when_durable(answer)

    def _describable_topics(self, req, ctx: RequestContext) -> frozenset[str] | None:
        """The topics a regex member's principal may DESCRIBE (None: no authorizer, or no regex to resolve)."""
        visible = ctx.topic_visible
        if visible is None or self._topics is None or req.subscribed_topic_regex == "":
            return None
        if not req.subscribed_topic_regex:
            group = self._consumer_groups.get(req.group_id)
            member = group.members.get(req.member_id) if group is not None else None
            if member is None or not member.subscribed_topic_regex:
                return None
        return frozenset(t.name for t in self._topics if visible(t.name))

    # -- ConsumerGroupDescribe ---------------------------------------------------------------------
    async def consumer_group_describe(self, req, version: int, ctx: RequestContext):
        operations = GROUP_AUTHORIZED_OPERATIONS if req.include_authorized_operations else INT32_MIN
        return m.ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=[
            self._describe_consumer_group(group_id, operations) for group_id in req.group_ids])

    def _describe_consumer_group(self, group_id, operations: int):
        Described = m.ConsumerGroupDescribeResponse.DescribedConsumerGroup
        Member = Described.DescribedConsumerGroupMember
        if group_id is None:
            return Described(error_code=E.INVALID_GROUP_ID, error_message="Group id can't be null.", group_id="",
                             authorized_operations=operations)
        error = self.partitions.error(self.partition_for(group_id))
        if error:
            return Described(error_code=int(error), group_id=group_id, authorized_operations=operations)
        group = self._consumer_groups.get(group_id)
        if group is None or group.state is ConsumerGroupState.DEAD:
            message = (f"Group {group_id} is not a consumer group." if group_id in self._groups
                       else f"Group {group_id} not found.")
            return Described(error_code=E.GROUP_ID_NOT_FOUND, error_message=message, group_id=group_id,
                             authorized_operations=operations)
        members = [Member(
            member_id=member.member_id, instance_id=member.instance_id, rack_id=member.rack_id,
            member_epoch=member.member_epoch, client_id=member.client_id, client_host=member.client_host,
            subscribed_topic_names=list(member.subscribed_topic_names),
            subscribed_topic_regex=member.subscribed_topic_regex,
            assignment=self._described_assignment(member.assigned),
            target_assignment=self._described_assignment(group.target_assignment.get(member.member_id, {})),
            member_type=CLASSIC_MEMBER_TYPE if member.uses_classic_protocol else CONSUMER_MEMBER_TYPE)
            for member in group.members.values()]
        return Described(error_code=E.NONE, group_id=group_id, group_state=group.state.value,
                         group_epoch=group.group_epoch, assignment_epoch=group.target_assignment_epoch,
                         assignor_name=group.preferred_assignor(), members=members,
                         authorized_operations=operations)

    def _described_assignment(self, assignment):
        """Topic ids with their names; a topic the registry no longer has is left out (as Kafka does)."""
        Assignment = m.ConsumerGroupDescribeResponse.DescribedConsumerGroup.DescribedConsumerGroupMember \
            .DescribedAssignment
        entries = []
        for topic_id, partitions in sorted(assignment.items(), key=lambda kv: str(kv[0])):
            topic = self._topics.get_by_id(topic_id) if self._topics is not None else None
            if topic is not None:
                entries.append(Assignment.DescribedTopicPartitions(topic_id=topic_id, topic_name=topic.name,
                                                                   partitions=sorted(partitions)))
        return Assignment(topic_partitions=entries)

    # =========================================================================================
    # Retention (KIP-211)
    # =========================================================================================
    def start_retention(self) -> None:
        """Run offset expiry every `offsets.retention.check.interval.ms` until shutdown (idempotent);
        group health is sampled from then on too."""
        self.reports.start_health_sampling()
        if self.partitions.closed or self._retention_timer is not None or self._retention_task is not None:
            return
        self._retention_timer = self.scheduler.call_later(
            self.config.offsets_retention_check_interval_ms, self._retention_due)

    def _retention_due(self) -> None:
        self._retention_timer = None
        if self.partitions.closed:
            return

        async def run() -> None:
            try:
                await self.expire_offsets()
            except Exception:
                log.exception("offset expiry pass failed")
            finally:
                self._retention_task = None
            self.start_retention()

        self._retention_task = asyncio.get_running_loop().create_task(run())

    async def expire_offsets(self) -> int:
        """One expiry pass: expired offsets and emptied Empty groups get tombstones. Returns how many."""
        now = self.scheduler.now_ms()
        retention_ms = self.config.offsets_retention_minutes * 60_000
        by_partition: dict[int, list[tuple[str, list[Record]]]] = {}
        checked = 0
        for group_id in list(dict.fromkeys([*self._groups, *self.offsets.groups()])):
            checked += self.offsets.group_offset_count(group_id) + 1
            if checked > _PARTITIONS_PER_SLICE:  # a pass over 100 000 groups lets others in between slices
                checked = 0
                await asyncio.sleep(0)
            consumer_group = self._consumer_groups.get(group_id)
            if consumer_group is not None:
                if self.partition_for(group_id) in self._loaded:
                    records, _ = self._expired_records(consumer_group, now, retention_ms)
                    if records:
                        by_partition.setdefault(self.partition_for(group_id), []).append((group_id, records))
                continue
            group = self._groups.get(group_id)
            if group is None and not self.offsets.has_offsets(group_id):
                continue  # deleted while the pass let others in
            if group is None:  # offsets without a group: treat them as a simple group's
                group = self._groups[group_id] = self._new_group(group_id)
            partition = self.partition_for(group_id)
            if partition not in self._loaded:
                continue
            records, all_expired = self._expired_records(group, now, retention_ms)
            if all_expired and group.state is GroupState.EMPTY:
                records.append(GroupMetadataTombstone(group_id))
            if records:
                by_partition.setdefault(partition, []).append((group_id, records))
        for group_id in self.reports.journal.groups():
            # A gone group's journal goes too, once its last entry is as old as offsets would be.
            entries = self.reports.journal.entries(group_id)
            partition = self.partition_for(group_id)
            if (group_id not in self._groups and not self.offsets.has_offsets(group_id) and partition in self._loaded
                    and (not entries or now - entries[-1].ended_ms >= retention_ms)):
                by_partition.setdefault(partition, []).append((group_id, self.reports.journal.tombstones(group_id)))
        total = 0

        async def write(partition: int, entries) -> int:
            error = await self.partitions.append(partition, [r for _, recs in entries for r in recs])
            if error:
                log.warning("offset expiry: could not write tombstones to partition %d: %s", partition, E(error).name)
                return 0
            for group_id, recs in entries:
                for r in recs:
                    if type(r) is OffsetCommitTombstone:
                        self.offsets.delete(r.group, r.topic, r.partition)
                    elif type(r) is GroupJournalTombstone:
                        self.reports.journal.forget([r.group])
                    elif type(r) is GroupMetadataTombstone:
                        group = self._groups.get(group_id)
                        if group is not None and group.state is GroupState.EMPTY \
                                and not self.offsets.has_offsets(group_id):
                            self._drop_group(group)
                            log.info("group %s: removed, its offsets expired", group_id)
            return len([r for _, recs in entries for r in recs])

        for n in await asyncio.gather(*(write(p, e) for p, e in by_partition.items())):
            total += n
        if total:
            log.info("offset expiry: wrote %d tombstones", total)
            if self.metrics is not None:
                self.metrics.offsets_expired(total)
        return total

    def _expired_records(self, group: ClassicGroup | ConsumerGroup, now: int,
                         retention_ms: int) -> tuple[list[Record], bool]:
        offsets = self.offsets.group_offsets(group.group_id)
        if not offsets:
            return [], True
        base_of = group.offset_expiry_base()
        if base_of is None:
            return [], False
        records: list[Record] = []
        all_expired = True
        for topic, parts in offsets.items():
            if group.is_subscribed_to(topic):
                all_expired = False
                continue
            for p, o in parts.items():
                if o.expire_timestamp != -1:
                    expired = now >= o.expire_timestamp
                else:
                    expired = now - base_of(o.commit_timestamp) >= retention_ms
                if expired:
                    records.append(OffsetCommitTombstone(group.group_id, topic, p))
                else:
                    all_expired = False
        return records, all_expired

    # =========================================================================================
    # Shutdown
    # =========================================================================================
    def shutdown(self) -> None:
        """Cancel every timer and answer every parked JoinGroup/SyncGroup (NOT_COORDINATOR)."""
        self.partitions.close()
        self.reports.shutdown()
        if self._retention_timer is not None:
            self._retention_timer.cancel()
            self._retention_timer = None
        if self._retention_task is not None:
            self._retention_task.cancel()
        for group in [*self._groups.values(), *self._consumer_groups.values()]:
            self.runtime.unload(group, E.NOT_COORDINATOR)


# Records that only the log's history reads (never live state).
_HISTORY_ONLY = (GroupJournalTombstone, OffsetCommitSourceRecord, OffsetCommitSourceTombstone)


def _metadata_too_large(metadata: str, max_bytes: int) -> bool:
    """Kafka counts the metadata's UTF-16 length; that is at most 2 * len, so short metadata needs no count."""
    return len(metadata) * 2 > max_bytes and java_string_length(metadata) > max_bytes


_JoinAnswerMember = m.JoinGroupResponse.JoinGroupResponseMember
_CommitResponse = m.OffsetCommitResponse
_CommitTopicAnswer = _CommitResponse.OffsetCommitResponseTopic
_CommitAnswer = _CommitTopicAnswer.OffsetCommitResponsePartition
# The hot paths build these response structs with positional arguments, in the declaration's field
# order (keyword arguments cost ~0.3 us more per object, a few per request).
_METADATA_TOO_LARGE = int(E.OFFSET_METADATA_TOO_LARGE)
_FetchTopicAnswer = m.OffsetFetchResponse.OffsetFetchResponseTopic
_FetchAnswer = _FetchTopicAnswer.OffsetFetchResponsePartition


def _is_tombstone(record) -> bool:
    return type(record).__name__.endswith("Tombstone")


def _with_request_id(event: ConsumerGroupHeartbeat, request_id: int) -> ConsumerGroupHeartbeat:
    event.request_id = request_id
    return event


_HeartbeatAssignment = m.ConsumerGroupHeartbeatResponse.HeartbeatAssignment
_HeartbeatTopic = _HeartbeatAssignment.HeartbeatAssignedTopicPartitions


def _heartbeat_response(result: HeartbeatResult):
    assignment = None if result.assignment is None else _HeartbeatAssignment(topic_partitions=[
        _HeartbeatTopic(topic_id=topic_id, partitions=partitions) for topic_id, partitions in result.assignment])
    if result.error:
        return m.ConsumerGroupHeartbeatResponse(throttle_time_ms=0, error_code=int(result.error),
                                                error_message=result.error_message)
    return m.ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=0, member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)


async def _heartbeat_answer_when_durable(future: asyncio.Future):
    return _heartbeat_response(await future)

