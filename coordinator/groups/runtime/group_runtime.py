"""The asyncio side of the group engines: parked requests, timers, appends, metrics.

The engines (`classic/engine.py`, `consumer/engine.py`) are pure; `GroupRuntime` is everything they are not. It turns a request
into an event (parking JoinGroup/SyncGroup as a future keyed by a request id), calls the group's
`handle(event, now)`, and executes the effects in order: answers resolve parked futures (many at
once go out at most ANSWERS_PER_TURN, and at most ANSWER_SLICE_S, per loop turn so other
connections are served in between), timers are
set through a `Scheduler` and fire back as `TimerFired`, appends go through the coordinator's write
gate as a `CoordinatorResult` and come back as `RecordsAppended`, metric entries reach `CoordinatorMetrics` and journal entries the coordinator's journal.
Every event of a group is handled on the loop thread, one at a time: the group has one owner.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Hashable
from functools import partial

from cohort.coordinator.groups.classic.engine import (
    ClassicGroup,
    Deleted,
    Heartbeat,
    JoinAnswered,
    JoinGroup,
    JoinRequest,
    LeaveGroup,
    LoadCompleted,
    MetadataLoaded,
    OffsetCommitted,
    SyncGroup,
    Unloaded,
)
from cohort.coordinator.groups.consumer.engine import ConsumerGroupState, ConvertedToClassic, Step as ConsumerStep
from cohort.coordinator.contracts.answers import PendingAnswer
from cohort.coordinator.groups.runtime.result import CoordinatorResult
from cohort.coordinator.groups.runtime.scheduler import Scheduler, TimerHandle
from cohort.coordinator.groups.effects import (
    Answer,
    AnswerAll,
    AppendRecords,
    CancelAllTimers,
    CancelTimer,
    MemberExpired,
    RebalanceCompleted,
    RebalanceJournaled,
    RecordsAppended,
    Reply,
    SetTimer,
    StateChanged,
    TimerFired,
)
from cohort.coordinator.records.types import GroupMetadataRecord
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.group")

# Each answered handler's rest (building, encoding and writing its response: ~80 us for a SyncGroup)
# runs in the next turn: 64 of them keep that turn near 5 ms (256 made it 20-40 ms).
ANSWERS_PER_TURN = 64
# ...and answering stops for the turn once this much of it is spent (the answered handlers' own
# work, encoding and writing, comes in the next turn and costs a few times more).
ANSWER_SLICE_S = 0.001
_ANSWERS_PER_CHECK = 16


# ---------------------------------------------------------------------------------------------
# The runtime
# ---------------------------------------------------------------------------------------------
WriteResult = Callable[[str, CoordinatorResult], PendingAnswer]
"""The coordinator's write gate for a group's records (`PartitionRuntime.write` on the group's offsets
partition): started now, so a group's appends keep the order they were asked in."""


class _Host:
    """What the runtime holds for one group: its armed timers and its appends in flight."""

    __slots__ = ("timers", "writes")

    def __init__(self) -> None:
        self.timers: dict[Hashable, TimerHandle] = {}
        self.writes = 0


