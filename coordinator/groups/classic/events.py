"""What goes into a classic group and what comes out: the requests (after the coordinator's service-level
checks), the other events (besides the shared TimerFired, RecordsAppended, LoadCompleted, Unloaded,
Deleted), the results the coordinator shapes into per-version responses, and why the group asks for an
append (fed back in `RecordsAppended.purpose`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cohort.coordinator.records.types import GroupMetadataRecord
from cohort.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from cohort.coordinator.groups.classic.member import GroupMember
    from cohort.coordinator.groups.classic.rebalance import RebalanceReason



@dataclass(slots=True)
class JoinResult:
    error: int = ErrorCode.NONE
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    # (member_id, group_instance_id, metadata) — only in the leader's answer
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


class JoinAnswers(Sequence):
    """The join phase's answers, (request id, JoinResult) each, made as they are read.

    Why: a 10 000-member phase's answers cost tens of milliseconds to build at once; the runtime
    answers them a slice per loop turn, so each answer is built in the turn it goes out. What
    they say is fixed when the phase ends: the leader's answer (with the member list) and the
    fields every follower's answer copies from it.
    """

    __slots__ = ("_parked", "_leader")

    def __init__(self, parked: list[tuple[int | None, str]], leader: JoinResult) -> None:
        self._parked = parked  # (request id, member id), in member order
        self._leader = leader

    def __len__(self) -> int:
        return len(self._parked)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._answer(item) for item in self._parked[index]]
        return self._answer(self._parked[index])

    def _answer(self, item: tuple[int | None, str]) -> tuple[int | None, JoinResult]:
        request_id, member_id = item
        leader = self._leader
        if member_id == leader.member_id:
            return request_id, leader
        return request_id, JoinResult(ErrorCode.NONE, member_id, leader.generation_id, leader.protocol_type,
                                      leader.protocol_name, leader.leader, False, [])


@dataclass(slots=True)
class SyncResult:
    error: int = ErrorCode.NONE
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(slots=True)
class JoinRequest:
    """What the group needs from a JoinGroup (the coordinator has done the service-level checks)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    reason: str | None = None
    require_known_member_id: bool = True  # v4+
    supports_skip_assignment: bool = True  # v9+


# Events (besides the shared TimerFired and RecordsAppended)

@dataclass(slots=True)
class JoinGroup:
    request_id: int
    request: JoinRequest


@dataclass(slots=True)
class SyncGroup:
    request_id: int
    member_id: str
    group_instance_id: str | None
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    assignments: dict[str, bytes]


@dataclass(slots=True)
class Heartbeat:
    member_id: str
    group_instance_id: str | None
    generation_id: int


@dataclass(slots=True)
class LeaveGroup:
    members: list[tuple[str, str | None, str | None]]  # (member_id, group_instance_id, reason)


@dataclass(slots=True)
class OffsetCommitted:
    """A member committed offsets: that keeps its session alive (Stable or PreparingRebalance)."""

    member_id: str


@dataclass(slots=True)
class JoinAnswered:
    """A join-phase answer went out: the member's session restarts now (AnswerAll's feedback)."""

    member_id: str
    generation_id: int


@dataclass(slots=True, frozen=True)
class RebalanceRequested:
    """Someone outside the group's requests wants a rebalance (admin action, metadata change)."""

    reason: RebalanceReason


@dataclass(slots=True, frozen=True)
class MetadataLoaded:
    """A GroupMetadata record read back from the log (replay: no timers yet)."""

    record: GroupMetadataRecord


# Why the engine asked for an append (fed back in RecordsAppended.purpose)
@dataclass(slots=True, frozen=True)
class AssignmentWrite:
    generation_id: int
    leader_id: str
    assignment: dict[str, bytes]


@dataclass(slots=True, frozen=True)
class EmptyGenerationWrite:
    generation_id: int


@dataclass(slots=True, frozen=True)
class StaticReplacementWrite:
    """A static member rejoined Stable with nothing the assignment depends on changed (KIP-345)."""

    request_id: int
    group_instance_id: str
    old_member_id: str
    member: "GroupMember"
    generation_id: int
    old_protocols: list[tuple[str, bytes]]
    old_rebalance_timeout_ms: int
    old_session_timeout_ms: int
    leader_id: str | None
    supports_skip_assignment: bool

