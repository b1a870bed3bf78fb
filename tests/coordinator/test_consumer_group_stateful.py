"""Hypothesis drives the consumer group engine with clients that behave as KIP-848 says (report what
they hold, adopt each assignment they are given) and checks it against `consumer_group_model`."""
from __future__ import annotations

from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from hypothesis import strategies as st

from cohort.coordinator.groups.classic.events import Heartbeat, JoinGroup, JoinRequest, LeaveGroup, SyncGroup
from cohort.coordinator.groups.consumer.engine import TopicMetadata
from cohort.coordinator.groups.consumer.events import TopicsChanged
from cohort.protocol.consumer_protocol import (
    ConsumerProtocolSubscription,
    decode_assignment,
    encode_subscription,
)
from cohort.protocol.errors import ErrorCode
from tests.coordinator.consumer_group_driver import Driver, tid
from tests.coordinator.consumer_group_model import ReconciliationModel

NAMES = ["t0", "t1", "t2"]
MEMBERS = ["m0", "m1", "m2", "m3", "m4"]
CLASSIC = ["c0", "c1"]  # members speaking the classic protocol inside the consumer group
BY_ID = {tid(name): name for name in NAMES}


def image(counts: dict[str, int]) -> dict[str, TopicMetadata]:
    return {name: TopicMetadata(tid(name), n) for name, n in counts.items()}


class ConsumerGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.counts = {"t0": 3, "t1": 2, "t2": 4}
        # No downgrade: the group stays a consumer group whoever leaves (downgrades have their own tests).
        self.driver = Driver(image=image(self.counts), session_timeout_ms=45_000, heartbeat_interval_ms=5_000,
                             migration_policy="upgrade")
        self.model = ReconciliationModel(self.counts)
        self.assignor = None
        self.generations: dict[str, int] = {}

    # ---- clients -------------------------------------------------------------------------
    def _heartbeat(self, member_id: str, **fields) -> None:
        if member_id in CLASSIC:
            return self._classic_heartbeat(member_id)
        member = self.model.live[member_id]
        held = {}
        for t, p in member.held:
            held.setdefault(tid(t), []).append(p)
        r = self.driver.heartbeat(member_id, member.epoch, topic_partitions=sorted(held.items()), **fields)
        if r.error == ErrorCode.UNKNOWN_MEMBER_ID:  # fenced while we were not looking
            assert member_id not in self.driver.group.members
            self.model.removed(member_id)
            return
        assert r.error == ErrorCode.NONE, r
        self._answered(member_id, r)

    def _answered(self, member_id, r) -> None:
        self._sync_removals()  # a member fenced meanwhile has abandoned its partitions
        assignment = None
        if r.assignment is not None:
            assignment = {(BY_ID[t], p) for t, ps in r.assignment for p in ps}
        self.model.answered(member_id, r.member_epoch, assignment)

    def _classic_join(self, member_id: str, topics: frozenset[str]) -> None:
        """A cooperative classic client: JoinGroup listing what it holds, then SyncGroup."""
        member = self.model.live[member_id]
        owned = {}
        for t, p in member.held:
            owned.setdefault(t, []).append(p)
        metadata = encode_subscription(ConsumerProtocolSubscription(
            topics=sorted(topics),
            owned_partitions=[ConsumerProtocolSubscription.TopicPartition(t, sorted(ps)) for t, ps in owned.items()]), 1)
        self.driver.next_request += 1
        (j,) = self.driver.send(JoinGroup(self.driver.next_request, JoinRequest(
            member_id=member_id, group_instance_id=None, client_id="classic", client_host="h",
            session_timeout_ms=45_000, rebalance_timeout_ms=60_000, protocol_type="consumer",
            protocols=[("cooperative-sticky", metadata)], require_known_member_id=False)))
        assert j.error == ErrorCode.NONE, j
        self.driver.next_request += 1
        (sync,) = self.driver.send(SyncGroup(self.driver.next_request, member_id, None, j.generation_id, "consumer",
                                             j.protocol_name, {}))
        assert sync.error == ErrorCode.NONE, sync
        assignment = {(tp.topic, p) for tp in decode_assignment(sync.assignment).assigned_partitions
                      for p in tp.partitions}
        self.generations[member_id] = j.generation_id
        self._sync_removals()
        self.model.answered(member_id, j.generation_id, assignment)

    def _classic_heartbeat(self, member_id: str) -> None:
        (code,) = self.driver.send(Heartbeat(member_id, None, self.generations[member_id]))
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            assert member_id not in self.driver.group.members
            self.model.removed(member_id)
            return
        assert code in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS), code
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self._classic_join(member_id, self.model.live[member_id].topics)

    def _sync_removals(self) -> None:
        for member_id in list(self.model.live):
            if member_id not in self.driver.group.members:
                self.model.removed(member_id)

    @rule(member_id=st.sampled_from(MEMBERS), topics=st.sets(st.sampled_from(NAMES)),
          assignor=st.sampled_from([None, "uniform", "range"]))
    def join(self, member_id, topics, assignor):
        if member_id in self.model.live:
            return
        if assignor is not None:
            self.assignor = assignor
        r = self.driver.join(member_id, topics=sorted(topics), server_assignor=self.assignor)
        assert r.error == ErrorCode.NONE, r
        self.model.joined(member_id, frozenset(topics))
        self._answered(member_id, r)

    @rule(member_id=st.sampled_from(CLASSIC), topics=st.sets(st.sampled_from(NAMES), min_size=1))
    def classic_join(self, member_id, topics):
        if member_id in self.model.live:
            return
        self.model.joined(member_id, frozenset(topics))
        self._classic_join(member_id, frozenset(topics))

    @precondition(lambda self: self.model.live)
    @rule(data=st.data())
    def heartbeat(self, data):
        self._heartbeat(data.draw(st.sampled_from(sorted(self.model.live))))

    @precondition(lambda self: self.model.live)
    @rule(data=st.data(), topics=st.sets(st.sampled_from(NAMES)))
    def resubscribe(self, data, topics):
        consumers = sorted(m for m in self.model.live if m not in CLASSIC)
        if not consumers:
            return
        member_id = data.draw(st.sampled_from(consumers))
        self.model.resubscribed(member_id, frozenset(topics))
        self._heartbeat(member_id, subscribed_topic_names=sorted(topics))

    @precondition(lambda self: self.model.live)
    @rule(data=st.data())
    def leave(self, data):
        member_id = data.draw(st.sampled_from(sorted(self.model.live)))
        epoch = self.model.live[member_id].epoch
        if member_id in CLASSIC:
            assert self.driver.send(LeaveGroup([(member_id, None, "test")])) == [[ErrorCode.NONE]]
        else:
            r = self.driver.heartbeat(member_id, -1)
            assert (r.error, r.member_epoch) == (ErrorCode.NONE, -1)
        self.model.removed(member_id)
        assert self.driver.group.validate_offset_commit(member_id, None, epoch, 9) != ErrorCode.NONE

    @precondition(lambda self: self.model.live)
    @rule(data=st.data())
    def crash(self, data):
        """A member stops heartbeating; the others go on every 5 s until its session expires."""
        member_id = data.draw(st.sampled_from(sorted(self.model.live)))
        epoch = self.model.live[member_id].epoch
        for _ in range(12):
            self.driver.advance(5_000)
            for other in sorted(self.model.live):
                if other != member_id and other in self.model.live:
                    self._heartbeat(other)
            if member_id not in self.driver.group.members:
                break
        assert member_id not in self.driver.group.members, "a crashed member outlived its session"
        self.model.removed(member_id)
        self._sync_removals()
        assert self.driver.group.validate_offset_commit(member_id, None, epoch, 9) == ErrorCode.UNKNOWN_MEMBER_ID

    @rule(name=st.sampled_from(NAMES), more=st.integers(1, 3))
    def add_partitions(self, name, more):
        self.counts[name] += more
        self.driver.send(TopicsChanged(image(self.counts)))
        self.model.topics_changed(self.counts)

    @precondition(lambda self: self.model.live)
    @rule()
    def converge(self):
        """Membership stops changing: within a few rounds of heartbeats everything is assigned once."""
        for _ in range(6):
            for member_id in sorted(self.model.live):
                if member_id in self.model.live:
                    self._heartbeat(member_id)
        self.model.check_converged()
        group = self.driver.group
        for member_id, member in self.model.live.items():
            assert group.validate_offset_commit(member_id, None, member.epoch, 9) == ErrorCode.NONE

    @invariant()
    def nobody_holds_a_partition_twice(self):
        self.model.check_no_partition_held_twice()

    @invariant()
    def the_group_epoch_follows_kafkas_rule(self):
        self.model.check_group_epoch(self.driver.group.group_epoch)

    @invariant()
    def the_group_state_is_what_its_members_and_epochs_say(self):
        g = self.driver.group
        if not g.members:
            expected = "Empty"
        elif g.group_epoch > g.target_assignment_epoch:
            expected = "Assigning"
        elif all(m.state.name == "STABLE" and m.member_epoch == g.target_assignment_epoch for m in g.members.values()):
            expected = "Stable"
        else:
            expected = "Reconciling"
        assert str(g.state) == expected


ConsumerGroupMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=30, deadline=None)
TestConsumerGroupReconciliation = ConsumerGroupMachine.TestCase