class GroupRuntime:
    """Hosts every group of one coordinator: feeds them events, executes their effects."""

    def __init__(self, scheduler: Scheduler, write: WriteResult, metrics=None,
                 journal: Callable[[RebalanceJournaled], None] | None = None,
                 write_failed: Callable[[object, int], None] | None = None) -> None:
        """`journal` receives each finished rebalance's entry (the coordinator persists it); `write_failed(group,
        error)` hears of a group's failed append after the group has (it rolls the group back)."""
        self.scheduler = scheduler
        self._write = write
        self._write_failed = write_failed
        self._journal = journal
        self._metrics = metrics  # cohort.coordinator.metrics.CoordinatorMetrics, or None
        self._parked: dict[int, asyncio.Future] = {}
        self._answering = 0  # batches of answers going out a slice per turn
        self._request_ids = itertools.count(1)
        self._hosts: dict[ClassicGroup, _Host] = {}
        self._reconciling_since: dict[str, float] = {}
        # Set by the coordinator: a consumer group turned back into a classic one (group, GroupMetadata record).
        self.converted_to_classic: Callable[[object, GroupMetadataRecord], None] | None = None  # consumer group id -> first epoch bump not yet Stable

    # -- requests ----------------------------------------------------------------------------
    def join(self, group: ClassicGroup, request: JoinRequest) -> asyncio.Future:
        """JoinGroup: the future resolves to a JoinResult (maybe a whole join phase later)."""
        return self._park(group, lambda request_id: JoinGroup(request_id, request))

    def sync(self, group: ClassicGroup, member_id: str, group_instance_id: str | None, generation_id: int,
             protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes]) -> asyncio.Future:
        """SyncGroup: the future resolves to a SyncResult (followers wait for the leader's)."""
        return self._park(group, lambda request_id: SyncGroup(
            request_id, member_id, group_instance_id, generation_id, protocol_type, protocol_name, assignments))

    def heartbeat(self, group: ClassicGroup, member_id: str, group_instance_id: str | None,
                  generation_id: int) -> int:
        effects = group.handle(Heartbeat(member_id, group_instance_id, generation_id), self.scheduler.now())
        if len(effects) == 1 and type(effects[0]) is Reply:  # the usual heartbeat: nothing to execute
            return effects[0].result
        return self._execute(group, effects)

    def ask(self, group, event_for: Callable[[int], object]) -> object:
        """An event answered either now (the engine's `Reply`: returned as is) or later (an `Answer`,
        e.g. once the records it made are durable: a future resolving to it is returned)."""
        future = asyncio.get_running_loop().create_future()
        request_id = next(self._request_ids)
        self._parked[request_id] = future
        reply = self.submit(group, event_for(request_id))
        if reply is not None:
            self._parked.pop(request_id, None)
            return reply
        future.add_done_callback(lambda _, request_id=request_id: self._parked.pop(request_id, None))
        return future

    def leave(self, group: ClassicGroup, members: list[tuple[str, str | None, str | None]]) -> list[int]:
        """LeaveGroup of (member_id, group_instance_id, reason) each; one error code per entry."""
        return self.submit(group, LeaveGroup(members))

    def offset_committed(self, group: ClassicGroup, member_id: str) -> None:
        if member_id:  # a standalone consumer's or admin tool's commit keeps no session alive
            self.submit(group, OffsetCommitted(member_id))

    # -- life of a group ---------------------------------------------------------------------
    def load(self, group: ClassicGroup, record: GroupMetadataRecord) -> None:
        self.submit(group, MetadataLoaded(record))

    def load_completed(self, group: ClassicGroup) -> None:
        self.submit(group, LoadCompleted())

    def unload(self, group: ClassicGroup, error: int = ErrorCode.NOT_COORDINATOR) -> None:
        """Stop the group's timers and writes' follow-ups; its parked requests get `error`."""
        self.submit(group, Unloaded(error))
        self._forget(group)

    def delete(self, group: ClassicGroup) -> None:
        """The group is Dead: parked requests get COORDINATOR_NOT_AVAILABLE, nothing of it runs again."""
        self.submit(group, Deleted())
        self._forget(group)

    async def settle(self) -> None:
        """Wait until no group has an append in flight (tests, shutdown)."""
        while self.writes_in_flight():
            await asyncio.sleep(0.001)

    def writes_in_flight(self) -> int:
        return sum(host.writes for host in self._hosts.values())

    def answers_in_flight(self) -> int:
        """Batches of answers still going out a slice per loop turn (tests wait for them)."""
        return self._answering

    # -- the loop ----------------------------------------------------------------------------
    def submit(self, group: ClassicGroup, event) -> object:
        """Hand one event to the group and execute its effects; returns its `Reply`, if any."""
        return self._execute(group, group.handle(event, self.scheduler.now()))

    def _execute(self, group: ClassicGroup, effects) -> object:
        reply = None
        for effect in effects:
            kind = type(effect)
            if kind is Reply:
                reply = effect.result
            elif kind is Answer:
                self._answer(effect.request_id, effect.result)
            elif kind is AnswerAll:
                self._answer_all(group, effect)
            elif kind is SetTimer:
                self._set_timer(group, effect.key, effect.delay_ms)
            elif kind is CancelTimer:
                host = self._hosts.get(group)
                handle = host.timers.pop(effect.key, None) if host is not None else None
                if handle is not None:
                    handle.cancel()
            elif kind is CancelAllTimers:
                host = self._hosts.get(group)
                if host is not None:
                    for handle in host.timers.values():
                        handle.cancel()
                    host.timers.clear()
            elif kind is AppendRecords:
                self._append(group, effect)
            elif kind is RebalanceCompleted:
                if self._metrics is not None:
                    label = "initial" if effect.initial else effect.reason.cause.metric_label
                    self._metrics.rebalance_completed(label, effect.duration_ms / 1000.0)
                    self._metrics.group_epoch_bumped("classic")
                    self._metrics.group_reconciled("classic", effect.duration_ms / 1000.0)
            elif kind is MemberExpired:
                if self._metrics is not None:
                    self._metrics.member_expired()
            elif kind is RebalanceJournaled:
                if self._journal is not None:
                    self._journal(effect)
            elif kind is ConvertedToClassic:
                if self.converted_to_classic is not None:
                    self.converted_to_classic(group, effect.record)
            elif kind is StateChanged:
                if self._metrics is not None and isinstance(effect.step, ConsumerStep):
                    self._consumer_state_changed(effect)
            else:
                raise TypeError(f"unknown effect {effect!r}")
        return reply

    def _consumer_state_changed(self, effect: StateChanged) -> None:
        """Consumer-group metrics: epoch bumps, and reconciliation from the first bump to Stable."""
        now = self.scheduler.monotonic_ms()
        if effect.step is ConsumerStep.EPOCH_BUMPED:
            self._metrics.group_epoch_bumped("consumer")
            self._reconciling_since.setdefault(effect.group_id, now)
        elif effect.target is ConsumerGroupState.STABLE or effect.target is ConsumerGroupState.EMPTY \
                or effect.target is ConsumerGroupState.DEAD:
            since = self._reconciling_since.pop(effect.group_id, None)
            if since is not None and effect.target is ConsumerGroupState.STABLE:
                self._metrics.group_reconciled("consumer", (now - since) / 1000.0)

    def _host(self, group: ClassicGroup) -> _Host:
        host = self._hosts.get(group)
        if host is None:
            host = self._hosts[group] = _Host()
        return host

    def _forget(self, group: ClassicGroup) -> None:
        self._reconciling_since.pop(group.group_id, None)
        host = self._hosts.pop(group, None)
        if host is not None:
            for handle in host.timers.values():
                handle.cancel()

    def _park(self, group: ClassicGroup, event_for: Callable[[int], object]) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        request_id = next(self._request_ids)
        self._parked[request_id] = future
        # A client that goes away cancels its wait: forget the id (answering it later is a no-op).
        future.add_done_callback(lambda _, request_id=request_id: self._parked.pop(request_id, None))
        self.submit(group, event_for(request_id))
        return future

    def _answer(self, request_id: int | None, result: object) -> None:
        if request_id is None:
            return
        future = self._parked.pop(request_id, None)
        if future is not None and not future.done():
            future.set_result(result)

    def _answer_all(self, group: ClassicGroup, effect: AnswerAll) -> None:
        """Every answered request runs its handler's rest (encode, write) in the next turn: the
        10 000 answers of a big group's join phase in one turn kept every other client waiting.
        So at most ANSWERS_PER_TURN go out per turn, and fewer once ANSWER_SLICE_S is spent."""
        answers, generation = effect.answers, effect.restart_sessions_of

        def answer_from(start: int) -> None:
            slice_end = time.perf_counter() + ANSWER_SLICE_S
            end = min(start + ANSWERS_PER_TURN, len(answers))
            for at in range(start, end, _ANSWERS_PER_CHECK):
                for request_id, result in answers[at:min(at + _ANSWERS_PER_CHECK, end)]:
                    if generation is not None and group in self._hosts:
                        self.submit(group, JoinAnswered(result.member_id, generation))
                    self._answer(request_id, result)
                if time.perf_counter() >= slice_end:
                    end = min(at + _ANSWERS_PER_CHECK, end)
                    break
            if end < len(answers):
                asyncio.get_running_loop().call_soon(answer_from, end)
            else:
                self._answering -= 1

        self._answering += 1
        answer_from(0)

    def _set_timer(self, group: ClassicGroup, key: Hashable, delay_ms: float) -> None:
        timers = self._host(group).timers
        old = timers.get(key)
        if old is not None:
            old.cancel()
        timers[key] = self.scheduler.call_later(delay_ms, partial(self._timer_fired, group, key))

    def _timer_fired(self, group: ClassicGroup, key: Hashable) -> None:
        host = self._hosts.get(group)
        if host is None or host.timers.pop(key, None) is None:
            return
        self.submit(group, TimerFired(key))

    def _append(self, group: ClassicGroup, effect: AppendRecords) -> None:
        """An engine's records through the write gate; `RecordsAppended` comes back once they are durable
        (or failed), in the loop turn after (the engine's next effects may append again)."""
        host = self._host(group)
        host.writes += 1
        self._write(group.group_id, CoordinatorResult(effect.records)).subscribe(self._appended, (group, host, effect))

    def _appended(self, written: tuple, answer: PendingAnswer) -> None:
        error = answer.response if answer.error is None else ErrorCode.COORDINATOR_NOT_AVAILABLE
        asyncio.get_running_loop().call_soon(self._feed_back, written, error)

    def _feed_back(self, written: tuple, error: int) -> None:
        group, host, effect = written
        host.writes -= 1
        if self._hosts.get(group) is not host:
            # Unloaded, deleted or rolled back meanwhile: a request waiting for these records hears so.
            purpose = effect.purpose
            request_id = getattr(purpose, "request_id", None)
            if request_id is not None and hasattr(purpose, "result"):
                self._answer(request_id, type(purpose.result)(error or ErrorCode.NOT_COORDINATOR))
            return
        try:
            self.submit(group, RecordsAppended(effect.purpose, error))
            if error and self._write_failed is not None:
                self._write_failed(group, error)
        except Exception:
            log.exception("group %s: handling a finished write failed", group.group_id)
