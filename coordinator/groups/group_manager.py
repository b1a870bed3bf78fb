"""`GroupManager`: classic and KIP-848 consumer groups (Kafka's `GroupMetadataManager`).

JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, ListGroups and DeleteGroups for classic
groups; ConsumerGroupHeartbeat and ConsumerGroupDescribe for consumer groups, with Kafka's online
upgrade and downgrade between the two; the topic registry consumer groups resolve subscriptions
against. The engines themselves are sans-IO (`classic`, `consumer`); `runtime.GroupRuntime` hosts
them on the loop (parked requests, timers) and their records reach the log through the partition
runtime. What only depends on the api_version is shaped in `responses`.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from cohort.coordinator.contracts.answers import (
    PendingAnswer,
    answer_after,
    answer_when_all,
    answer_when_done,
    encode_off_loop,
)
from cohort.coordinator.contracts.partition_lifecycle import PartitionLifecycle
from cohort.coordinator.contracts.requests import RequestContext
from cohort.coordinator.groups.classic.engine import ClassicGroup, GroupState, JoinRequest, JoinResult, SyncResult
from cohort.coordinator.groups.consumer.engine import (
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
from cohort.coordinator.groups.reports.lag import LogEnds
from cohort.coordinator.groups.consumer.migration import UpgradeRefused, check_upgrade, upgrade_records
from cohort.coordinator.groups.offsets.table import OffsetsTable
from cohort.coordinator.groups.runtime.partition import PartitionRuntime
from cohort.coordinator.groups.reports.group_reports import GroupReports
from cohort.coordinator.groups.responses import (
    HEARTBEAT_ANSWERS,
    consumer_heartbeat_response,
    heartbeat_response,
    join_response,
    leave_response,
    sync_response,
)
from cohort.coordinator.groups.runtime.group_runtime import GroupRuntime
from cohort.coordinator.groups.runtime.result import CoordinatorResult
from cohort.coordinator.groups.slices import LARGE_REQUEST_PARTITIONS, MEMBERS_ENCODED_ON_LOOP, next_turn
from cohort.coordinator.metrics import GROUP_TYPES
from cohort.coordinator.records.types import (
    GroupMetadataRecord,
    GroupMetadataTombstone,
    OffsetCommitTombstone,
    Record,
)
from cohort.protocol import messages as m
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.coordinator")
E = ErrorCode
INT32_MIN = -2147483648
# With no authorizer Kafka 4 reports every operation a group supports: READ(3), DELETE(6), DESCRIBE(8),
# DESCRIBE_CONFIGS(10), ALTER_CONFIGS(11) (groups have configs since KIP-848): 3400.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE = 0, 1  # ConsumerGroupDescribe v1 MemberType


class GroupManager:
    """Every classic and consumer group of one coordinator node, and the group APIs."""

    __slots__ = ("config", "scheduler", "partitions", "partition_for", "offsets", "reports", "runtime", "_groups",
                 "_consumer_groups", "_loaded", "_heartbeats", "_topics", "_topics_announce", "_durable", "_replay")

    def __init__(self, config, scheduler, metrics, partitions: PartitionRuntime, partition_for, offsets: OffsetsTable,
                 reports: GroupReports, classic: dict[str, ClassicGroup], consumer: dict[str, ConsumerGroup],
                 durable: dict[str, dict], replay: Callable[[Record], None]) -> None:
        """`classic` and `consumer`: the coordinator's group maps (a group id is in at most one of them,
        Kafka's shared group id space); `durable`: each group's records as durable, and `replay` the load's
        replay, to rebuild a group whose write failed."""
        self.config = config
        self.scheduler = scheduler
        self.partitions = partitions
        self.partition_for = partition_for
        self.offsets = offsets
        self.reports = reports
        self._groups = classic
        self._consumer_groups = consumer
        self._loaded = partitions.loaded
        self._heartbeats = {t: metrics.group_heartbeats(t) for t in GROUP_TYPES} if metrics is not None else None
        self._durable = durable
        self._replay = replay
        self.runtime = GroupRuntime(scheduler, self._write_group, metrics, journal=reports.journal_rebalance,
                                    write_failed=self._engine_write_failed)
        self.runtime.converted_to_classic = self._converted_to_classic
        self._topics = None  # the TopicRegistry consumer groups resolve subscriptions against (watch_topics)
        self._topics_announce = None  # a pending TopicsChanged for every consumer group (once per loop turn)

    def shutdown(self) -> None:
        """Answer every parked JoinGroup/SyncGroup NOT_COORDINATOR and cancel the groups' timers."""
        for group in [*self._groups.values(), *self._consumer_groups.values()]:
            self.runtime.unload(group, E.NOT_COORDINATOR)

    def new_group(self, group_id: str) -> ClassicGroup:
        return ClassicGroup(group_id, config=self.config, created_ms=self.scheduler.now_ms())

    def simple_group(self, group_id: str) -> ClassicGroup:
        """A group that exists through its committed offsets only (a standalone consumer's, an admin tool's)."""
        group = self._groups[group_id] = self.new_group(group_id)
        return group

    def group(self, group_id: str) -> ClassicGroup | None:
        """Read-only access for tests and tools; mutate only through the request methods."""
        return self._groups.get(group_id)

    def groups(self) -> list[ClassicGroup]:
        return list(self._groups.values())

    def drop_group(self, group: ClassicGroup) -> None:
        if self._groups.get(group.group_id) is group:
            del self._groups[group.group_id]
            self.reports.forget([group.group_id])
        if group.state is not GroupState.DEAD:
            self.runtime.delete(group)

    # -- writes of a group's records ---------------------------------------------------------
    def _write_group(self, group_id: str, result: CoordinatorResult) -> PendingAnswer:
        """The write gate for a group's records: its partition, in the order its records were made."""
        return self.partitions.write(self.partition_for(group_id), result, order_key=group_id)

    def _group_written(self, group_id: str, error: int) -> int:
        """A group record written by the manager (a new group, a conversion's tombstones) is durable, or
        failed: then the group goes back to its last durable point."""
        if error:
            self.roll_back(group_id, error)
        return error

    def _engine_write_failed(self, group, error: int) -> None:
        """A consumer group's engine applies its records as it makes them: when they could not be
        written, the group is rebuilt from its durable records. (A classic group applies what it wrote
        only once durable and follows Kafka's rules on a failed write itself.)"""
        if isinstance(group, ConsumerGroup):
            self.roll_back(group.group_id, error)

    def roll_back(self, group_id: str, error: int) -> None:
        """Rebuild `group_id` from its last durable records, through the load's replay (our form of Kafka's
        timeline snapshot revert): what memory held beyond them is gone, requests parked on it hear `error`."""
        for groups in (self._consumer_groups, self._groups):
            group = groups.pop(group_id, None)
            if group is not None:
                self.runtime.unload(group, error)
        kept = self._durable.get(group_id)
        for record in list(kept.values()) if kept else ():
            self._replay(record)
        group = self._groups.get(group_id) or self._consumer_groups.get(group_id)
        if group is not None:
            self.runtime.load_completed(group)
        elif self.offsets.has_offsets(group_id):
            self.simple_group(group_id)
        log.warning("group %s: a write failed (%s): back to its last durable state", group_id, E(error).name)

    def _delete_consumer_group(self, group: ConsumerGroup) -> None:
        """An empty consumer group goes: its tombstones are written (in order, before what follows)
        and it is Dead at once (back again if they cannot be written); its committed offsets stay."""
        self._write_group(group.group_id, CoordinatorResult(group.tombstones(), self._group_written, group.group_id))
        self._drop_consumer_group(group)

    def _drop_consumer_group(self, group: ConsumerGroup) -> None:
        if self._consumer_groups.get(group.group_id) is group:
            del self._consumer_groups[group.group_id]
        if group.state is not ConsumerGroupState.DEAD:
            self.runtime.delete(group)

    async def join_group(self, req, version: int, ctx: RequestContext):
        group_id, member_id = req.group_id, req.member_id
        if not group_id:
            return join_response(version, JoinResult(error=E.INVALID_GROUP_ID, member_id=member_id))
        if not (self.config.group_min_session_timeout_ms <= req.session_timeout_ms
                <= self.config.group_max_session_timeout_ms):
            return join_response(version, JoinResult(error=E.INVALID_SESSION_TIMEOUT, member_id=member_id))
        partition = self.partition_for(group_id)
        error = self.partitions.error(partition)
        if error:
            return join_response(version, JoinResult(error=error, member_id=member_id))
        consumer_group = self._consumer_groups.get(group_id)
        if consumer_group is not None and consumer_group.state is not ConsumerGroupState.DEAD:
            if not consumer_group.is_empty:
                # A classic member inside a consumer group (Kafka's migration): answered from its target.
                return join_response(version, await self.runtime.join(consumer_group, self._join_request(
                    req, version, ctx)))
            # An empty consumer group gives way to the classic group (Kafka's maybeDeleteEmptyConsumerGroup).
            self._delete_consumer_group(consumer_group)
        group = self._groups.get(group_id)
        new_group_record = None
        if group is None:
            if member_id:
                return join_response(version, JoinResult(error=E.UNKNOWN_MEMBER_ID, member_id=member_id))
            group = self._groups[group_id] = self.new_group(group_id)
            log.info("group %s: created by a JoinGroup from client %s", group_id, ctx.client_id)
            new_group_record = group.metadata_record({})
        join = self._join_request(req, version, ctx)
        if join.reason:
            log.info("group %s: JoinGroup from %r (client %s), reason: %s", group_id, member_id,
                     ctx.client_id, join.reason)
        future = self.runtime.join(group, join)
        if new_group_record is None:
            return self._join_answer(version, await future)
        # The new group is committed to the log (Kafka's "empty" GroupMetadata record, generation 0)
        # before the join is answered; if it cannot be, the group is gone and the join hears why.
        written = self._write_group(group_id, CoordinatorResult([new_group_record], self._group_written, group_id))
        return answer_after(written, lambda error: self._new_group_join_answer(version, future, error))

    def _new_group_join_answer(self, version: int, future: asyncio.Future, error: int):
        if error:
            if not future.done():
                future.cancel()
            return join_response(version, JoinResult(error=error))
        return answer_when_done(future, lambda result: self._join_answer(version, result))

    @staticmethod
    def _join_answer(version: int, result: JoinResult):
        response = join_response(version, result)
        # The leader of a big group gets every member's metadata: encode that off the loop.
        return encode_off_loop(response) if len(result.members) > MEMBERS_ENCODED_ON_LOOP else response

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

    async def sync_group(self, req, version: int, ctx: RequestContext):
        group_id = req.group_id
        if not group_id:
            return sync_response(SyncResult(error=E.INVALID_GROUP_ID))
        if version >= 5 and (req.protocol_type is None or req.protocol_name is None):
            return sync_response(SyncResult(error=E.INCONSISTENT_GROUP_PROTOCOL))
        error = self.partitions.error(self.partition_for(group_id))
        if error:
            return sync_response(SyncResult(error=error))
        group = self._groups.get(group_id) or self._consumer_groups.get(group_id)  # classic members may be in either
        if group is None:
            return sync_response(SyncResult(error=E.UNKNOWN_MEMBER_ID))
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
        return sync_response(await future)

    def heartbeat(self, req, version: int, ctx: RequestContext):
        group_id = req.group_id
        if not group_id:
            return m.HeartbeatResponse(throttle_time_ms=0, error_code=E.INVALID_GROUP_ID)
        partition = self.partition_for(group_id)
        partitions = self.partitions
        if partition not in partitions.loaded or time.monotonic() >= partitions.serving_deadline:  # (`serves`)
            error = partitions.error(partition)
            if error == E.COORDINATOR_LOAD_IN_PROGRESS:
                # Kafka: a member heartbeating while its coordinator loads is fine; it'll be there after.
                return m.HeartbeatResponse(throttle_time_ms=0, error_code=E.NONE)
            if error:
                return m.HeartbeatResponse(throttle_time_ms=0, error_code=error)
        shard = partitions.shards[partition]  # (served: its shard is there)
        group = shard.groups.get(group_id) or shard.consumer_groups.get(group_id)
        if group is None:
            return heartbeat_response(E.UNKNOWN_MEMBER_ID)
        error = self.runtime.heartbeat(group, req.member_id, req.group_instance_id if version >= 3 else None,
                                       req.generation_id)
        if self._heartbeats is not None:
            self._heartbeats["classic"].inc()
        return HEARTBEAT_ANSWERS.get(error) or heartbeat_response(error)  # (the usual answers: no call)

    async def leave_group(self, req, version: int, ctx: RequestContext):
        if version <= 2:
            identities = [(req.member_id, None, None)]
        else:
            identities = [(x.member_id, x.group_instance_id, x.reason if version >= 5 else None)
                          for x in req.members]
        top_error, member_errors = self._leave(req.group_id, identities)
        return leave_response(version, identities, top_error, member_errors)

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
            # Before v6 an unknown (or KIP-848) group is described as Dead; v6 says it is not found, and why.
            message = None
            if version >= 6:
                message = (f"Group {group_id} is not a classic group." if group_id in self._consumer_groups
                           else f"Group {group_id} not found.")
            return Described(error_code=E.GROUP_ID_NOT_FOUND if version >= 6 else E.NONE, error_message=message,
                             group_id=group_id, group_state=GroupState.DEAD.value, protocol_type="",
                             protocol_data="", members=[], authorized_operations=operations)
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

    async def delete_groups(self, req, version: int, ctx: RequestContext):
        names = list(dict.fromkeys(req.groups_names))  # duplicates removed, order kept
        results: dict[str | None, int] = {}
        by_partition: dict[int, list[tuple[ClassicGroup, list[Record]]]] = {}
        for group_id in names:
            if group_id is None:
                results[group_id] = E.INVALID_GROUP_ID
                continue
            if self.offsets.group_offset_count(group_id) > LARGE_REQUEST_PARTITIONS:
                await next_turn()  # a huge group's tombstones take a while: let others in first
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

        # One write per partition; once durable its tombstones are replayed (offsets, the group, the journal).
        return answer_when_all([self.partitions.write(partition, CoordinatorResult(
            [r for _, recs in entries for r in recs], self._groups_deleted, (entries, results)))
            for partition, entries in by_partition.items()], lambda: m.DeleteGroupsResponse(throttle_time_ms=0, results=[
                m.DeleteGroupsResponse.DeletableGroupResult(group_id=g if g is not None else "",
                                                            error_code=int(results[g]))
                for g in names]))

    def _groups_deleted(self, written: tuple, error: int) -> None:
        entries, results = written
        for group, _ in entries:
            results[group.group_id] = error
            if error:
                continue
            if isinstance(group, ConsumerGroup):  # (a classic group went with its tombstone's replay)
                self._drop_consumer_group(group)
            log.info("group %s: deleted", group.group_id)

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

    def replay_consumer_group_record(self, record: Record) -> None:
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
        classic = self._groups[group.group_id] = self.new_group(group.group_id)
        self.runtime.load(classic, record)
        self.runtime.load_completed(classic)
        log.info("group %s: consumer group converted back to a classic group (online downgrade)", group.group_id)

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
            return consumer_heartbeat_response(HeartbeatResult(exc.error, exc.message))
        error = self.partitions.error(self.partition_for(group_id))
        if error:
            return consumer_heartbeat_response(HeartbeatResult(error))
        group = self._consumer_groups.get(group_id)
        if group is None or group.state is ConsumerGroupState.DEAD:
            classic = self._groups.get(group_id)
            if classic is not None and classic.state is not GroupState.DEAD and (
                    classic.members or classic.state is not GroupState.EMPTY):
                if req.member_epoch != 0:
                    return consumer_heartbeat_response(missing_group_result(group_id))
                # Kafka's online upgrade: the classic members stay, inside a consumer group.
                try:
                    check_upgrade(classic, self.config.group_consumer_migration_policy,
                                  self.config.group_consumer_max_size)
                    records = upgrade_records(classic, self._topic_image())
                except UpgradeRefused as refused:
                    log.info("group %s: not converted to a consumer group: %s", group_id, refused)
                    return consumer_heartbeat_response(HeartbeatResult(
                        E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group."))
                self.drop_group(classic)
                group = self._consumer_groups[group_id] = self._new_consumer_group(group_id)
                self.runtime.submit(group, ConvertedFromClassic(records))
                log.info("group %s: classic group with %d members converted to a consumer group (online upgrade)",
                         group_id, len(classic.members))
            elif classic is not None and classic.state is not GroupState.DEAD:
                # An empty classic group (or a simple one, offsets only) becomes a consumer group; its
                # offsets stay. The tombstone goes first, so a reload sees the consumer group only.
                self._write_group(group_id, CoordinatorResult([GroupMetadataTombstone(group_id)],
                                                              self._group_written, group_id))
                self.drop_group(classic)
                log.info("group %s: empty classic group converted to a consumer group", group_id)
        if group is None or group.state is ConsumerGroupState.DEAD:
            if req.member_epoch != 0:
                return consumer_heartbeat_response(missing_group_result(group_id))
            group = self._consumer_groups[group_id] = self._new_consumer_group(group_id)
            log.info("group %s: consumer group created by member %s (client %s)", group_id, req.member_id,
                     ctx.client_id)
        if self._heartbeats is not None:
            self._heartbeats["consumer"].inc()
        answer = self.runtime.ask(group, lambda request_id: _with_request_id(event, request_id))
        if isinstance(answer, HeartbeatResult):
            return consumer_heartbeat_response(answer)
        return answer_when_done(answer, consumer_heartbeat_response)

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
            subscribed_topic_regex=member.subscribed_topic_regex or "",  # Kafka: "" for a member without one
            assignment=self._described_assignment(member.assigned),
            target_assignment=self._described_assignment(group.target_assignment.get(member.member_id, {})),
            member_type=CLASSIC_MEMBER_TYPE if member.uses_classic_protocol else CONSUMER_MEMBER_TYPE)
            for member in group.members.values()]
        # An empty group's (empty) target assignment is current at every epoch, as Kafka reports it.
        assignment_epoch = group.target_assignment_epoch if group.members else group.group_epoch
        return Described(error_code=E.NONE, group_id=group_id, group_state=group.state.value,
                         group_epoch=group.group_epoch, assignment_epoch=assignment_epoch,
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


def _is_tombstone(record) -> bool:
    return type(record).__name__.endswith("Tombstone")


def _with_request_id(event: ConsumerGroupHeartbeat, request_id: int) -> ConsumerGroupHeartbeat:
    event.request_id = request_id
    return event

