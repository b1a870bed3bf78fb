"""A classic group's members: each one (Kafka's `ClassicGroupMember`), who is in the group (`Membership`,
the bookkeeping of Kafka's `ClassicGroup`), and what the members agree on: the protocols every member
supports (the vote that picks one) and the topics they subscribe to; and a member as the records hold it.
"""
from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from cohort.coordinator.records.types import GroupMemberRecord, GroupMetadataRecord
from cohort.protocol.consumer_protocol import decode_subscription
from cohort.protocol.errors import ErrorCode

log = logging.getLogger("cohort.group")

# The protocol type of Kafka consumers (the ConsumerProtocol subscription and assignment in member metadata).
CONSUMER_PROTOCOL_TYPE = "consumer"


class JoinCounter:
    """How many of a group's members have a JoinGroup parked (Kafka's numMembersAwaitingJoin).

    Kept by the members' own `join_request` setter, so "has everyone rejoined?" is O(1) on
    every join and expiry instead of a scan of the group (10 k joins cost 10 k scans).
    """

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


@dataclass(slots=True, eq=False)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    sync_request: int | None = None
    is_new: bool = False
    _join_request: int | None = field(default=None, repr=False)
    _awaiting: JoinCounter | None = field(default=None, repr=False)  # its group's, while it is a member

    @property
    def join_request(self) -> int | None:
        """Its parked JoinGroup's request id, if any (setting it keeps the group's awaiting count)."""
        return self._join_request

    @join_request.setter
    def join_request(self, request_id: int | None) -> None:
        counter = self._awaiting
        if counter is not None:
            counter.count += (request_id is not None) - (self._join_request is not None)
        self._join_request = request_id

    def attach(self, counter: JoinCounter | None) -> None:
        """Enter (a counter) or leave (None) a group's count of members awaiting join."""
        if self._awaiting is not None and self._join_request is not None:
            self._awaiting.count -= 1
        self._awaiting = counter
        if counter is not None and self._join_request is not None:
            counter.count += 1

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_request is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_request is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, same metadata bytes (Kafka's `matches`)."""
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        # New members can expire even while waiting in JoinGroup; others waiting in a
        # rebalance count as alive until the rebalance answers them (which restarts the session).
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync


class MemberSnapshot(NamedTuple):
    """Who a member was and what it held, frozen for the journal (the live one changes in place).

    A tuple of strings and bytes: cheap to make for 10 000 members at the end of every rebalance, and
    nothing the cyclic garbage collector has to walk."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: bytes


def snapshot(member: GroupMember) -> MemberSnapshot:
    return MemberSnapshot(member.member_id, member.group_instance_id, member.client_id, member.client_host,
                          member.assignment)


def new_member_id(client_id: str, group_instance_id: str | None) -> str:
    """A member id as Kafka makes one: the instance id (else the client id), a dash and a random UUID."""
    return f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"


def members_of(record: GroupMetadataRecord) -> list[GroupMember]:
    """The members a GroupMetadata record holds (a rebalance timeout of -1, from old writers, is the session's)."""
    return [GroupMember(
        member_id=r.member_id, group_instance_id=r.group_instance_id, client_id=r.client_id, client_host=r.client_host,
        rebalance_timeout_ms=r.rebalance_timeout if r.rebalance_timeout >= 0 else r.session_timeout,
        session_timeout_ms=r.session_timeout, protocol_type=record.protocol_type,
        protocols=[(record.protocol or "", bytes(r.subscription))], assignment=bytes(r.assignment))
        for r in record.members]


def member_records(members: Iterable[GroupMember], protocol: str | None,
                   assignment: dict[str, bytes]) -> list[GroupMemberRecord]:
    """The members as a GroupMetadata record holds them: metadata for `protocol`, with the given assignment."""
    # (positional: member_id, group_instance_id, client_id, client_host, rebalance_timeout, session_timeout,
    # subscription, assignment; a third cheaper for 10 000 members)
    return [GroupMemberRecord(
        m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms, m.session_timeout_ms,
        m.metadata(protocol) if protocol is not None else b"", assignment.get(m.member_id, b""))
        for m in members]


class SupportedProtocols:
    """How many of a group's members support each protocol: the protocols all of them support (Kafka's
    `supportedProtocols`), and the vote that picks the group's protocol among those."""

    __slots__ = ("_counts", "_members")

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._members = 0

    def add(self, member: GroupMember) -> None:
        self._counts.update(set(member.protocol_names()))
        self._members += 1

    def remove(self, member: GroupMember) -> None:
        self._counts.subtract(set(member.protocol_names()))
        self._counts += Counter()  # drop zero counts
        self._members -= 1

    def clear(self) -> None:
        self._counts.clear()
        self._members = 0

    def any_supported_by_all(self, protocols: list[tuple[str, bytes]]) -> bool:
        n = self._members
        return any(self._counts.get(name, 0) == n for name, _ in protocols)

    def candidates(self) -> set[str]:
        n = self._members
        return {name for name, count in self._counts.items() if count == n}

    def select(self, members: Iterable[GroupMember]) -> str:
        """Every member votes for its most preferred protocol that all members support.

        Ties (Kafka breaks them by hash-map order) go to the candidate voted first, in member order.
        """
        members = list(members)
        if not members:
            raise ValueError("no members to select a protocol")
        candidates = self.candidates()
        votes: Counter[str] = Counter(m.vote(candidates) for m in members)
        best = max(votes.values())
        for m in members:
            choice = m.vote(candidates)
            if votes[choice] == best:
                return choice
        raise AssertionError("unreachable")


def subscribed_topics(group_id: str, protocol_type: str | None, protocol_name: str | None,
                      members: Iterable[GroupMember]) -> frozenset[str] | None:
    """Topics the members subscribe to, from their consumer-protocol metadata; None = unknown."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    members = list(members)
    if not members:
        return frozenset()
    if protocol_name is None:
        return None
    topics: set[str] = set()
    seen: set[bytes] = set()  # members mostly share one subscription: decode each distinct one once
    try:
        for m in members:
            metadata = m.metadata(protocol_name)
            if metadata not in seen:
                seen.add(metadata)
                topics.update(decode_subscription(metadata).topics)
    except Exception as exc:  # any undecodable subscription makes the set unknown (Kafka's rule)
        log.warning("group %s: cannot parse consumer subscription for protocol %s (%s); "
                    "subscribed topics unknown", group_id, protocol_name, exc)
        return None
    return frozenset(topics)


class Membership:
    """Who is in a classic group (Kafka's ClassicGroup bookkeeping): members by id, static members by
    instance id, the ids handed out with MEMBER_ID_REQUIRED, the leader, how many members have a JoinGroup
    parked and the protocols all of them support. Bookkeeping only: the group answers the parked requests
    of whoever leaves and keeps the sessions."""

    __slots__ = ("group_id", "members", "static_members", "pending_members", "leader_id", "protocols",
                 "_awaiting_join")

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.members: dict[str, GroupMember] = {}
        self.static_members: dict[str, str] = {}  # group_instance_id -> member_id
        self.pending_members: set[str] = set()  # ids handed out with MEMBER_ID_REQUIRED
        self.leader_id: str | None = None
        self.protocols = SupportedProtocols()
        self._awaiting_join = JoinCounter()  # members with a JoinGroup parked

    def awaiting_join_count(self) -> int:
        return self._awaiting_join.count

    def has_all_joined(self) -> bool:
        return self._awaiting_join.count == len(self.members) and not self.pending_members

    def not_yet_rejoined(self) -> list[GroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def validate(self, member_id: str, group_instance_id: str | None) -> int:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID / NONE (Kafka's validateMember)."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                log.info("group %s: member %s fenced by static member %s (instance %s)",
                         self.group_id, member_id, existing, group_instance_id)
                return ErrorCode.FENCED_INSTANCE_ID
            return ErrorCode.NONE
        return ErrorCode.NONE if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID

    def current_members(self, protocol: str) -> list[tuple[str, str | None, bytes]]:
        """The member list a leader assigns from: metadata for the selected protocol."""
        return [(m.member_id, m.group_instance_id, m.metadata(protocol)) for m in self.members.values()]

    def add(self, member: GroupMember, join_request: int | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(f"static member {member.group_instance_id} is already in the group")
            self.static_members[member.group_instance_id] = member.member_id
        self.members[member.member_id] = member
        member.attach(self._awaiting_join)
        self.protocols.add(member)
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)
        member.join_request = join_request

    def remove(self, member_id: str) -> GroupMember | None:
        """Drop a member (or a pending id); its parked requests are forgotten (answer them first)."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self.protocols.remove(member)
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
            member.join_request = None
            member.attach(None)
            member.sync_request = None
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        return member

    def update_protocols(self, member: GroupMember, protocols: list[tuple[str, bytes]]) -> None:
        self.protocols.remove(member)
        member.protocols = list(protocols)
        self.protocols.add(member)

    def replace_static(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> GroupMember:
        """Swap a static member's id (KIP-345): the new member takes over everything but the parked
        requests (answer the old one's first)."""
        old = self.members.pop(old_member_id, None)
        if old is None:
            raise KeyError(f"cannot replace {old_member_id}: not a member of {self.group_id}")
        old.attach(None)
        new = GroupMember(
            member_id=new_member_id, group_instance_id=old.group_instance_id, client_id=old.client_id,
            client_host=old.client_host, rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms, protocol_type=old.protocol_type, protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_member_id] = new
        new.attach(self._awaiting_join)
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return new

    def elect_joined_leader(self) -> bool:
        """Keep a leader that has rejoined, else make the first member that has the leader; False if none has."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for m in self.members.values():
            if m.is_awaiting_join:
                log.info("group %s: leader %s did not rejoin; %s is the new leader",
                         self.group_id, self.leader_id, m.member_id)
                self.leader_id = m.member_id
                return True
        return False

    def load(self, members: list[GroupMember], leader_id: str | None) -> None:
        """Become the members a GroupMetadata record holds (the leader, if it is not among them: the first)."""
        for m in self.members.values():
            m.attach(None)
        self.members.clear()
        self.static_members.clear()
        self.protocols.clear()
        for m in members:
            self.members[m.member_id] = m
            m.attach(self._awaiting_join)
            self.protocols.add(m)
            if m.group_instance_id is not None:
                self.static_members[m.group_instance_id] = m.member_id
        self.leader_id = leader_id if leader_id is None or leader_id in self.members else next(iter(self.members), None)
