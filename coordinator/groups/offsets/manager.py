"""`OffsetsManager`: committed offsets (Kafka's `OffsetMetadataManager`).

OffsetCommit (validated against the group, its records appended by the partition runtime and applied
and answered once durable), OffsetFetch (at once from the `OffsetsTable`, or behind this partition's
writes in flight with RequireStable), OffsetDelete, the high watermarks ListOffsets/Fetch report for
record-less logs, KIP-211 expiry every `offsets.retention.check.interval.ms`, and the console's undo
(`reset_offsets`, an admin commit). A request over LARGE_REQUEST_PARTITIONS partitions is built a
slice at a time and its answer encoded off the loop.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from cohort.coordinator.contracts.answers import PendingAnswer, answer_of, encode_off_loop
from cohort.coordinator.contracts.requests import RequestContext
from cohort.coordinator.groups.classic.engine import ClassicGroup, GroupState
from cohort.coordinator.groups.consumer.engine import ConsumerGroup
from cohort.coordinator.groups.offsets.table import OffsetsTable
from cohort.coordinator.groups.runtime.partition import PartitionRuntime
from cohort.coordinator.groups.runtime.result import CoordinatorResult
from cohort.coordinator.groups.reports.group_reports import GroupReports
from cohort.coordinator.groups.responses import (
    METADATA_TOO_LARGE,
    CommitAnswer,
    CommitResponse,
    CommitTopicAnswer,
    FetchAnswer,
    FetchTopicAnswer,
    commit_error_response,
    commit_failed_response,
    fetch_refused_response,
    metadata_too_large,
)
from cohort.coordinator.groups.slices import LARGE_REQUEST_PARTITIONS, PARTITIONS_PER_SLICE, next_turn
from cohort.coordinator.records.types import (
    GroupMetadataTombstone,
    OffsetCommitRecord,
    OffsetCommitSourceRecord,
    OffsetCommitTombstone,
    Record,
    encode_offset_commit,
    encode_record,
)
from cohort.protocol import messages as m
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.coordinator")
E = ErrorCode
_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)
_ADMIN_COMMIT_VERSION = 8  # what `reset_offsets` speaks: generation -1 and no member, as kafka-consumer-groups.sh


class _Commit(CoordinatorResult):
    """One OffsetCommit on its way: the `CoordinatorResult` it hands the write gate (its records, encoded,
    and `then`: apply once durable and answer, with the commit as state) and what that needs."""

    __slots__ = ("req", "version", "group_id", "partition", "created", "now", "expire", "commits",
                 "answers", "error", "member_id", "generation", "ctx", "admin_reset", "journaled")

    def __init__(self, req, version: int, group_id: str, partition: int, created, now: int, expire: int,
                 member_id: str, generation: int, ctx: RequestContext, admin_reset: bool) -> None:
        # (CoordinatorResult's fields set here, not through its __init__: one call less per commit)
        self.records: list[tuple[bytes, bytes]] = []
        self.then = None  # the manager's `_commit_answer`, once the records are made
        self.state = None  # (`then` is given the result itself: no reference cycle per commit)
        self.encoded = True
        self.replay = False  # `_commit_answer` applies the offsets (column-wise), nothing else to replay
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
        self.commits: list[tuple] = []
        self.answers: list = []
        self.error = E.NONE


def _request_partitions(topics, field: str) -> int:
    """How many partitions a request's topic list names (0 for None: "all of them")."""
    count = 0  # (a loop: a generator expression costs a frame of its own on every fetch and commit)
    for t in topics or ():
        count += len(getattr(t, field))
    return count


