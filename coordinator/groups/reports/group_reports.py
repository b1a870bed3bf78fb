"""Operator reports: what the CLI (`cohort groups …`), the console and /metrics read about groups.

The rebalance and admin journal (`operator_journal`: written here, in the group's partition), the
offset history and an undo's plan (`offset_history`), health (`health`) and lag (`lag`), the console's
group list rows, and GroupReport (Cohort's private API 10000) that serves them as JSON. Everything
here only reads the coordinator's groups, offsets and log, except the journal's own records.
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Callable, Iterable

from cohort.coordinator.contracts.requests import GroupReportError, RequestContext
from cohort.coordinator.groups.classic.engine import ClassicGroup, GroupState
from cohort.coordinator.groups.consumer.engine import ConsumerGroup, ConsumerGroupState
from cohort.coordinator.groups.effects import RebalanceJournaled
from cohort.coordinator.groups.reports.health import GroupHealth, HealthMonitor
from cohort.coordinator.groups.reports.lag import LAG_HISTORY_INTERVAL_MS, LagHistory, LogEnds, group_lag, topic_lags, total_lag
from cohort.coordinator.groups.reports.history import CommitEvent, commit_events, group_key_prefixes, offsets_at
from cohort.coordinator.groups.offsets.table import OffsetsTable
from cohort.coordinator.groups.runtime.result import CoordinatorResult
from cohort.coordinator.groups.reports.journal import GroupJournal, JournalEntry, entry_from_record, rebalance_record_of
from cohort.coordinator.groups.slices import BACKGROUND_SLICE_S, JOURNAL_BUILD_OFF_LOOP, next_turn
from cohort.coordinator.records.types import GroupJournalRecord, encode_record
from cohort.protocol import messages as m
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.coordinator")
E = ErrorCode

# Health is sampled in the background (and for /metrics) only for groups with at most this many offsets:
# a sample walks them all on the event loop. Bigger groups are judged when asked (`describe --health`).
HEALTH_SAMPLED_MAX_OFFSETS = 50_000


class GroupReports:
    """The operator journal, history, health and lag of the groups one coordinator serves."""

    def __init__(self, config, scheduler, store, offsets: OffsetsTable, partition_for: Callable[[str], int],
                 partition_error: Callable[[int], int], loaded: set[int], classic: dict[str, ClassicGroup],
                 consumer: dict[str, ConsumerGroup], write) -> None:
        """`loaded`, `classic` and `consumer` are the coordinator's own (read, never changed here);
        `write(partition, CoordinatorResult)` is the write gate the journal's records go through."""
        self.config = config
        self.scheduler = scheduler
        self._store = store
        self.offsets = offsets
        self.partition_for = partition_for
        self._partition_error = partition_error
        self._loaded = loaded
        self._classic = classic
        self._consumer = consumer
        self._write = write
        self.journal = GroupJournal(config.group_journal_max_entries)
        self.health = HealthMonitor(config.group_health_window_commits, config.group_health_window_min_distance_ms)
        self.log_ends = LogEnds()  # where partitions end (lag): the registry's reported ends, once wired in
        self.lag_history = LagHistory()
        self._journal_writes: set[asyncio.Task] = set()
        self._journal_tails: dict[str, asyncio.Task] = {}  # each group's last journal write
        self._health_timer = None
        self._lag_sampling: asyncio.Task | None = None
        self._lag_recorded_ms = -LAG_HISTORY_INTERVAL_MS  # when the lag history last took a sample
        self._stopped = False

    def forget(self, group_ids: Iterable[str]) -> None:
        """Groups this node no longer serves (deleted, or their partition lost)."""
        group_ids = list(group_ids)
        self.health.forget(group_ids)
        self.lag_history.forget(group_ids)

    def forget_partition(self, partition: int) -> None:
        """Everything kept about the groups of a partition another node coordinates now."""
        self.journal.forget([g for g in self.journal.groups() if self.partition_for(g) == partition])
        self.health.forget([g for g in self.health.groups() if self.partition_for(g) == partition])
        self.lag_history.forget([g for g in self.lag_history.groups() if self.partition_for(g) == partition])

    def shutdown(self) -> None:
        self._stopped = True
        if self._health_timer is not None:
            self._health_timer.cancel()
            self._health_timer = None
        if self._lag_sampling is not None:
            self._lag_sampling.cancel()

    # =========================================================================================
    # The operator journal (rebalances, admin actions)
    # =========================================================================================
    def journal_rebalance(self, effect: RebalanceJournaled) -> None:
        """Persist a finished rebalance's entry; the rebalance itself never waits for it.

        A big group's entry (10 000 members: every assignment decoded twice for the partition moves, then
        encoded) is built on a worker thread, so other clients' requests go on meanwhile; a group's entries
        are still appended in the order they were claimed."""
        group_id = effect.group_id
        sequence, slot = self.journal.claim(group_id)
        partition = self.partition_for(group_id)
        previous = self._journal_tails.get(group_id)
        loop = asyncio.get_running_loop()

        async def write() -> None:
            try:
                if len(effect.members) + len(effect.assignments_after) < JOURNAL_BUILD_OFF_LOOP:
                    built = _built_journal_entry(effect, sequence, slot)
                else:
                    built = await loop.run_in_executor(None, _built_journal_entry, effect, sequence, slot)
            except (ValueError, TypeError) as exc:
                log.error("group %s: cannot encode its journal entry: %s", group_id, exc)
                return
            record, encoded, entry = built
            if previous is not None and not previous.done():
                await asyncio.wait([previous])
            self._write(partition, CoordinatorResult([encoded], self._journaled, (partition, record, entry), encoded=True))

        task = loop.create_task(write())
        self._journal_writes.add(task)
        self._journal_tails[group_id] = task
        task.add_done_callback(functools.partial(self._journal_write_done, group_id))

    def _journaled(self, written: tuple, error: int) -> None:
        partition, record, entry = written
        if error == E.NONE and partition in self._loaded:  # (not when the partition was lost meanwhile)
            self.journal.apply(record, entry)

    def _journal_write_done(self, group_id: str, task: asyncio.Task) -> None:
        self._journal_writes.discard(task)
        if self._journal_tails.get(group_id) is task:
            del self._journal_tails[group_id]

    def admin_record(self, group_id: str, action: str, ctx: RequestContext, changes: Iterable[str]
                      ) -> GroupJournalRecord:
        """The journal entry of an admin action, written in the same append as the action's records."""
        group = self._classic.get(group_id)
        consumer_group = self._consumer.get(group_id) if group is None else None
        if group is not None:
            group_type, epoch, state = "classic", group.generation_id, group.state.value
        elif consumer_group is not None:
            group_type, epoch, state = "consumer", consumer_group.group_epoch, consumer_group.state.value
        else:
            group_type, epoch, state = "classic", -1, GroupState.DEAD.value
        return self.journal.admin_record(
            group_id, action, now_ms=self.scheduler.now_ms(), principal=ctx.principal, client_id=ctx.client_id,
            client_host=ctx.client_host, group_type=group_type, epoch=epoch, state=state, changes=changes)

    def rebalance_journal(self, group_id: str, since_ms: int | None = None) -> list[JournalEntry]:
        """The group's journal (rebalances and admin actions) ending at or after `since_ms`, oldest first.

        Raises `GroupReportError` when this node does not serve the group's partition now."""
        self._check_served(group_id)
        return self.journal.entries(group_id, since_ms)

    # =========================================================================================
    # Offset history, offsets at a past time, health (the read API of the CLI and the console)
    # =========================================================================================
    async def offset_history(self, group_id: str, topic: str | None = None, partition: int | None = None,
                             since_ms: int | None = None) -> list[CommitEvent]:
        """The group's commits (and offset deletions) the log still holds, oldest first: every one within
        `offsets.history.retention.ms`, then the latest per partition. Raises `GroupReportError`."""
        self._check_served(group_id)
        history = getattr(self._store, "history", None)
        if history is None:
            raise GroupReportError(E.INVALID_REQUEST, "offset history is kept by the local log only: in cluster "
                                   "mode etcd holds the latest offset of each partition and nothing older")
        try:
            records = await history(self.partition_for(group_id), group_key_prefixes(group_id))
        except (OSError, TimeoutError) as exc:
            raise GroupReportError(E.UNKNOWN_SERVER_ERROR, f"cannot read the offset history: {exc}") from None
        return commit_events(group_id, records, topic=topic, partition=partition, since_ms=since_ms)

    async def reset_plan_to_commit_at(self, group_id: str, when_ms: int) -> dict[tuple[str, int], int | None]:
        """What the group had committed at `when_ms`, per partition it has had an offset for (None: it had
        none then): the plan of an undo (`reset-offsets --to-commit-at`)."""
        return offsets_at(await self.offset_history(group_id), when_ms)

    def group_health(self, group_id: str, topic_visible: Callable[[str], bool] | None = None) -> GroupHealth:
        """The group's health now (see `group_health`), judged over the partitions of the topics
        `topic_visible` admits (None: all); raises `GroupReportError`."""
        self._check_served(group_id)
        if not self._group_exists(group_id):
            raise _group_not_found(group_id)
        offsets = self._health_offsets(group_id)
        now = self.scheduler.now_ms()
        self._sample_health(group_id, offsets, now)  # every partition: the samples are the group's, not the asker's
        if topic_visible is not None:
            offsets = [o for o in offsets if topic_visible(o[0])]
        group_type, members = self._members_for_health(group_id)
        return self.health.evaluate(group_id, offsets, members, now, self.log_ends.end_offset, group_type)

    def _members_for_health(self, group_id: str) -> tuple[str, list[tuple[str, str, str, float | None]]]:
        """The group's type and its members as (member id, client id, host, ms since its last heartbeat),
        classic and KIP-848 consumer groups alike."""
        monotonic = self.scheduler.monotonic_ms()
        group = self._classic.get(group_id)
        if group is not None and group.state is not GroupState.DEAD:
            members = []
            for mem in group.members.values():
                deadline = group.session_deadline_ms(mem.member_id)
                age = None if deadline is None else max(0.0, mem.session_timeout_ms - (deadline - monotonic))
                members.append((mem.member_id, mem.client_id, mem.client_host, age))
            return "classic", members
        consumer_group = self._consumer.get(group_id)
        if consumer_group is not None and consumer_group.state is not ConsumerGroupState.DEAD:
            members = []
            for mem in consumer_group.members.values():
                deadline = consumer_group.session_deadline_ms(mem.member_id)
                timeout = consumer_group.session_timeout_for(mem.member_id)
                age = None if deadline is None else max(0.0, timeout - (deadline - monotonic))
                members.append((mem.member_id, mem.client_id, mem.client_host, age))
            return "consumer", members
        return "classic", []

    def group_lag(self, group_id: str, since_ms: int | None = None,
                  topic_visible: Callable[[str], bool] | None = None) -> dict:
        """GroupReport's "lag": each committed partition's reported end and lag (`lag.group_lag`: None where no
        end was reported), the total, and the total as sampled since `since_ms`, over the topics
        `topic_visible` admits (None: all; the sampled totals are left out when it hides some, as they
        counted them); raises `GroupReportError`."""
        self._check_served(group_id)
        if not self._group_exists(group_id):
            raise _group_not_found(group_id)
        offsets = [(topic, p, om.offset) for topic, parts in self.offsets.group_offsets(group_id).items()
                   for p, om in parts.items()]
        shown = offsets if topic_visible is None else [o for o in offsets if topic_visible(o[0])]
        samples = [] if len(shown) < len(offsets) else [
            [ms, lag] for ms, lag in self.lag_history.of(group_id) if since_ms is None or ms >= since_ms]
        return {"group": group_id, "now_ms": self.scheduler.now_ms(),
                **group_lag(shown, self.log_ends.reported_end), "samples": samples}

    def _health_offsets(self, group_id: str) -> list[tuple[str, int, int, int]]:
        return [(topic, p, om.offset, om.commit_timestamp)
                for topic, parts in self.offsets.group_offsets(group_id).items() for p, om in parts.items()]

    def _sample_health(self, group_id: str, offsets: list, now: int) -> None:
        def admin_reset_since(since_ms: int) -> bool:
            return any(e.kind == "admin" and e.trigger == "reset_offsets" for e in self.journal.entries(group_id, since_ms))
        self.health.sample(group_id, offsets, now, admin_reset_since, self.log_ends.end_offset)

    def start_health_sampling(self) -> None:
        """Sample every group's commits every `group.health.window.min.distance.ms` (idempotent), so a
        window fills and a stop is seen even when nobody asks in between."""
        if self._stopped or self._health_timer is not None:
            return
        self._health_timer = self.scheduler.call_later(self.config.group_health_window_min_distance_ms,
                                                       self._health_due)

    def _health_due(self) -> None:
        self._health_timer = None
        if self._stopped:
            return
        if self._lag_sampling is None:
            self._lag_sampling = asyncio.get_running_loop().create_task(self._sample_groups(self.scheduler.now_ms()))
        self.start_health_sampling()

    async def _sample_groups(self, now: int) -> None:
        """Every group's commits into its health windows and its total lag into its history (classic, KIP-848
        and groups that only commit alike), BACKGROUND_SLICE_S of the loop's time per turn at most (a walk
        over every committed offset in one turn would hold up everyone's requests)."""
        # the lag history: every 15 s (an hour in its 240 samples), or every third health sample when closer
        record_lag = now - self._lag_recorded_ms >= min(LAG_HISTORY_INTERVAL_MS,
                                                        3 * self.config.group_health_window_min_distance_ms)
        if record_lag:
            self._lag_recorded_ms = now
        try:
            until = time.perf_counter() + BACKGROUND_SLICE_S
            for group_id in self.offsets.groups():
                if time.perf_counter() > until:
                    await next_turn()
                    until = time.perf_counter() + BACKGROUND_SLICE_S
                if self.partition_for(group_id) in self._loaded \
                        and self.offsets.group_offset_count(group_id) <= HEALTH_SAMPLED_MAX_OFFSETS:
                    self._sample_health(group_id, self._health_offsets(group_id), now)
                    if record_lag:
                        self.lag_history.record(group_id, now, self.group_lag_by_topic(group_id)[0])
            self.lag_history.forget(set(self.lag_history.groups()).difference(self.offsets.groups()))
        finally:
            self._lag_sampling = None

    def group_lag_by_topic(self, group_id: str) -> tuple[int | None, dict[str, tuple[int, int | None]]]:
        """The group's total lag and, per topic it has offsets for, (partitions, lag); None = unknown."""
        by_topic = topic_lags(((topic, p, om.offset) for topic, parts in self.offsets.group_offsets(group_id).items()
                               for p, om in parts.items()), self.log_ends)
        return total_lag(lag for _, lag in by_topic.values()), by_topic

    def served_group_ids(self) -> list[str]:
        """Every group this node coordinates now (loaded partitions): with members, or committed offsets."""
        ids = {g for g, group in self._classic.items() if group.state is not GroupState.DEAD}
        ids.update(g for g, group in self._consumer.items() if group.state is not ConsumerGroupState.DEAD)
        ids.update(self.offsets.groups())
        return [g for g in ids if self.partition_for(g) in self._loaded]

    def watch_new_groups(self, listener: Callable[[str], None]) -> None:
        """Call `listener(group_id)` whenever a group is stored or gets its first offset."""
        for groups in (self._classic, self._consumer):
            if hasattr(groups, "listener"):
                groups.listener = listener
        self.offsets.watch_new_groups(listener)

    def known_group_ids(self) -> set[str]:
        """Every group id held in memory (loaded or not, DEAD included): what the overview's index covers."""
        return {*self._classic, *self._consumer, *self.offsets.groups()}

    def known_group_count(self) -> int:
        """At least the number of `known_group_ids` (an id may be counted twice), in O(1)."""
        return len(self._classic) + len(self._consumer) + self.offsets.group_count()

    def is_known_group(self, group_id: str) -> bool:
        return group_id in self._classic or group_id in self._consumer or self.offsets.has_offsets(group_id)

    def group_summary(self, group_id: str, topic_visible: Callable[[str], bool] | None = None) -> dict | None:
        """One row of the console's group list, from memory (None: not a group here now); its offsets, health
        and lag over the topics `topic_visible` admits (None: all), as the group's reports narrow them."""
        if self.partition_for(group_id) not in self._loaded:
            return None
        group = self._classic.get(group_id)
        consumer_group = self._consumer.get(group_id) if group is None else None
        if group is not None and group.state is not GroupState.DEAD:
            state, kind, protocol_type, members = group.state.value, "classic", group.protocol_type or "", len(group.members)
            protocol = (group.protocol_name or "") if group.state is GroupState.STABLE else ""
        elif consumer_group is not None and consumer_group.state is not ConsumerGroupState.DEAD:
            state, kind, protocol_type = consumer_group.state.value, "consumer", "consumer"
            members, protocol = len(consumer_group.members), consumer_group.preferred_assignor()  # its server assignor
        elif self.offsets.has_offsets(group_id):
            state, kind, protocol_type, members, protocol = GroupState.EMPTY.value, "classic", "", 0, ""
        else:
            return None
        offset_count = self.offsets.group_offset_count(group_id)
        health = None
        if offset_count <= HEALTH_SAMPLED_MAX_OFFSETS:  # as the group's health report says (bigger: when asked)
            try:
                health = self.group_health(group_id, topic_visible).status
            except GroupReportError:
                health = None
        lag, by_topic = self.group_lag_by_topic(group_id)
        if topic_visible is not None:
            by_topic = {t: entry for t, entry in by_topic.items() if topic_visible(t)}
            lag = total_lag(topic_lag for _, topic_lag in by_topic.values())
            offset_count = sum(n for n, _ in by_topic.values())
        return {"group_id": group_id, "state": state, "type": kind, "protocol_type": protocol_type,
                "protocol": protocol, "members": members, "health": health, "lag": lag, "offsets": offset_count,
                "topics": [{"topic": t, "partitions": n, "lag": topic_lag} for t, (n, topic_lag) in sorted(by_topic.items())]}

    def health_of_groups(self, limit: int = 10_000) -> list[GroupHealth]:
        """Every served group's health (at most `limit` groups: the metrics' label budget; groups with more
        than HEALTH_SAMPLED_MAX_OFFSETS offsets only when asked one by one)."""
        out = []
        for group_id in sorted(self.served_group_ids())[:limit]:
            if self.offsets.group_offset_count(group_id) > HEALTH_SAMPLED_MAX_OFFSETS:
                continue
            try:
                out.append(self.group_health(group_id))
            except GroupReportError:
                continue
        return out

    async def group_report(self, req, version: int, ctx: RequestContext):
        """GroupReport (Cohort's private API 10000): the read API above as JSON, for `cohort groups …`."""
        group_id = req.group_id
        visible = ctx.topic_visible
        try:
            if visible is not None and req.topic is not None and not visible(req.topic):
                raise GroupReportError(E.TOPIC_AUTHORIZATION_FAILED, "not authorized to describe that topic")
            if req.report == "rebalances":
                self._check_served(group_id)
                entries = self.journal.entries(group_id, req.since_ms if req.since_ms >= 0 else None)
                if not entries and not self._group_exists(group_id) and not self.journal.entries(group_id):
                    raise _group_not_found(group_id)
                document: object = [e.to_json(visible) for e in entries]
            elif req.report == "history":
                events = await self.offset_history(group_id, req.topic, req.partition if req.partition >= 0 else None,
                                                   req.since_ms if req.since_ms >= 0 else None)
                if not events and not self._group_exists(group_id) and not await self.offset_history(group_id):
                    raise _group_not_found(group_id)
                document = [e.to_json() for e in events if visible is None or visible(e.topic)]
            elif req.report == "health":
                document = self.group_health(group_id, visible).to_json()
            elif req.report == "lag":
                document = self.group_lag(group_id, req.since_ms if req.since_ms >= 0 else None, visible)
            elif req.report == "offsets-at":
                if req.at_ms < 0:
                    raise GroupReportError(E.INVALID_REQUEST, "offsets-at needs at_ms")
                events = await self.offset_history(group_id)
                if visible is not None:
                    events = [e for e in events if visible(e.topic)]
                plan = offsets_at(events, req.at_ms)
                document = {"at_ms": req.at_ms, "history_from_ms": events[0].time_ms if events else None,
                            "history_retention_ms": self.config.offsets_history_retention_ms,
                            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(plan.items())]}
            else:
                raise GroupReportError(E.INVALID_REQUEST, f"unknown report {req.report!r}")
        except GroupReportError as exc:
            return m.GroupReportResponse(error_code=exc.error_code, error_message=str(exc), report=b"")
        return m.GroupReportResponse(error_code=0, error_message=None, report=json.dumps(document).encode())

    def _group_exists(self, group_id: str) -> bool:
        """A live classic or consumer group, or committed offsets under its id (as Kafka's tool sees a group)."""
        group = self._classic.get(group_id)
        consumer_group = self._consumer.get(group_id)
        return ((group is not None and group.state is not GroupState.DEAD)
                or (consumer_group is not None and consumer_group.state is not ConsumerGroupState.DEAD)
                or self.offsets.has_offsets(group_id))

    def _check_served(self, group_id: str) -> None:
        error = E.INVALID_GROUP_ID if not group_id else self._partition_error(self.partition_for(group_id))
        if error:
            raise GroupReportError(int(error), f"group {group_id!r}: {ErrorCode(error).name}")


def _group_not_found(group_id: str) -> GroupReportError:
    """GROUP_ID_NOT_FOUND worded as kafka-consumer-groups.sh words it (the CLI and console show it as is)."""
    return GroupReportError(E.GROUP_ID_NOT_FOUND, f"Consumer group '{group_id}' does not exist.")


def _built_journal_entry(effect: RebalanceJournaled, sequence: int, slot: int
                         ) -> tuple[GroupJournalRecord, tuple[bytes, bytes | None], JournalEntry]:
    """A claimed journal entry as its record, that record encoded, and the entry the journal serves."""
    record = rebalance_record_of(effect, sequence, slot)
    return record, encode_record(record), entry_from_record(record)
