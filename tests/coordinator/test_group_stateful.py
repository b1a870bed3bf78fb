"""Hypothesis stateful test: random client behaviour against one group, checked against a model.

Clients join (old and new versions, static or dynamic), sync, heartbeat, commit, leave, get
replaced by a new static instance, and time jumps forward. After every step:

* transitions only ever follow the table (an illegal one raises inside the group and fails here);
* every Heartbeat and OffsetCommit answer equals what Kafka's validation order predicts from the
  group as it was just before the request (the fencing model below);
* anything accepted with a generation carries the current one: at most one generation is live;
* no member outlives its session: a member not parked in Join/Sync has a session timer in the future;
* the group's bookkeeping is consistent (leader, static index, pending sync, parked requests);
* at the end, every parked request has been answered.
"""
from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from cohort.coordinator.group import GroupState
from group_harness import E, Harness, subscription

S = GroupState
GROUP = "g"
SESSION_MS = 10_000
REBALANCE_MS = 8_000
PROTOCOL_SETS = [
    (("range", subscription("t")),),
    (("roundrobin", subscription("t")), ("range", subscription("t"))),
]


class Client:
    def __init__(self, name: str, instance_id: str | None) -> None:
        self.name = name
        self.instance_id = instance_id
        self.member_id = ""
        self.generation = -1
        self.join_task: asyncio.Task | None = None
        self.sync_task: asyncio.Task | None = None
        self.leader_members: list[str] = []
        self.protocols = PROTOCOL_SETS[0]


def expected_heartbeat(group, member_id: str, instance_id: str | None, generation: int) -> int:
    """Kafka's Heartbeat checks, in order (reference §3.6)."""
    if group is None:
        return E.UNKNOWN_MEMBER_ID
    error = expected_member_error(group, member_id, instance_id)
    if error:
        return error
    if generation != group.generation_id:
        return E.ILLEGAL_GENERATION
    if group.state is S.EMPTY:
        return E.UNKNOWN_MEMBER_ID
    if group.state is S.PREPARING_REBALANCE:
        return E.REBALANCE_IN_PROGRESS
    return E.NONE


def expected_member_error(group, member_id: str, instance_id: str | None) -> int:
    if instance_id is not None:
        owner = {m.group_instance_id: m.member_id for m in group.members.values() if m.group_instance_id}.get(instance_id)
        if owner is None:
            return E.UNKNOWN_MEMBER_ID
        return E.NONE if owner == member_id else E.FENCED_INSTANCE_ID
    return E.NONE if member_id in group.members else E.UNKNOWN_MEMBER_ID


