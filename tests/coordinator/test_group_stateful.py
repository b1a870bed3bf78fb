"""Hypothesis stateful test: random clients against the real GroupCoordinator, checked by an independent model.

Up to four clients (dynamic or static; group.max.size is 3) join with old and new JoinGroup
versions and protocol lists (one sharing nothing with the others), sync (sometimes with a stale
generation, sometimes with an assignment missing a member), heartbeat, commit offsets (as members,
anonymously, with stale generations), leave, get replaced by a new process with the same
group.instance.id (whose old process carries on and must be fenced), retry a JoinGroup that is
still parked, and time jumps forward. Every request goes through the coordinator's request API
exactly as the server sends it (`ServerDriver`, the only part that knows Cohort's API);
`classic_group_model` states Kafka's rules on its own.

After every step:
* the set of requests answered, and each answer, equals what the model predicts in at least one
  world it considers possible (several worlds when Kafka leaves a choice: leader pick, timer ties);
* at most one generation is live: a Heartbeat, SyncGroup or member OffsetCommit is only accepted
  for the newest generation any JoinGroup answer has announced;
* nothing is logged at ERROR (an exception in a timer callback or a task would be).
At the end, after long enough for every session and join phase to run out, no request is parked.
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

import classic_group_model as model
from classic_group_model import ANY_ERROR, GroupModel, JoinAnswer, SyncAnswer, outcomes
from group_harness import Harness, subscription

GROUP = "g"
CLIENT_ID = "client"  # the harness's RequestContext client id: dynamic member ids start with it
INITIAL_DELAY_MS = 3_000
MAX_SIZE = 3  # group.max.size, below the four clients
NEW_MEMBER_JOIN_TIMEOUT_MS = 5_000  # shorter than the rebalance timeouts, so new members can expire mid-phase
SESSION_MS = [10_000, 12_000, 9_000, 15_000]
REBALANCE_MS = [8_000, 6_000, 8_000, 11_000]
PROTOCOL_SETS = [
    (("range", subscription("t")),),
    (("roundrobin", subscription("t")), ("range", subscription("t"))),
    (("roundrobin", subscription("t")),),  # shares nothing with the first: INCONSISTENT_GROUP_PROTOCOL
]
MAX_WORLDS = 500


# ---------------------------------------------------------------------------------------------
# The adapter: the only code that knows Cohort's request API. Pointing the test at another
# engine means rewriting this class (same methods, same normalized answers).
# ---------------------------------------------------------------------------------------------
class ServerDriver:
    """Sends requests to a GroupCoordinator over a real OffsetsLog and reports answers as the model spells them."""

    def __init__(self, loop: asyncio.AbstractEventLoop, data_dir: Path) -> None:
        self.loop = loop
        self.h = Harness(data_dir, group_initial_rebalance_delay_ms=INITIAL_DELAY_MS,
                         group_new_member_join_timeout_ms=NEW_MEMBER_JOIN_TIMEOUT_MS, group_max_size=MAX_SIZE)
        self.loop.run_until_complete(self.h.start())
        self.in_flight: dict[int, tuple[asyncio.Future, object]] = {}  # ticket -> (task, normalizer)

    def _send(self, ticket: int, request, normalize) -> dict[int, object]:
        """Start `request()` on the loop, let everything runnable finish, return what got answered."""
        async def go() -> None:
            self.in_flight[ticket] = (asyncio.ensure_future(request()), normalize)
            await self.h.settle()
        self.loop.run_until_complete(go())
        return self._collect()

    def _collect(self) -> dict[int, object]:
        done = {t: f for t, f in self.in_flight.items() if f[0].done()}
        for t in done:
            del self.in_flight[t]
        return {t: normalize(task.result()) for t, (task, normalize) in done.items()}

    def parked(self) -> list[int]:
        return sorted(self.in_flight)

    def join(self, ticket, member_id, instance_id, version, protocol_type, protocols, session_ms, rebalance_ms):
        return self._send(ticket, lambda: self.h.join(
            GROUP, member_id, version=version, instance_id=instance_id, protocol_type=protocol_type,
            protocols=protocols, session_ms=session_ms, rebalance_ms=rebalance_ms), _join_answer)

    def sync(self, ticket, member_id, instance_id, generation, protocol_type, protocol, assignments):
        return self._send(ticket, lambda: self.h.sync(
            GROUP, member_id, generation, assignments, version=5, instance_id=instance_id,
            protocol_type=protocol_type, protocol_name=protocol), _sync_answer)

    def heartbeat(self, ticket, member_id, instance_id, generation):
        return self._send(ticket, lambda: self.h.heartbeat(GROUP, member_id, generation, instance_id=instance_id),
                          int)

    def commit(self, ticket, member_id, instance_id, generation, version):
        return self._send(ticket, lambda: self.h.commit(
            GROUP, {("t", 0): 1}, member_id=member_id, generation=generation, instance_id=instance_id,
            version=version), lambda errors: int(errors[("t", 0)]))

    def leave(self, ticket, entries):
        return self._send(ticket, lambda: self.h.leave(GROUP, entries), _leave_answer)

    def advance(self, ms: int) -> dict[int, object]:
        self.loop.run_until_complete(self.h.advance(ms))
        return self._collect()

    def close(self) -> None:
        self.loop.run_until_complete(self.h.close())


def _join_answer(r) -> JoinAnswer:
    if r.error_code == model.NONE:
        members = frozenset((x.member_id, x.group_instance_id, bytes(x.metadata)) for x in r.members)
        return JoinAnswer(0, r.member_id, r.generation_id, r.protocol_name, r.leader, members, r.skip_assignment)
    if r.error_code == model.MEMBER_ID_REQUIRED:
        return JoinAnswer(r.error_code, r.member_id)
    return JoinAnswer(r.error_code)


def _sync_answer(r) -> SyncAnswer:
    return SyncAnswer(r.error_code, bytes(r.assignment) if r.error_code == 0 else b"")


def _leave_answer(r):
    return ("top-level", r.error_code) if r.error_code else tuple(x.error_code for x in r.members)


# ---------------------------------------------------------------------------------------------
# Checking answers against the model
# ---------------------------------------------------------------------------------------------
def _agrees(predicted, observed) -> bool:
    if isinstance(predicted, (JoinAnswer, SyncAnswer)):
        if type(observed) is not type(predicted):
            return False
        if predicted.error == ANY_ERROR:
            return observed.error != model.NONE
    return predicted == observed


def _rename_answer(answer, old: str, new: str):
    if not isinstance(answer, JoinAnswer):
        return answer
    def sub(x):
        return new if x == old else x
    return JoinAnswer(answer.error, sub(answer.member_id), answer.generation, answer.protocol, sub(answer.leader),
                      frozenset((sub(i), inst, meta) for i, inst, meta in answer.members), answer.skip_assignment)


def explain(world: GroupModel, observed: dict, seen_ids: set[str]) -> GroupModel | None:
    """`world` after the step if its answers are the observed ones (binding new member ids), else None."""
    predicted = dict(world.answers)
    if set(predicted) != set(observed):
        return None
    for ticket, p in list(predicted.items()):
        o = observed[ticket]
        if isinstance(p, JoinAnswer) and p.member_id.startswith("?") and isinstance(o, JoinAnswer) \
                and p.error == o.error:
            prefix = p.member_id.split(":", 1)[1] + "-"
            if o.member_id in seen_ids or not o.member_id.startswith(prefix):
                return None  # Kafka: clientId (or group.instance.id) + "-" + a fresh UUID
            world.rename(p.member_id, o.member_id)
            predicted = {t: _rename_answer(a, p.member_id, o.member_id) for t, a in predicted.items()}
    if all(_agrees(predicted[t], observed[t]) for t in predicted):
        world.answers = {}
        return world
    return None


class Client:
    def __init__(self, index: int, static: bool) -> None:
        self.name = f"c{index}"
        self.instance_id = f"i{index}" if static else None
        self.session_ms = SESSION_MS[index]
        self.rebalance_ms = REBALANCE_MS[index]
        self.protocols = PROTOCOL_SETS[0]
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader_members: list[str] = []
        self.join_ticket: int | None = None
        self.sync_ticket: int | None = None
        self.replaced: tuple[str, int] | None = None  # (member id, generation) of the process it replaced


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class GroupAgainstModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="cohort-group-model-"))
        self.errors = _Errors()
        for name in ("cohort", "asyncio"):
            logging.getLogger(name).addHandler(self.errors)
        self.server = ServerDriver(self.loop, self.dir)
        self.worlds = [GroupModel(INITIAL_DELAY_MS, NEW_MEMBER_JOIN_TIMEOUT_MS, MAX_SIZE)]
        self.clients: list[Client] = []
        self.tickets = 0
        self.requests: dict[int, tuple] = {}  # ticket -> (client, kind, generation sent)
        self.seen_ids: set[str] = set()
        self.newest_generation = -1

    # ------------------------------------------------------------------ one step
    def step(self, actions: list[tuple]) -> None:
        """Run actions on the server one by one (each settled), then check every answer against the model."""
        observed: dict[int, object] = {}
        for action in actions:
            name, args = action[0], action[1:]
            observed.update(getattr(self.server, name)(*args))

        def run(w: GroupModel) -> None:
            for name, *args in actions:
                getattr(w, name)(*args, **({"client_id": CLIENT_ID} if name == "join" else {}))

        worlds: dict[str, GroupModel] = {}
        for world in self.worlds:
            for after in outcomes(world, run):
                explained = explain(after, observed, self.seen_ids)
                if explained is not None:
                    worlds.setdefault(explained.key(), explained)
        if not worlds:
            predictions = [dict(w.answers) for w in list(outcomes(self.worlds[0], run))[:3]]
            raise AssertionError(f"no world explains the server's answers\n  actions: {actions}\n"
                                 f"  server: {observed}\n  model predicted (first worlds): {predictions}\n"
                                 f"  model before: {self.worlds[0]}")
        assert len(worlds) <= MAX_WORLDS, len(worlds)
        self.worlds = list(worlds.values())
        self._react(observed)

    def _ticket(self, client: Client | None, kind: str, generation: int = -1) -> int:
        self.tickets += 1
        self.requests[self.tickets] = (client, kind, generation)
        return self.tickets

    def _react(self, observed: dict) -> None:
        """What a client does with an answer; also the one-live-generation check."""
        for ticket, answer in sorted(observed.items()):
            client, kind, sent_generation = self.requests.pop(ticket)
            if kind == "join":
                if answer.member_id:
                    self.seen_ids.add(answer.member_id)
                if answer.error == model.NONE:
                    assert answer.generation >= self.newest_generation, (answer, self.newest_generation)
                    self.newest_generation = answer.generation
                if client.join_ticket != ticket:
                    continue  # an older request of this client (superseded or fenced)
                client.join_ticket = None
                if answer.error == model.NONE:
                    client.member_id, client.generation = answer.member_id, answer.generation
                    client.protocol = answer.protocol
                    client.leader_members = sorted(m for m, _, _ in answer.members)
                elif answer.error == model.MEMBER_ID_REQUIRED:
                    client.member_id, client.generation = answer.member_id, -1
                elif answer.error in (model.UNKNOWN_MEMBER_ID, model.FENCED_INSTANCE_ID,
                                      model.GROUP_MAX_SIZE_REACHED):
                    client.member_id, client.generation = "", -1
                continue
            accepted = (answer.error if kind == "sync" else answer) == model.NONE
            if kind in ("sync", "heartbeat", "member-commit") and accepted and sent_generation >= 0:
                # Only the newest generation is live: nothing older is ever accepted.
                assert sent_generation == self.newest_generation, (kind, sent_generation, self.newest_generation)
            if client is None:
                continue  # a replaced process: its answers were checked, it has no state to update
            if kind == "sync":
                if client.sync_ticket == ticket:
                    client.sync_ticket = None
                if answer.error in (model.UNKNOWN_MEMBER_ID, model.FENCED_INSTANCE_ID):
                    client.member_id, client.generation = "", -1
            elif kind == "heartbeat" and answer in (model.UNKNOWN_MEMBER_ID, model.FENCED_INSTANCE_ID):
                client.member_id, client.generation = "", -1
            elif kind == "heartbeat" and answer == model.ILLEGAL_GENERATION:
                client.generation = -1

    # ------------------------------------------------------------------ rules
    @initialize(n=st.integers(1, 4), static=st.lists(st.booleans(), min_size=4, max_size=4))
    def make_clients(self, n, static):
        self.clients = [Client(i, static[i]) for i in range(n)]

    def _join_action(self, c: Client, member_id: str, version: int) -> tuple:
        c.join_ticket = self._ticket(c, "join")
        return ("join", c.join_ticket, member_id, c.instance_id, version, "consumer", c.protocols, c.session_ms,
                c.rebalance_ms)

    @rule(data=st.data(), version=st.sampled_from([3, 4, 5, 7, 9]),
          protocols=st.sampled_from(PROTOCOL_SETS[:2] * 2 + PROTOCOL_SETS[2:]), retry=st.booleans())
    def join(self, data, version, protocols, retry):
        """A JoinGroup with what the client knows; `retry` resends while the last one is still parked."""
        c = data.draw(st.sampled_from(self.clients))
        if c.join_ticket is not None and not retry:
            return
        if c.instance_id is not None and version < 5:
            version = 7  # a static client always sends its instance id (v5+)
        c.protocols = protocols
        self.step([self._join_action(c, c.member_id, version)])

    @rule(data=st.data(), version=st.sampled_from([5, 7, 9]))
    def static_replacement(self, data, version):
        """A new process with the same group.instance.id (a restarted pod) joins without a member id."""
        statics = [c for c in self.clients if c.instance_id is not None]
        if not statics:
            return
        c = data.draw(st.sampled_from(statics))
        if c.member_id:
            c.replaced = (c.member_id, c.generation)
        c.member_id, c.generation = "", -1
        self.step([self._join_action(c, "", version)])

    @rule(data=st.data(), kind=st.sampled_from(["heartbeat", "sync", "member-commit", "leave"]))
    def replaced_process_carries_on(self, data, kind):
        """The old process of a replaced static member hasn't noticed yet: it must be fenced."""
        replaced = [c for c in self.clients if c.replaced is not None]
        if not replaced:
            return
        c = data.draw(st.sampled_from(replaced))
        member_id, generation = c.replaced
        ticket = self._ticket(None, kind, generation)
        if kind == "heartbeat":
            self.step([("heartbeat", ticket, member_id, c.instance_id, generation)])
        elif kind == "sync":
            self.step([("sync", ticket, member_id, c.instance_id, generation, "consumer", "range", {})])
        elif kind == "member-commit":
            self.step([("commit", ticket, member_id, c.instance_id, generation, 8)])
        else:
            self.step([("leave", ticket, [(member_id, c.instance_id)])])

    @rule(data=st.data(), stale=st.booleans(), drop_one=st.booleans())
    def sync(self, data, stale, drop_one):
        c = data.draw(st.sampled_from(self.clients))
        if c.sync_ticket is not None or not c.member_id or c.generation < 0:
            return
        targets = c.leader_members[1:] if drop_one else c.leader_members
        assignments = {m: f"assign-{m}".encode() for m in targets}
        generation = c.generation - 1 if stale else c.generation
        c.sync_ticket = self._ticket(c, "sync", generation)
        self.step([("sync", c.sync_ticket, c.member_id, c.instance_id, generation, "consumer", c.protocol,
                    assignments)])

    @rule(data=st.data(), stale=st.booleans())
    def heartbeat(self, data, stale):
        c = data.draw(st.sampled_from(self.clients))
        generation = c.generation - 1 if stale else c.generation
        self.step([("heartbeat", self._ticket(c, "heartbeat", generation), c.member_id, c.instance_id, generation)])

    @rule(data=st.data(), how=st.sampled_from(["member", "stale", "anonymous"]), version=st.sampled_from([8, 9]))
    def commit(self, data, how, version):
        c = data.draw(st.sampled_from(self.clients))
        if how == "anonymous":  # an admin tool or a standalone consumer
            member_id, instance_id, generation, kind = "", None, -1, "commit"
        else:
            member_id, instance_id, kind = c.member_id, c.instance_id, "member-commit"
            generation = c.generation - 1 if how == "stale" else c.generation
        ticket = self._ticket(c, kind, generation)
        self.step([("commit", ticket, member_id, instance_id, generation, version)])

    @rule(data=st.data(), by_instance=st.booleans())
    def leave(self, data, by_instance):
        c = data.draw(st.sampled_from(self.clients))
        entry = ("", c.instance_id) if by_instance and c.instance_id else (c.member_id, c.instance_id)
        self.step([("leave", self._ticket(c, "leave"), [entry])])
        c.member_id, c.generation = "", -1

    @rule()
    def everyone_rejoins_and_syncs(self):
        """The happy path in one go, so random runs reach Stable generations often."""
        joins = [self._join_action(c, c.member_id, 7) for c in self.clients if c.join_ticket is None]
        self.step(joins)
        retries = [self._join_action(c, c.member_id, 7) for c in self.clients
                   if c.join_ticket is None and c.member_id and c.generation < 0]
        self.step(retries + [("advance", INITIAL_DELAY_MS)])
        syncs = []
        for c in self.clients:
            if c.sync_ticket is None and c.member_id and c.generation >= 0:
                c.sync_ticket = self._ticket(c, "sync", c.generation)
                syncs.append(("sync", c.sync_ticket, c.member_id, c.instance_id, c.generation, "consumer",
                              c.protocol, {m: f"assign-{m}".encode() for m in c.leader_members}))
        self.step(syncs)

    @rule(ms=st.sampled_from([0, 1000, 2999, 3000, 6000, 8000, 10_000, 30_000]))
    def time_passes(self, ms):
        self.step([("advance", ms)])

    # ------------------------------------------------------------------ invariants
    @invariant()
    def nothing_logged_as_error(self):
        assert not self.errors.records, [r.getMessage() for r in self.errors.records]

    @invariant()
    def parked_requests_are_the_same_on_both_sides(self):
        server = set(self.server.parked())
        for w in self.worlds:
            model_parked = {m.join_ticket for m in w.members.values() if m.join_ticket is not None}
            model_parked |= {m.sync_ticket for m in w.members.values() if m.sync_ticket is not None}
            assert model_parked == server, (model_parked, server)

    def teardown(self):
        try:
            for _ in range(10):  # long enough for every join phase and session to run out
                self.step([("advance", 60_000)])
            assert not self.server.parked(), f"requests never answered: {self.server.parked()}"
        finally:
            try:
                self.server.close()
            finally:
                for name in ("cohort", "asyncio"):
                    logging.getLogger(name).removeHandler(self.errors)
                self.loop.close()
                shutil.rmtree(self.dir, ignore_errors=True)


GroupAgainstModel.TestCase.settings = settings(
    max_examples=150, stateful_step_count=50, deadline=None, report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_classic_group_follows_kafka_rules = GroupAgainstModel.TestCase
