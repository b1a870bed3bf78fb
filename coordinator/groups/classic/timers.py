"""A classic group's timers: each member's session, the join phase and the pending-sync wait.

A session is a deadline watched by one timer that re-arms itself when heartbeats moved the deadline, so a
heartbeat costs no timer effect. The group decides what a timer's firing means; this keeps what is armed
and emits the SetTimer/CancelTimer effects (appended to the effects list of the event being handled).
"""
from __future__ import annotations

import enum

from cohort.coordinator.groups.effects import CancelAllTimers, CancelTimer, SetTimer


class GroupTimer(enum.Enum):
    """A group's own timers; a member's session timer is keyed by its member id instead."""

    JOIN_PHASE = "join phase"        # initial delay or rebalance timeout
    PENDING_SYNC = "pending sync"    # members that got their JoinGroup answer must SyncGroup in time


class Session:
    """One member's session deadline and when its (single) timer fires; never after the deadline."""

    __slots__ = ("deadline", "fires_at")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fires_at = deadline


class GroupTimers:
    """What a group has armed: sessions by member id (or pending id), the join-phase timer (with the
    initial delay's (delay, remaining) when it is one) and the generation the pending-sync timer watches."""

    __slots__ = ("sessions", "join_armed", "initial_delay", "sync_generation")

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.join_armed = False
        self.initial_delay: tuple[int, int] | None = None
        self.sync_generation: int | None = None

    def start_session(self, member_id: str, timeout_ms: int, now_ms: float, out: list) -> None:
        """(Re)start a session; a timer effect only when none is armed early enough."""
        deadline = now_ms + timeout_ms
        session = self.sessions.get(member_id)
        if session is None:
            self.sessions[member_id] = Session(deadline)
        elif session.fires_at <= deadline:
            session.deadline = deadline  # the armed timer fires first and re-arms for the rest
            return
        else:  # moved earlier than the armed timer (a join timeout replaced by a session): re-arm now
            session.deadline = session.fires_at = deadline
        out.append(SetTimer(member_id, timeout_ms))

    def session_fired(self, member_id: str, now_ms: float, out: list) -> bool:
        """True when the session has ended; else its timer is re-armed for what heartbeats added."""
        session = self.sessions.get(member_id)
        if session is None:
            return False
        remaining = session.deadline - now_ms
        if remaining > 0:
            session.fires_at = session.deadline
            out.append(SetTimer(member_id, remaining))
            return False
        del self.sessions[member_id]
        return True

    def cancel_session(self, member_id: str, out: list) -> None:
        if self.sessions.pop(member_id, None) is not None:
            out.append(CancelTimer(member_id))

    def set_join(self, delay_ms: int, out: list, initial: tuple[int, int] | None = None) -> None:
        self.join_armed = True
        self.initial_delay = initial
        out.append(SetTimer(GroupTimer.JOIN_PHASE, delay_ms))

    def cancel_join(self, out: list) -> None:
        if self.join_armed:
            self.join_armed = False
            self.initial_delay = None
            out.append(CancelTimer(GroupTimer.JOIN_PHASE))

    def join_fired(self) -> tuple[int, int] | None:
        """The join timer fired: what its initial delay was, if it was one."""
        initial, self.initial_delay, self.join_armed = self.initial_delay, None, False
        return initial

    def set_sync(self, generation: int, delay_ms: int, out: list) -> None:
        self.sync_generation = generation
        out.append(SetTimer(GroupTimer.PENDING_SYNC, delay_ms))

    def cancel_sync(self, out: list) -> None:
        if self.sync_generation is not None:
            self.sync_generation = None
            out.append(CancelTimer(GroupTimer.PENDING_SYNC))

    def sync_fired(self) -> int | None:
        """The pending-sync timer fired: the generation it watched."""
        generation, self.sync_generation = self.sync_generation, None
        return generation

    def stop(self, out: list) -> None:
        self.join_armed = False
        self.initial_delay = None
        self.sync_generation = None
        self.sessions.clear()
        out.append(CancelAllTimers())