def expected_commit(group, member_id: str, instance_id: str | None, generation: int) -> int:
    """Kafka's OffsetCommit checks for a v8 request (reference §3.9)."""
    if group is None:
        return E.NONE if generation < 0 else E.ILLEGAL_GENERATION
    if generation < 0 and group.state is S.EMPTY:
        return E.NONE
    if generation >= 0 or member_id or instance_id is not None:
        error = expected_member_error(group, member_id, instance_id)
        if error:
            return error
        if generation != group.generation_id:
            return E.ILLEGAL_GENERATION
    elif group.state is not S.EMPTY:
        return E.UNKNOWN_MEMBER_ID
    if group.state is S.COMPLETING_REBALANCE:
        return E.REBALANCE_IN_PROGRESS
    return E.NONE


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="cohort-group-"))
        self.h = Harness(self.dir, group_initial_rebalance_delay_ms=0, group_new_member_join_timeout_ms=30_000)
        self.run(self.h.start())
        self.errors = _Errors()
        logging.getLogger("cohort").addHandler(self.errors)
        self.clients: list[Client] = []

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    @property
    def group(self):
        return self.h.group(GROUP)

    async def _settle_and_collect(self) -> None:
        await self.h.settle()
        for c in self.clients:
            if c.join_task is not None and c.join_task.done():
                r = c.join_task.result()
                c.join_task = None
                if r.error_code == E.NONE:
                    c.member_id, c.generation = r.member_id, r.generation_id
                    c.leader_members = [x.member_id for x in r.members]
                elif r.error_code == E.MEMBER_ID_REQUIRED:
                    c.member_id = r.member_id
                elif r.error_code == E.UNKNOWN_MEMBER_ID:
                    c.member_id, c.generation = "", -1
            if c.sync_task is not None and c.sync_task.done():
                r = c.sync_task.result()
                c.sync_task = None
                if r.error_code == E.NONE:
                    # An assignment is only ever handed out for the group's current, Stable generation.
                    g = self.group
                    assert g is not None and g.state is S.STABLE and c.generation == g.generation_id, (c.name, g)
                    assert r.assignment == g.members[c.member_id].assignment
                elif r.error_code == E.UNKNOWN_MEMBER_ID:
                    c.member_id, c.generation = "", -1

    def step(self, coro_fn) -> None:
        async def go():
            result = await coro_fn()
            await self._settle_and_collect()
            return result
        return self.run(go())

    # ------------------------------------------------------------------ rules
    @initialize(n=st.integers(1, 4), static=st.lists(st.booleans(), min_size=4, max_size=4))
    def make_clients(self, n, static):
        self.clients = [Client(f"c{i}", f"i{i}" if static[i] else None) for i in range(n)]

    @rule(data=st.data(), version=st.sampled_from([3, 4, 7, 9]), protocols=st.sampled_from(PROTOCOL_SETS))
    def join(self, data, version, protocols):
        c = data.draw(st.sampled_from(self.clients))
        if c.join_task is not None:
            return
        c.protocols = protocols
        if c.instance_id is not None and version < 5:
            version = 7  # a static client always sends its instance id (v5+)
        instance = c.instance_id

        async def go():
            c.join_task = self.h.join(GROUP, c.member_id, version=version, instance_id=instance,
                                      protocols=protocols, session_ms=SESSION_MS, rebalance_ms=REBALANCE_MS)
        self.step(go)

    @rule(data=st.data(), stale=st.booleans())
    def sync(self, data, stale):
        c = data.draw(st.sampled_from(self.clients))
        if c.sync_task is not None or not c.member_id or c.generation < 0:
            return
        assignments = {mid: mid.encode() for mid in c.leader_members} if c.leader_members else None
        instance = c.instance_id
        generation = c.generation - 1 if stale else c.generation
        g = self.group
        expected = E.UNKNOWN_MEMBER_ID if g is None else expected_member_error(g, c.member_id, instance)
        if not expected and generation != g.generation_id:
            expected = E.ILLEGAL_GENERATION

        async def go():
            return self.h.sync(GROUP, c.member_id, generation, assignments, version=4, instance_id=instance)
        task = self.step(go)
        if expected:  # fenced: answered at once, with exactly that error
            assert task.done() and task.result().error_code == expected, (task, expected, g)
        else:
            c.sync_task = task
            self.run(self._settle_and_collect())

    @rule(data=st.data(), stale=st.booleans())
    def heartbeat(self, data, stale):
        c = data.draw(st.sampled_from(self.clients))
        generation = c.generation - 1 if stale else c.generation
        expected = expected_heartbeat(self.group, c.member_id, c.instance_id, generation)
        before_generation = self.group.generation_id if self.group else None

        async def go():
            return await self.h.heartbeat(GROUP, c.member_id, generation, instance_id=c.instance_id)
        got = self.step(go)
        assert got == expected, (got, expected, self.group)
        if got == E.NONE:
            assert generation == before_generation  # only the current generation is live
        elif got == E.UNKNOWN_MEMBER_ID:
            c.member_id, c.generation = "", -1

    @rule(data=st.data(), with_identity=st.booleans())
    def commit(self, data, with_identity):
        c = data.draw(st.sampled_from(self.clients))
        member_id, instance, generation = (c.member_id, c.instance_id, c.generation) if with_identity else ("", None, -1)
        expected = expected_commit(self.group, member_id, instance, generation)
        before_generation = self.group.generation_id if self.group else None

        async def go():
            return await self.h.commit(GROUP, {("t", 0): 1}, member_id=member_id, generation=generation,
                                       instance_id=instance)
        got = self.step(go)
        assert got == {("t", 0): expected}, (got, expected, self.group)
        if expected == E.NONE and generation >= 0:
            assert generation == before_generation

    @rule(data=st.data(), by_instance=st.booleans())
    def leave(self, data, by_instance):
        c = data.draw(st.sampled_from(self.clients))
        entry = ("", c.instance_id) if by_instance and c.instance_id else (c.member_id, c.instance_id)

        async def go():
            return await self.h.leave(GROUP, [entry])
        self.step(go)
        c.member_id, c.generation = "", -1

    @rule(data=st.data())
    def static_replacement(self, data):
        """A new process with the same group.instance.id (e.g. a restarted pod) joins without an id."""
        statics = [c for c in self.clients if c.instance_id is not None]
        if not statics:
            return
        c = data.draw(st.sampled_from(statics))
        if c.join_task is not None:
            return

        async def go():
            c.join_task = self.h.join(GROUP, "", version=7, instance_id=c.instance_id, protocols=c.protocols,
                                      session_ms=SESSION_MS, rebalance_ms=REBALANCE_MS)
        self.step(go)

    @rule()
    def everyone_rejoins_and_syncs(self):
        """The common happy path in one step, so random runs reach Stable generations quickly."""
        async def go():
            for c in self.clients:
                if c.join_task is None:
                    c.join_task = self.h.join(GROUP, c.member_id, version=7, instance_id=c.instance_id,
                                              protocols=c.protocols, session_ms=SESSION_MS,
                                              rebalance_ms=REBALANCE_MS)
            await self._settle_and_collect()
            for c in self.clients:  # MEMBER_ID_REQUIRED round trips
                if c.join_task is None and c.member_id and c.generation < 0:
                    c.join_task = self.h.join(GROUP, c.member_id, version=7, instance_id=c.instance_id,
                                              protocols=c.protocols, session_ms=SESSION_MS,
                                              rebalance_ms=REBALANCE_MS)
            await self._settle_and_collect()
            self.h.clock.advance(0)
            await self._settle_and_collect()
            for c in self.clients:
                if c.sync_task is None and c.member_id and c.generation >= 0:
                    c.sync_task = self.h.sync(GROUP, c.member_id, c.generation,
                                              {mid: mid.encode() for mid in c.leader_members} or None,
                                              version=4, instance_id=c.instance_id)
        self.step(go)

    @rule(ms=st.sampled_from([0, 1000, 3000, 8000, 10_000, 30_000]))
    def time_passes(self, ms):
        async def go():
            self.h.clock.advance(ms)
        self.step(go)

    # ------------------------------------------------------------------ invariants
    @invariant()
    def nothing_logged_as_error(self):
        assert not self.errors.records, [r.getMessage() for r in self.errors.records]

    @invariant()
    def bookkeeping_is_consistent(self):
        g = self.group
        if g is None:
            return
        members = g.members
        assert g.static_members == {m.group_instance_id: m.member_id for m in members.values()
                                    if m.group_instance_id is not None}
        assert g.pending_sync_members <= set(members)
        if g.state is S.EMPTY:
            assert not members and g.protocol_name is None
        if g.state in (S.COMPLETING_REBALANCE, S.STABLE):
            assert g.leader_id in members and g.protocol_name is not None
            assert all(g.protocol_name in m.protocol_names() for m in members.values())
            assert not any(m.is_awaiting_join for m in members.values())
        if g.state is not S.COMPLETING_REBALANCE:
            assert not any(m.is_awaiting_sync for m in members.values())
        if members:
            assert g.leader_id in members
        # The O(1) count of members awaiting join (hardening, item 4) agrees with a full scan.
        assert g.awaiting_join_count() == sum(1 for m in members.values() if m.join_future is not None)

    @invariant()
    def no_member_outlives_its_session(self):
        g = self.group
        if g is None:
            return
        now = self.h.clock.now_ms()
        for member_id, m in g.members.items():
            if (m.is_awaiting_join or m.is_awaiting_sync) and not m.is_new:
                continue
            deadline = g.session_deadline_ms(member_id)
            assert deadline is not None and deadline > now, (member_id, g)
            # ...never further away than one session (or the new-member join timeout)...
            allowed = self.h.config.group_new_member_join_timeout_ms if m.is_new else m.session_timeout_ms
            assert deadline - now <= allowed, (member_id, deadline - now, allowed, g)
            # ...and watched by a live timer that fires no later than the deadline.
            handle = g._heartbeat_timers[member_id].handle
            assert not handle.cancelled and now < handle.when <= deadline, (member_id, handle.when, deadline, g)

    @invariant()
    def dynamic_members_are_those_that_joined_this_generation(self):
        """A dynamic member that misses a join phase is dropped; only static members are kept."""
        g = self.group
        if g is None or g.state not in (S.COMPLETING_REBALANCE, S.STABLE):
            return
        clients = {c.member_id: c for c in self.clients if c.member_id}
        for member_id, m in g.members.items():
            if not m.is_static:
                c = clients.get(member_id)
                assert c is not None and c.generation == g.generation_id, (member_id, g)

    @invariant()
    def parked_requests_belong_to_the_group(self):
        g = self.group
        for c in self.clients:
            if c.join_task is not None:
                assert g is not None and g.state is S.PREPARING_REBALANCE, (c.name, g)
            if c.sync_task is not None:
                assert g is not None and g.state is S.COMPLETING_REBALANCE, (c.name, g)

    def teardown(self):
        try:
            async def finish():
                for _ in range(10):  # long enough for every join phase and session to run out
                    self.h.clock.advance(60_000)
                    await self._settle_and_collect()
                assert all(c.join_task is None and c.sync_task is None for c in self.clients)
                await self.h.close()
            self.run(finish())
        finally:
            logging.getLogger("cohort").removeHandler(self.errors)
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)


GroupMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_group_state_machine_against_model = GroupMachine.TestCase