class OffsetsManager:
    """The committed offsets of one coordinator node and the offset APIs."""

    __slots__ = ("config", "scheduler", "metrics", "partitions", "partition_for", "offsets", "reports",
                 "_group_manager", "_groups", "_consumer_groups", "_loaded", "_keeps_history", "_commit_sources",
                 "_high_watermarks", "_retention_timer", "_retention_task")

    def __init__(self, config, scheduler, metrics, store, partitions: PartitionRuntime, partition_for,
                 offsets: OffsetsTable, reports: GroupReports, group_manager,
                 classic: dict[str, ClassicGroup], consumer: dict[str, ConsumerGroup]) -> None:
        self.config = config
        self.scheduler = scheduler
        self.metrics = metrics
        self.partitions = partitions
        self.partition_for = partition_for
        self.offsets = offsets
        self.reports = reports
        self._group_manager = group_manager
        self._groups = classic
        self._consumer_groups = consumer
        self._loaded = partitions.loaded
        # Commit sources are written only where a history can be read back (the local log, not etcd).
        self._keeps_history = config.offsets_history_retention_ms > 0 and hasattr(store, "history")
        # group -> the (member, generation, client, host) of its last commit-source record in the log
        self._commit_sources: dict[str, tuple[str, int, str, str]] = {}
        self._high_watermarks: dict[str, dict[int, int]] = {}
        self._retention_timer = None
        self._retention_task: asyncio.Task | None = None

    # -- replay ---------------------------------------------------------------------------------
    def forget_partition(self, partition: int) -> None:
        """What this manager keeps of a partition no longer served here (its offsets went with its shard)."""
        for group_id in [g for g in self._commit_sources if self.partition_for(g) == partition]:
            del self._commit_sources[group_id]

    def shutdown(self) -> None:
        if self._retention_timer is not None:
            self._retention_timer.cancel()
            self._retention_timer = None
        if self._retention_task is not None:
            self._retention_task.cancel()

    def apply_commit(self, table: OffsetsTable, rec: OffsetCommitRecord) -> None:
        """A commit record replayed into `table`, its shard's."""
        self._apply_commits(table, rec.group, ((rec.topic, rec.partition, rec.offset, rec.leader_epoch, rec.metadata,
                                                rec.commit_timestamp),), rec.expire_timestamp)

    def _apply_commits(self, table: OffsetsTable, group_id: str, commits, expire_timestamp: int) -> None:
        """`group_id`'s durable commits, (topic, partition, offset, leader epoch, metadata, commit time) each,
        into `table` and the high watermarks."""
        put = table.put_fields
        high_watermarks = self._high_watermarks
        for topic, partition, offset, leader_epoch, metadata, commit_timestamp in commits:
            put(group_id, topic, partition, offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)
            if offset >= 0:
                by_partition = high_watermarks.get(topic)
                if by_partition is None:
                    by_partition = high_watermarks[topic] = {}
                if offset > by_partition.get(partition, 0):
                    by_partition[partition] = offset

    def raise_high_watermarks(self, topic: str, partitions: Iterable[int], offsets: Iterable[int]) -> None:
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

    def offset_commit(self, req, version: int, ctx: RequestContext):
        """The OffsetCommit answer: at once when refused, else the `PendingAnswer` of its append.

        A commit of more partitions than a slice answers a `PendingAnswer` of a task that builds its
        records a slice at a time so other connections are served in between.
        """
        group_id = req.group_id
        generation = req.generation_id_or_member_epoch if version >= 1 else -1
        member_id = req.member_id if version >= 1 else ""
        instance_id = req.group_instance_id if version >= 7 else None
        created: ClassicGroup | None = None
        if group_id is None:
            return commit_error_response(req, E.INVALID_GROUP_ID)
        partition = self.partition_for(group_id)
        partitions = self.partitions
        if partition not in partitions.loaded or time.monotonic() >= partitions.serving_deadline:  # (`serves`)
            error = partitions.error(partition)
            if error:
                return commit_error_response(req, error)
        shard = partitions.shards[partition]  # (served: its shard is there)
        consumer_group = shard.consumer_groups.get(group_id)
        group = shard.groups.get(group_id)
        if consumer_group is not None:
            error = consumer_group.validate_offset_commit(member_id, instance_id, generation, version)
            if error:
                return commit_error_response(req, error)
        elif group is None:
            if generation >= 0:
                return commit_error_response(req, E.GROUP_ID_NOT_FOUND if version >= 9 else E.ILLEGAL_GENERATION)
            # A standalone consumer or admin tool: a "simple" group exists through its offsets.
            log.info("group %s: simple group created by a manual offset commit", group_id)
            group = created = self._group_manager.simple_group(group_id)
        else:
            error = group.validate_offset_commit(member_id, instance_id, generation)
            if error:
                return commit_error_response(req, error)
        if group is not None and member_id:  # a standalone consumer's or admin tool's commit keeps no session alive
            self._group_manager.runtime.offset_committed(group, member_id)
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
        count = 0  # (`_request_partitions`, inline: a call less per commit)
        for topic in topics:
            count += len(topic.partitions)
        if count > PARTITIONS_PER_SLICE:
            return answer_of(self._offset_commit_in_slices(commit))
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
                for start in range(0, max(len(partitions), 1), PARTITIONS_PER_SLICE):  # (a topic of none answers too)
                    parts = self._build_partitions(commit, topic.name, partitions[start:start + PARTITIONS_PER_SLICE],
                                                   parts)
                    await next_turn()
        except (ValueError, TypeError) as exc:
            self._unencodable(commit, exc)
        return self._append_commit(commit)  # (a `PendingAnswer` settles this request's once settled itself)

    def _build_partitions(self, commit: "_Commit", name: str, partitions, parts: list | None = None) -> list:
        """Add the log records of `partitions` (of topic `name`) to `commit`, what to apply once they are
        durable, and their answers (accepted ones answer NONE unless the write fails): to `parts`, the
        topic's answer list already in `commit.answers`, or to a new topic answer, whose list is returned."""
        if parts is None:
            parts = []
            commit.answers.append(CommitTopicAnswer(name, parts))  # name, partitions
        version, group_id, now, expire = commit.version, commit.group_id, commit.now, commit.expire
        max_metadata = self.config.offset_metadata_max_bytes
        with_epoch = version >= 6
        encoded, commits = commit.records, commit.commits
        for p in partitions:
            metadata = p.committed_metadata
            if metadata is None:
                metadata = ""
            elif metadata and metadata_too_large(metadata, max_metadata):  # (most commits carry none)
                parts.append(CommitAnswer(partition_index=p.partition_index, error_code=METADATA_TOO_LARGE))
                continue
            commit_ts = p.commit_timestamp if version == 1 and p.commit_timestamp != -1 else now
            leader_epoch = p.committed_leader_epoch if with_epoch else -1
            offset = p.committed_offset
            index = p.partition_index
            encoded.append(encode_offset_commit(group_id, name, index, offset, leader_epoch, metadata, commit_ts,
                                                expire))
            commits.append((name, index, offset, leader_epoch, metadata, commit_ts))
            parts.append(CommitAnswer(index, 0))  # partition_index, error_code (see CommitAnswer)
        return parts

    @staticmethod
    def _unencodable(commit: "_Commit", exc: Exception) -> None:
        log.error("cannot encode records for offsets partition %d: %s", commit.partition, exc)
        commit.error = E.UNKNOWN_SERVER_ERROR

    def _append_commit(self, commit: "_Commit"):
        """The answer once the commit's records are durable (at once if there are none to write)."""
        if commit.error or not commit.records:
            return self._commit_answer(commit, E.NONE)
        if commit.admin_reset:
            commit.journaled = self.reports.admin_record(commit.group_id, "reset_offsets", commit.ctx,
                                                  self._reset_changes(commit.group_id, commit.commits))
            commit.records.append(encode_record(commit.journaled))
        if self._keeps_history:
            # Who made these commits, for the offset history: written when a group's committer changes (a
            # source record per request cost a tenth of the commit rate); the history attributes a commit
            # to the last source before it in the log.
            source = (commit.member_id, commit.generation, commit.ctx.client_id, commit.ctx.client_host)
            if self._commit_sources.get(commit.group_id) != source:
                self._commit_sources[commit.group_id] = source
                commit.records.insert(0, encode_record(OffsetCommitSourceRecord(
                    commit.group_id, *source, commit.now)))
        commit.then = self._commit_answer
        return self.partitions.write(commit.partition, commit)

    def _commit_answer(self, commit: "_Commit", write_error: int):
        """Apply a durable commit and answer it, or answer why it failed (`write_error`: its append's)."""
        group_id = commit.group_id
        error = commit.error
        if write_error:
            self._commit_sources.pop(group_id, None)  # its source record may not be in the log
            error = write_error
        if not error and commit.journaled is not None:
            self.reports.journal.apply(commit.journaled)  # (the commit's records are encoded: this one replays here)
        if error:
            created = commit.created
            if created is not None and self._groups.get(group_id) is created and created.state is GroupState.EMPTY \
                    and not self.offsets.has_offsets(group_id) and not created.members:
                self._group_manager.drop_group(created)
            return commit_failed_response(commit.req, error, self.config.offset_metadata_max_bytes)
        commits = commit.commits
        if commits:
            shard = self.partitions.shards[commit.partition]  # (durable with no error: its shard is there)
            if group_id not in shard.groups and group_id not in shard.consumer_groups:
                # The group was deleted while we wrote: the offsets still exist, so does a simple group.
                self._group_manager.simple_group(group_id)
            self._apply_commits(shard.offsets, group_id, commits, commit.expire)
            if commit.member_id:  # (a standalone commit has no member to keep track of)
                self.reports.health.member_committed(group_id, commit.member_id, commit.now)
            if self.metrics is not None:
                self.metrics.offsets_committed(len(commits))
        if len(commits) > LARGE_REQUEST_PARTITIONS:
            return encode_off_loop(CommitResponse(0, commit.answers))
        return CommitResponse(0, commit.answers)  # throttle_time_ms, topics

    def _reset_changes(self, group_id: str, commits: list[tuple]) -> list[str]:
        """What an admin reset changes, per partition: "topic:partition old->new"."""
        changes = []
        for name, index, offset, *_ in commits:
            old = self.offsets.get(group_id, name, index)
            changes.append(f"{name}:{index} {old.offset if old is not None else '-'}->{offset}")
        return changes

    def offset_fetch(self, req, version: int, ctx: RequestContext):
        """The OffsetFetch answer, at once; or, when it must wait (RequireStable behind this
        partition's writes in flight) or is huge (built in slices), a `PendingAnswer`.

        Nearly every fetch answers at once, and an answer made without a coroutine costs the
        server no task: that is most of a fetch's cost on Python 3.11.
        """
        if version < 8:  # one group (every client before Kafka 3.0's): its checks made once, in one frame
            group_id = req.group_id
            topics = req.topics
            if group_id is not None:
                # The usual fetch, its checks inline (each call it saves is a few % of a fetch's CPU): a
                # served partition, no RequireStable wait, not built in slices.
                partition = self.partition_for(group_id)
                partitions = self.partitions
                if partition in partitions.loaded and time.monotonic() < partitions.serving_deadline \
                        and not (version >= 7 and req.require_stable and partitions.writes_pending(partition)):
                    table = partitions.shards[partition].offsets
                    if (table.group_offset_count(group_id) if topics is None  # (null: every committed topic)
                            else _request_partitions(topics, "partition_indexes")) <= LARGE_REQUEST_PARTITIONS:
                        return m.OffsetFetchResponse(throttle_time_ms=0, error_code=0, topics=self._fetch_answers(
                            table, group_id, topics, FetchTopicAnswer, FetchAnswer))
            error = self._fetch_error(group_id)
            if not error and self._group_fetch_must_wait(group_id, req.topics, version >= 7 and req.require_stable):
                return answer_of(self._offset_fetch_waiting(req, version))
            return self._group_fetch_response(req, version, error, None)
        if self._fetch_must_wait(req, version):
            return answer_of(self._offset_fetch_waiting(req, version))
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
            topic_cls, partition_cls = FetchTopicAnswer, FetchAnswer
        sliced: dict[str, list] = {}
        for group_id, topics in self._fetched_groups(req, version):
            if self._fetch_error(group_id):
                continue
            if require_stable:
                await self.partitions.wait_for_writes(self.partition_for(group_id))
            if self._is_large_fetch(group_id, topics):
                sliced[group_id] = await self._fetch_answers_in_slices(group_id, topics, topic_cls, partition_cls)
        response = self._offset_fetch_response(req, version, sliced)
        return encode_off_loop(response) if sliced else response

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
                    topics = self._fetch_answers(self._table(g.group_id), g.group_id, g.topics, Topic, Topic.OffsetFetchResponsePartitions)
                groups.append(Group(group_id=g.group_id, error_code=int(error), topics=topics))
            return m.OffsetFetchResponse(throttle_time_ms=0, groups=groups)
        return self._group_fetch_response(req, version, self._fetch_error(req.group_id), sliced.get(req.group_id))

    def _group_fetch_response(self, req, version: int, error: int, sliced: list | None):
        """The answer of a one-group fetch (v0-7) whose group error is `error` (`sliced`: a huge one's topics)."""
        if error:
            return fetch_refused_response(req, version, error)
        if sliced is not None:
            return m.OffsetFetchResponse(throttle_time_ms=0, error_code=0, topics=sliced)
        topics = self._fetch_answers(self._table(req.group_id), req.group_id, req.topics, FetchTopicAnswer, FetchAnswer)
        return m.OffsetFetchResponse(throttle_time_ms=0, error_code=0, topics=topics)

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
            for start in range(0, len(indexes), PARTITIONS_PER_SLICE):
                chunk = indexes[start:start + PARTITIONS_PER_SLICE]
                for p, c in zip(chunk, self.offsets.committed(group_id, name, chunk)):
                    partitions.append(partition_cls(p, -1, -1, "", 0) if c is None
                                      else partition_cls(p, c[0], c[1], c[2], 0))
                await next_turn()
            answers.append(topic_cls(name, partitions))
        return answers

    def _fetch_error(self, group_id) -> int:
        """Why the group's offsets cannot be read (NONE if they can)."""
        if group_id is None:
            return E.INVALID_GROUP_ID
        return self.partitions.error(self.partition_for(group_id))

    def _table(self, group_id: str) -> OffsetsTable:
        """The offsets table of a readable group's shard (its partition is served here)."""
        return self.partitions.shards[self.partition_for(group_id)].offsets

    def _fetch_answers(self, table: OffsetsTable, group_id: str, topics, topic_cls, partition_cls) -> list:
        """The response topics of a readable group (`table`: its shard's offsets): requested partitions
        (-1/"" where none is committed), or every committed one when `topics` is None."""
        if topics is None:
            return [topic_cls(name=name, partitions=[
                partition_cls(partition_index=p, committed_offset=o.offset, committed_leader_epoch=o.leader_epoch,
                              metadata=o.metadata, error_code=0)
                for p, o in sorted(parts.items())])
                for name, parts in table.group_offsets(group_id).items()]
        committed = table.committed
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

    def offset_delete(self, req, version: int, ctx: RequestContext):
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
        if not records:
            return _offsets_deleted(answers, E.NONE)
        # Once durable, the tombstones and the journal entry are replayed (the load's replay).
        entry = self.reports.admin_record(group_id, "delete_offsets", ctx, [f"{r.topic}:{r.partition}" for r in records])
        return self.partitions.write(self.partition_for(group_id), CoordinatorResult([*records, entry],
                                                                                     _offsets_deleted, answers))

    def start_retention(self) -> None:
        """Run offset expiry every `offsets.retention.check.interval.ms` until shutdown (idempotent);
        group health is sampled from then on too."""
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
        """One expiry pass: expired offsets and emptied Empty groups get tombstones, handed to the write gate
        (they are replayed, and so take effect, once durable). Returns how many."""
        now = self.scheduler.now_ms()
        retention_ms = self.config.offsets_retention_minutes * 60_000
        by_partition: dict[int, list[tuple[str, list[Record]]]] = {}
        checked = 0
        for group_id in list(dict.fromkeys([*self._groups, *self.offsets.groups()])):
            checked += self.offsets.group_offset_count(group_id) + 1
            if checked > PARTITIONS_PER_SLICE:  # a pass over 100 000 groups lets others in between slices
                checked = 0
                await next_turn()
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
                group = self._group_manager.simple_group(group_id)
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

        # Once durable, the tombstones are replayed (the load's replay): offsets, journals and emptied groups go.
        for partition, entries in by_partition.items():
            records = [r for _, recs in entries for r in recs]
            self.partitions.write(partition, CoordinatorResult(records, self._expired, (partition, len(records))))
            total += len(records)
        return total

    def _expired(self, written: tuple[int, int], error: int) -> None:
        partition, count = written
        if error:
            log.warning("offset expiry: could not write tombstones to partition %d: %s", partition, E(error).name)
            return
        log.info("offset expiry: wrote %d tombstones to partition %d", count, partition)
        if self.metrics is not None:
            self.metrics.offsets_expired(count)

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

    async def reset_offsets(self, group_id: str, offsets: dict[tuple[str, int], int], ctx: RequestContext
                            ) -> dict[tuple[str, int], int]:
        """Commit `offsets` as an admin tool does (no member, generation -1): the console's undo, with the
        same rules (the group must be inactive) and the same journal entry as a CLI reset by `ctx`'s principal.
        Returns each partition's Kafka error code (0 = committed)."""
        Topic = m.OffsetCommitRequest.OffsetCommitRequestTopic
        by_topic: dict[str, list] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(Topic.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=""))
        request = m.OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
                                        topics=[Topic(name=t, partitions=ps) for t, ps in by_topic.items()])
        answer = self.offset_commit(request, _ADMIN_COMMIT_VERSION, ctx)
        if type(answer) is PendingAnswer:
            await answer
            response = answer.response
        else:
            response = answer
        return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


def _offsets_deleted(answers: list[tuple[str, list[tuple[int, int]]]], error: int):
    """OffsetDelete's answer: each partition's outcome, or the write's error."""
    if error:
        return m.OffsetDeleteResponse(error_code=int(error), throttle_time_ms=0, topics=[])
    Topic = m.OffsetDeleteResponse.OffsetDeleteResponseTopic
    return m.OffsetDeleteResponse(error_code=0, throttle_time_ms=0, topics=[
        Topic(name=name, partitions=[Topic.OffsetDeleteResponsePartition(partition_index=p, error_code=int(e))
                                     for p, e in parts])
        for name, parts in answers])
