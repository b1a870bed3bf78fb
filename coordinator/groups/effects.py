"""What every group engine takes in and gives back, whatever its protocol.

An engine is driven with `handle(event, now)` and returns effects; it never waits, sleeps, reads
a clock or touches storage (etcd raft's `Ready`, Kafka's `CoordinatorResult`). The runtime does
the IO each effect names and feeds what came of it back as another event: a timer that fired is
`TimerFired`, an append that finished is `RecordsAppended`. Request-specific events and the
engine's own timer keys and write purposes live with the engine (`classic.py`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, NamedTuple

from cohort.protocol.errors import ErrorCode


class Now(NamedTuple):
    """The two clocks an engine is told: wall time for what clients and records see, monotonic
    time for deadlines (a stepped wall clock must not expire every session at once)."""

    wall_ms: int
    monotonic_ms: float


# ---------------------------------------------------------------------------------------------
# Events every engine understands (the runtime produces them)
# ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class TimerFired:
    """The timer set with `SetTimer(key, ...)` is due (a cancelled or replaced timer never fires)."""

    key: Hashable


@dataclass(slots=True)
class RecordsAppended:
    """The append asked for by `AppendRecords(..., purpose)` finished: `error` is 0 once durable,
    else the Kafka error code the client is told."""

    purpose: object
    error: int


@dataclass(slots=True, frozen=True)
class LoadCompleted:
    """The group's records are all replayed: its sessions start now (replay sets no timers)."""


@dataclass(slots=True, frozen=True)
class Unloaded:
    """The coordinator stops serving the group: timers stop, parked requests get `error`."""

    error: int = ErrorCode.NOT_COORDINATOR


@dataclass(slots=True, frozen=True)
class Deleted:
    """The group's tombstones are durable: it is Dead, parked requests get COORDINATOR_NOT_AVAILABLE."""


# ---------------------------------------------------------------------------------------------
# Effects (the engine produces them, the runtime executes them in order)
# ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Reply:
    """The answer to the request being handled now (Heartbeat, LeaveGroup: never parked)."""

    result: object


@dataclass(slots=True)
class Answer:
    """Answer the parked request `request_id` (a no-op if its client already went away)."""

    request_id: int
    result: object


@dataclass(slots=True, frozen=True)
class AnswerAll:
    """Answer many parked requests, a bounded number per event-loop turn.

    With `restart_sessions_of` set (a generation), each answered member's session restarts as
    its answer goes out: the runtime feeds `answered(member_id, generation)` back per answer.
    """

    answers: list[tuple[int, object]]
    restart_sessions_of: int | None = None


@dataclass(slots=True)
class SetTimer:
    """Fire `TimerFired(key)` after `delay_ms`, replacing any timer with the same key."""

    key: Hashable
    delay_ms: float


@dataclass(slots=True)
class CancelTimer:
    key: Hashable


@dataclass(slots=True, frozen=True)
class CancelAllTimers:
    """The group stops (deleted or unloaded): none of its timers may fire again."""


@dataclass(slots=True, frozen=True)
class AppendRecords:
    """Append `records` durably to the group's offsets partition, then feed back
    `RecordsAppended(purpose, error)`. Appends of one group reach the log in the order asked."""

    records: list
    purpose: object


@dataclass(slots=True, frozen=True)
class StateChanged:
    """A journal entry: the group moved `source` -> `target` by `step` (one row of the engine's table);
    `reason` says why a rebalance started."""

    group_id: str
    source: object
    step: object
    target: object
    reason: object = None


@dataclass(slots=True, frozen=True)
class RebalanceCompleted:
    """A rebalance ended with the group Stable; `reason` is why it started, timed from then."""

    group_id: str
    reason: object
    initial: bool
    duration_ms: int


@dataclass(slots=True, frozen=True)
class MemberExpired:
    """A member was removed because its session (or join/sync wait) timed out."""

    group_id: str
    member_id: str


@dataclass(slots=True, frozen=True)
class RebalanceJournaled:
    """An entry for the group's operator journal: one rebalance, from its first prepare (classic) or group
    epoch bump (consumer) until the group is Stable or Empty again (or a static member's replacement that
    needed none).

    Engine-neutral: `epoch_before`/`epoch_after` are the classic generation or a consumer group's epoch;
    `trigger` is one of `reports.journal.TRIGGERS`; `members` are the members involved, each
    (member_id, group_instance_id, client_id, client_host, role) with role one of
    `reports.journal.MEMBER_ROLES`. Assignments map member id to the ConsumerProtocol assignment bytes
    (classic) or to the (topic, partition) pairs it owns; the journal diffs them into partition moves.
    """

    group_id: str
    group_type: str
    started_ms: int
    ended_ms: int
    epoch_before: int
    epoch_after: int
    trigger: str
    client_reason: str | None
    detail: str
    state_after: str
    members: tuple
    assignments_before: dict
    assignments_after: dict
