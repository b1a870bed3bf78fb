"""Kafka's classic-group rules, restated from scratch as a small executable model.

Written from Kafka's rules (Kafka 3.9's `GroupMetadataManager` and
`ClassicGroup`), never from Cohort's code: it imports nothing from `cohort`. One group, one clock
(milliseconds from 0), and the requests a client can send. Each request gets a *ticket*; the model
says which tickets are answered by each step and with what.

Where Kafka leaves the outcome open, the model branches instead of guessing: which member becomes
leader after the leader is removed (Kafka takes the next one in hash-map order), which of two
timers due at the same millisecond fires first, a protocol vote tie, and whether a JoinGroup refused
by group.max.size ends a join phase it leaves complete (Kafka's Scala and Java coordinators differ). Branches are explored by
`outcomes()`; the test keeps every branch (a *world*) whose answers match what the server said.
Member ids are random, so the model names a new one `?<ticket>:<prefix>` and the test binds it to
the real id once an answer reveals it. A parked request that a newer one from the same member
replaces is dropped by Kafka (never answered); a server that answers it must use some error
(`ANY_ERROR`).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable, Iterator

# Kafka error codes (Kafka's `Errors`), spelled out here so the model depends on nothing it checks.
NONE = 0
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
ANY_ERROR = -1000  # "some error": the answer to a request Kafka would leave unanswered

EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"

Protocols = tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's order of preference


@dataclass(frozen=True)
class JoinAnswer:
    error: int
    member_id: str = ""
    generation: int = -1
    protocol: str | None = None
    leader: str = ""
    members: frozenset = frozenset()  # (member id, instance id, metadata): the leader's answer only
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncAnswer:
    error: int
    assignment: bytes = b""


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    protocols: Protocols
    session_ms: int
    rebalance_ms: int
    is_new: bool = False
    join_ticket: int | None = None  # a JoinGroup waiting for the join phase to end
    sync_ticket: int | None = None  # a SyncGroup waiting for the leader's assignment
    deadline: int | None = None  # session expiry; None once it passed while the member waited
    assignment: bytes = b""


@dataclass
class GroupModel:
    initial_delay_ms: int
    new_member_join_timeout_ms: int
    max_size: int
    now: int = 0
    exists: bool = False
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)  # MEMBER_ID_REQUIRED ids -> expiry
    pending_sync: set[str] = field(default_factory=set)  # members yet to send SyncGroup this generation
    join_timer: tuple | None = None  # (due, "initial", delay, remaining) or (due, "rebalance")
    sync_timer: tuple | None = None  # (due, generation)
    initial_rebalance: bool = False  # this join phase started from Empty: it never ends early
    new_member_added: bool = False
    answers: dict[int, object] = field(default_factory=dict)
    choose: Callable = field(default=lambda options: options[0], repr=False, compare=False)

    # ------------------------------------------------------------------ helpers
    def answer(self, ticket: int | None, value) -> None:
        if ticket is not None:
            self.answers[ticket] = value

    def rebalance_timeout(self) -> int:
        return max((m.rebalance_ms for m in self.members.values()), default=0)

    def static_owner(self, instance_id: str) -> str | None:
        return next((m.member_id for m in self.members.values() if m.instance_id == instance_id), None)

    def validate_member(self, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            owner = self.static_owner(instance_id)
            if owner is None:
                return UNKNOWN_MEMBER_ID
            return NONE if owner == member_id else FENCED_INSTANCE_ID
        return NONE if member_id in self.members else UNKNOWN_MEMBER_ID

    def select_protocol(self) -> str:
        """Names every member supports; each member votes its favourite; most votes win."""
        common = set.intersection(*({n for n, _ in m.protocols} for m in self.members.values()))
        votes: dict[str, int] = {}
        for m in self.members.values():
            vote = next(n for n, _ in m.protocols if n in common)
            votes[vote] = votes.get(vote, 0) + 1
        best = max(votes.values())
        return self.choose(sorted(n for n, v in votes.items() if v == best))

    def supports(self, protocol_type: str, protocols: Protocols) -> bool:
        if self.state == EMPTY:
            return bool(protocol_type) and bool(protocols)
        # One offered name must be supported by every member (the joining one included).
        return protocol_type == self.protocol_type and any(
            all(name in dict(m.protocols) for m in self.members.values()) for name, _ in protocols)

    def join_answer(self, m: Member, with_members: bool, leader: str | None = None,
                    skip: bool = False) -> JoinAnswer:
        listed = frozenset((x.member_id, x.instance_id, dict(x.protocols)[self.protocol])
                           for x in self.members.values()) if with_members else frozenset()
        return JoinAnswer(NONE, m.member_id, self.generation, self.protocol,
                          leader if leader is not None else self.leader or "", listed, skip)

    # ------------------------------------------------------------------ membership
    def remove(self, member_id: str) -> None:
        m = self.members.pop(member_id)
        self.answer(m.join_ticket, JoinAnswer(UNKNOWN_MEMBER_ID))
        self.answer(m.sync_ticket, SyncAnswer(UNKNOWN_MEMBER_ID))
        if self.leader == member_id:  # Kafka: the next member in (hash) iteration order
            self.leader = self.choose(sorted(self.members)) if self.members else None
        self.pending_sync.discard(member_id)

    def accepts(self, member_id: str) -> bool:
        """group.max.size: is there room for this JoinGroup in the current phase?"""
        if self.state == EMPTY:
            return True
        if self.state == PREPARING:
            m = self.members.get(member_id)
            awaiting = sum(1 for x in self.members.values() if x.join_ticket is not None)
            return (m is not None and m.join_ticket is not None) or awaiting < self.max_size
        return member_id in self.members or len(self.members) < self.max_size

    def drop(self, member_id: str) -> None:
        """Kafka's bare `group.remove` of a member refused by group.max.size: no rebalance follows, and
        whatever it had parked is dropped (never answered)."""
        m = self.members.pop(member_id, None)
        if m is not None:
            self.answer(m.join_ticket, JoinAnswer(ANY_ERROR))
            self.answer(m.sync_ticket, SyncAnswer(ANY_ERROR))
        if self.leader == member_id:
            self.leader = self.choose(sorted(self.members)) if self.members else None
        self.pending.pop(member_id, None)
        self.pending_sync.discard(member_id)

    def expire(self, member_id: str) -> None:
        """A session ran out. Unlike a join or a leave, this ends even an initial join phase early."""
        self.remove(member_id)
        if self.state in (STABLE, COMPLETING):
            self.prepare_rebalance()
        elif self.state == PREPARING and self.all_joined():
            self.complete_join()

    def update(self, m: Member, protocols: Protocols, session_ms: int, rebalance_ms: int, ticket: int) -> None:
        m.protocols, m.session_ms, m.rebalance_ms = protocols, session_ms, rebalance_ms
        if m.join_ticket is not None and m.join_ticket != ticket:
            self.answer(m.join_ticket, JoinAnswer(ANY_ERROR))  # superseded: Kafka drops it
        m.join_ticket = ticket

    def add(self, member_id: str, instance_id: str | None, protocol_type: str, protocols: Protocols,
            session_ms: int, rebalance_ms: int, ticket: int) -> None:
        if self.state == PREPARING and self.initial_rebalance:
            self.new_member_added = True
        if not self.members:
            self.protocol_type = protocol_type
        self.members[member_id] = Member(member_id, instance_id, protocols, session_ms, rebalance_ms,
                                         is_new=True, join_ticket=ticket,
                                         deadline=self.now + self.new_member_join_timeout_ms)
        if self.leader is None:
            self.leader = member_id
        self.pending.pop(member_id, None)
        self.maybe_prepare_or_complete()

    # ------------------------------------------------------------------ rebalance
    def maybe_prepare_or_complete(self) -> None:
        if self.state in (STABLE, COMPLETING, EMPTY):
            self.prepare_rebalance()
        else:
            self.maybe_complete_join()

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_ticket is not None for m in self.members.values())

    def maybe_complete_join(self) -> None:
        if self.state == PREPARING and not self.initial_rebalance and self.all_joined():
            self.complete_join()

    def prepare_rebalance(self) -> None:
        if self.state == COMPLETING:
            for m in self.members.values():
                m.assignment = b""
                if m.sync_ticket is not None:
                    self.answer(m.sync_ticket, SyncAnswer(REBALANCE_IN_PROGRESS))
                    m.sync_ticket = None
                    m.deadline = self.now + m.session_ms
        self.sync_timer = None
        self.initial_rebalance = self.state == EMPTY
        self.state = PREPARING
        self.new_member_added = False
        if self.initial_rebalance:
            delay = self.initial_delay_ms
            self.join_timer = (self.now + delay, "initial", delay, max(self.rebalance_timeout() - delay, 0))
        elif self.all_joined():
            self.complete_join()
        else:
            self.join_timer = (self.now + self.rebalance_timeout(), "rebalance")

    def complete_join(self) -> None:
        self.join_timer = None
        for m in [m for m in self.members.values() if m.join_ticket is None and m.instance_id is None]:
            self.remove(m.member_id)  # dynamic members that did not rejoin
        awaiting = sorted(x for x, m in self.members.items() if m.join_ticket is not None)
        if self.leader is not None and self.leader not in awaiting and awaiting:
            self.leader = self.choose(awaiting)
        if self.members and not awaiting:  # only static members that did not rejoin: wait again
            self.join_timer = (self.now + self.rebalance_timeout(), "rebalance")
            return
        self.generation += 1
        self.pending_sync = set()
        if not self.members:
            self.protocol, self.state = None, EMPTY
            return
        self.protocol, self.state = self.select_protocol(), COMPLETING
        for m in self.members.values():
            self.answer(m.join_ticket, self.join_answer(m, with_members=m.member_id == self.leader))
            m.join_ticket, m.is_new = None, False
            m.deadline = self.now + m.session_ms
            self.pending_sync.add(m.member_id)
        self.sync_timer = (self.now + self.rebalance_timeout(), self.generation)

    # ------------------------------------------------------------------ requests
    def join(self, ticket: int, member_id: str, instance_id: str | None, version: int, protocol_type: str,
             protocols: Protocols, session_ms: int, rebalance_ms: int, client_id: str) -> None:
        if not self.exists:
            if member_id:
                return self.answer(ticket, JoinAnswer(UNKNOWN_MEMBER_ID))
            self.exists = True
        if not self.accepts(member_id):
            self.drop(member_id)
            self.answer(ticket, JoinAnswer(GROUP_MAX_SIZE_REACHED))
            # Dropping it may leave everyone else joined. Kafka's Scala coordinator then ends the join
            # phase at once (it re-checks after every JoinGroup); the Java one (3.7+) waits for its timer.
            if self.state == PREPARING and not self.initial_rebalance and self.all_joined() \
                    and self.choose([True, False]):
                self.complete_join()
            return
        if not self.supports(protocol_type, protocols):
            return self.answer(ticket, JoinAnswer(INCONSISTENT_GROUP_PROTOCOL))
        if member_id == "":
            new_id = f"?{ticket}:{instance_id if instance_id is not None else client_id}"
            if instance_id is not None and self.static_owner(instance_id) is not None:
                return self.replace_static(ticket, instance_id, new_id, version, protocols, session_ms, rebalance_ms)
            if instance_id is None and version >= 4:
                self.pending[new_id] = self.now + session_ms
                return self.answer(ticket, JoinAnswer(MEMBER_ID_REQUIRED, new_id))
            return self.add(new_id, instance_id, protocol_type, protocols, session_ms, rebalance_ms, ticket)
        if member_id in self.pending:
            return self.add(member_id, None, protocol_type, protocols, session_ms, rebalance_ms, ticket)
        error = self.validate_member(member_id, instance_id)
        if error:
            return self.answer(ticket, JoinAnswer(error))
        m = self.members[member_id]
        if self.state == PREPARING:
            self.update(m, protocols, session_ms, rebalance_ms, ticket)
            self.maybe_complete_join()
        elif self.state == COMPLETING and m.protocols == protocols:
            self.answer(ticket, self.join_answer(m, with_members=member_id == self.leader))
        elif self.state == STABLE and member_id != self.leader and m.protocols == protocols:
            self.answer(ticket, self.join_answer(m, with_members=False))
        else:  # changed metadata, or the leader rejoining a Stable group
            self.update(m, protocols, session_ms, rebalance_ms, ticket)
            self.prepare_rebalance()

    def replace_static(self, ticket: int, instance_id: str, new_id: str, version: int, protocols: Protocols,
                       session_ms: int, rebalance_ms: int) -> None:
        """KIP-345: a new process with a known group.instance.id takes over; the old id is fenced."""
        old_id = self.static_owner(instance_id)
        old = self.members.pop(old_id)
        self.answer(old.join_ticket, JoinAnswer(FENCED_INSTANCE_ID))
        self.answer(old.sync_ticket, SyncAnswer(FENCED_INSTANCE_ID))
        leader_before = self.leader
        m = Member(new_id, instance_id, old.protocols, old.session_ms, old.rebalance_ms,
                   assignment=old.assignment, deadline=self.now + old.session_ms)
        self.members[new_id] = m
        if self.leader == old_id:
            self.leader = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        self.update(m, protocols, session_ms, rebalance_ms, ticket)
        if self.state == STABLE and self.protocol == self.select_protocol():
            m.join_ticket = None  # nothing the assignment depends on changed: no rebalance
            if version >= 9:
                is_leader = self.leader == new_id
                self.answer(ticket, self.join_answer(m, with_members=is_leader, skip=is_leader))
            else:  # the old leader id, so the new member never runs an assignment nobody will see
                self.answer(ticket, self.join_answer(m, with_members=False, leader=leader_before or ""))
        elif self.state in (STABLE, COMPLETING):
            self.prepare_rebalance()
        else:
            self.maybe_complete_join()

    def sync(self, ticket: int, member_id: str, instance_id: str | None, generation: int,
             protocol_type: str | None, protocol: str | None, assignments: dict[str, bytes]) -> None:
        if not self.exists:
            return self.answer(ticket, SyncAnswer(UNKNOWN_MEMBER_ID))
        error = self.validate_member(member_id, instance_id)
        if not error and generation != self.generation:
            error = ILLEGAL_GENERATION
        if not error and ((protocol_type is not None and self.protocol_type is not None
                           and protocol_type != self.protocol_type)
                          or (protocol is not None and self.protocol is not None and protocol != self.protocol)):
            error = INCONSISTENT_GROUP_PROTOCOL
        if error:
            return self.answer(ticket, SyncAnswer(error))
        m = self.members[member_id]
        if self.state == PREPARING:
            return self.answer(ticket, SyncAnswer(REBALANCE_IN_PROGRESS))
        self.pending_sync.discard(member_id)
        if self.state == STABLE:
            return self.answer(ticket, SyncAnswer(NONE, m.assignment))
        if m.sync_ticket is not None:
            self.answer(m.sync_ticket, SyncAnswer(ANY_ERROR))  # superseded: Kafka drops it
        m.sync_ticket = ticket
        if member_id == self.leader:  # the assignment is written, then everyone waiting gets theirs
            for x in self.members.values():
                x.assignment = assignments.get(x.member_id, b"")
            self.state = STABLE
            for x in self.members.values():
                if x.sync_ticket is not None:
                    self.answer(x.sync_ticket, SyncAnswer(NONE, x.assignment))
                    x.sync_ticket = None
                    x.deadline = self.now + x.session_ms

    def heartbeat(self, ticket: int, member_id: str, instance_id: str | None, generation: int) -> None:
        if not self.exists:
            return self.answer(ticket, UNKNOWN_MEMBER_ID)
        error = self.validate_member(member_id, instance_id)
        if not error and generation != self.generation:
            error = ILLEGAL_GENERATION
        if not error and self.state == EMPTY:
            error = UNKNOWN_MEMBER_ID
        if error:
            return self.answer(ticket, error)
        m = self.members[member_id]
        m.deadline = self.now + m.session_ms
        self.answer(ticket, REBALANCE_IN_PROGRESS if self.state == PREPARING else NONE)

    def commit(self, ticket: int, member_id: str, instance_id: str | None, generation: int, version: int) -> None:
        if not self.exists:
            if generation >= 0:
                return self.answer(ticket, GROUP_ID_NOT_FOUND if version >= 9 else ILLEGAL_GENERATION)
            self.exists = True  # a "simple" group, held by its offsets
            return self.answer(ticket, NONE)
        error = NONE
        if generation < 0 and self.state == EMPTY:
            pass
        elif generation >= 0 or member_id or instance_id is not None:
            error = self.validate_member(member_id, instance_id)
            if not error and generation != self.generation:
                error = ILLEGAL_GENERATION
        else:
            error = UNKNOWN_MEMBER_ID
        if not error and self.state == COMPLETING:
            error = REBALANCE_IN_PROGRESS
        if not error and self.state in (STABLE, PREPARING) and member_id in self.members:
            m = self.members[member_id]
            m.deadline = self.now + m.session_ms
        self.answer(ticket, error)

    def leave(self, ticket: int, entries: list[tuple[str, str | None]]) -> None:
        if not self.exists:
            return self.answer(ticket, tuple(UNKNOWN_MEMBER_ID for _ in entries))
        errors, removed = [], False
        for member_id, instance_id in entries:
            if member_id == "":
                owner = self.static_owner(instance_id) if instance_id is not None else None
                if owner is None:
                    errors.append(UNKNOWN_MEMBER_ID)
                    continue
                self.remove(owner)
            elif member_id in self.pending:
                del self.pending[member_id]
            else:
                error = self.validate_member(member_id, instance_id)
                if error:
                    errors.append(error)
                    continue
                self.remove(member_id)
            errors.append(NONE)
            removed = True
        if removed:
            if self.state in (STABLE, COMPLETING):
                self.prepare_rebalance()
            elif self.state == PREPARING:
                self.maybe_complete_join()
        self.answer(ticket, tuple(errors))

    # ------------------------------------------------------------------ time
    def timers(self) -> list[tuple[int, tuple]]:
        due = [(m.deadline, ("session", x)) for x, m in self.members.items() if m.deadline is not None]
        due += [(at, ("pending", x)) for x, at in self.pending.items()]
        if self.join_timer is not None:
            due.append((self.join_timer[0], ("join",)))
        if self.sync_timer is not None:
            due.append((self.sync_timer[0], ("sync",)))
        return due

    def advance(self, ms: int) -> None:
        """Fire every timer due by now + ms in time order; same-millisecond timers in any order."""
        target = self.now + ms
        while True:
            due = [(at, key) for at, key in self.timers() if at <= target]
            if not due:
                break
            first = min(at for at, _ in due)
            self.now = max(self.now, first)
            self.fire(self.choose(sorted(key for at, key in due if at == first)))
        self.now = target

    def fire(self, key: tuple) -> None:
        kind = key[0]
        if kind == "pending":
            del self.pending[key[1]]
            if self.state == PREPARING and self.all_joined():
                self.complete_join()
        elif kind == "session":
            m = self.members[key[1]]
            m.deadline = None
            waiting = m.join_ticket is not None or m.sync_ticket is not None
            if m.is_new or not waiting:  # a member waiting in a rebalance is alive, unless still new
                self.expire(m.member_id)
        elif kind == "join":
            timer, self.join_timer = self.join_timer, None
            if timer[1] == "initial" and self.new_member_added and timer[3] != 0:
                self.new_member_added = False  # someone joined during the delay: wait a little more
                delay = min(self.initial_delay_ms, timer[3])
                self.join_timer = (self.now + delay, "initial", delay, max(timer[3] - timer[2], 0))
            else:
                self.complete_join()
        else:
            (_, generation), self.sync_timer = self.sync_timer, None
            if generation == self.generation and self.state in (COMPLETING, STABLE) and self.pending_sync:
                for member_id in sorted(self.pending_sync):
                    self.remove(member_id)
                self.prepare_rebalance()

    # ------------------------------------------------------------------ symbolic member ids
    def rename(self, old: str, new: str) -> None:
        """Bind a model-made member id to the one the server chose."""
        def sub(x):
            return new if x == old else x
        self.members = {sub(k): v for k, v in self.members.items()}
        for m in self.members.values():
            m.member_id = sub(m.member_id)
        self.pending = {sub(k): v for k, v in self.pending.items()}
        self.pending_sync = {sub(x) for x in self.pending_sync}
        self.leader = sub(self.leader)

    def key(self) -> str:
        return repr({k: v for k, v in vars(self).items() if k not in ("answers", "choose")})


def outcomes(world: GroupModel, step: Callable[[GroupModel], None]) -> Iterator[GroupModel]:
    """Every world `step` can lead to, one per sequence of choices it makes (answers in `.answers`)."""
    paths: list[tuple[int, ...]] = [()]
    while paths:
        path = paths.pop()
        taken: list[int] = []
        widths: list[int] = []

        def choose(options, path=path, taken=taken, widths=widths):
            options = list(options)
            if len(options) == 1:
                return options[0]
            index = path[len(taken)] if len(taken) < len(path) else 0
            taken.append(index)
            widths.append(len(options))
            return options[index]

        w = copy.deepcopy(world)
        w.answers = {}
        w.choose = choose
        step(w)
        w.choose = GroupModel.choose
        for depth in range(len(path), len(widths)):
            for alternative in range(1, widths[depth]):
                paths.append(tuple(taken[:depth]) + (alternative,))
        yield w
