"""The operator journal: the classic engine's journal entries, partition moves, the bounded ring of records."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bounded_wait import wait_until_async
from group_harness import Harness

from cohort.coordinator.groups.slices import JOURNAL_BUILD_OFF_LOOP
from cohort.coordinator.groups.reports.journal import GroupJournal, partition_moves
from cohort.coordinator.groups.effects import RebalanceJournaled
from cohort.coordinator.records.types import decode_record, encode_record
from cohort.protocol.consumer_protocol import ConsumerProtocolAssignment, encode_assignment
from test_group_state_machine import Driver, S


def _roles(entry: RebalanceJournaled) -> dict[str, str]:
    return {m[0]: m[4] for m in entry.members}


def test_the_first_rebalance_is_journaled_as_a_join_from_generation_0_to_1():
    d = Driver()
    (leader,) = d.stable(1)
    (entry,) = d.rebalances
    assert (entry.trigger, entry.epoch_before, entry.epoch_after, entry.state_after) == ("member_joined", 0, 1, "Stable")
    assert _roles(entry) == {leader: "cause"}
    assert entry.assignments_before == {} and entry.assignments_after == {leader: leader.encode()}


def test_a_leave_names_the_departed_member_its_client_and_the_clients_reason():
    d = Driver()
    a, b = d.stable(2)
    d.rebalances.clear()
    d.leave((b, None, "shutting down"))
    join = d.join(a)
    result = d.answers.pop(join)
    d.sync(a, result.generation_id, {a: b"all"})
    d.finish_appends()
    (entry,) = d.rebalances
    assert entry.trigger == "member_left" and entry.client_reason == "shutting down"
    assert (b, None, "c", "/h", "cause") in entry.members
    assert (entry.epoch_before, entry.epoch_after) == (1, 2)
    assert entry.assignments_before == {a: a.encode(), b: b.encode()} and entry.assignments_after == {a: b"all"}


def test_a_session_expiry_is_journaled_as_such():
    d = Driver()
    a, b = d.stable(2)
    d.rebalances.clear()
    for _ in range(3):  # a keeps heartbeating, b does not
        d.advance(400)
        d.heartbeat(a, 1)
    join = d.join(a)
    d.advance(0)
    result = d.answers.pop(join)
    d.sync(a, result.generation_id, {a: b"all"})
    d.finish_appends()
    (entry,) = d.rebalances
    assert entry.trigger == "session_expired" and _roles(entry)[b] == "cause"


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_named_as_dropped():
    d = Driver()
    a, b = d.stable(2)
    d.rebalances.clear()
    c = d.new_member()
    join_c = d.join(c)
    join_a = d.join(a)
    d.advance(900)
    d.heartbeat(b, 1)  # b is alive (its session lasts past the join phase) but does not rejoin
    d.advance(100)  # the rebalance timeout
    result = d.answers.pop(join_a)
    d.answers.pop(join_c)
    d.sync(result.leader, result.generation_id, {a: b"x", c: b"y"})
    d.sync(a if result.leader != a else c, result.generation_id)
    d.finish_appends()
    entry = d.rebalances[-1]
    assert entry.trigger == "member_joined"
    assert _roles(entry) == {c: "cause", b: "rebalance_timeout"}
    assert entry.ended_ms - entry.started_ms == 1000


def test_a_rebalance_that_empties_the_group_is_journaled_with_state_empty():
    d = Driver()
    (a,) = d.stable(1)
    d.rebalances.clear()
    d.leave((a, None, None))
    (entry,) = d.rebalances
    assert (entry.trigger, entry.state_after, entry.epoch_after) == ("member_left", "Empty", 2)
    assert d.group.state is S.EMPTY


def _assignment(*pairs: tuple[str, int]) -> bytes:
    topics: dict[str, list[int]] = {}
    for t, p in pairs:
        topics.setdefault(t, []).append(p)
    return encode_assignment(ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
                             for t, ps in topics.items()]))


owners = st.dictionaries(st.tuples(st.sampled_from("xy"), st.integers(0, 5)), st.sampled_from(["m1", "m2", "m3"]))


@given(owners, owners)
@settings(max_examples=60, deadline=None)
def test_partition_moves_are_exactly_the_partitions_whose_owner_changed(before, after):
    def encoded(owner_of):
        by_member: dict[str, list] = {}
        for tp, member in owner_of.items():
            by_member.setdefault(member, []).append(tp)
        return {member: _assignment(*sorted(tps)) for member, tps in by_member.items()}

    moves, total = partition_moves(encoded(before), encoded(after))
    expected = {tp for tp in before.keys() | after.keys() if before.get(tp) != after.get(tp)}
    assert total == len(expected) == len(moves)
    assert {(mv.topic, mv.partition): (mv.from_member, mv.to_member) for mv in moves} == {
        tp: (before.get(tp), after.get(tp)) for tp in expected}


def _effect(group: str, n: int) -> RebalanceJournaled:
    return RebalanceJournaled(group, "classic", n, n + 5, n, n + 1, "member_joined", None, f"entry {n}", "Stable",
                              (("m", None, "c", "/h", "cause"),), {}, {"m": [("t", 0)]})


def test_the_journal_keeps_the_last_entries_in_a_ring_of_record_keys_and_survives_a_replay():
    journal = GroupJournal(max_entries=3)
    records = [journal.rebalance_record(_effect("g", n)) for n in range(7)]
    for r in records:
        journal.apply(r)
    assert [e.sequence for e in journal.entries("g")] == [4, 5, 6]
    assert [r.slot for r in records] == [0, 1, 2, 0, 1, 2, 0]
    # What compaction leaves (the latest record per key), replayed in any order, gives the same journal.
    latest = {encode_record(r)[0]: encode_record(r) for r in records}
    replayed = GroupJournal(max_entries=3)
    for key, value in reversed(list(latest.values())):
        replayed.apply(decode_record(key, value))
    assert replayed.entries("g") == journal.entries("g")
    assert replayed.rebalance_record(_effect("g", 7)).sequence == 7
    assert journal.entries("g", since_ms=10) == journal.entries("g")[1:]  # entry 4 ended at 9
    assert journal.entries("g")[0].moves[0].to_member == "m"


async def test_a_big_groups_entries_are_built_off_the_loop_complete_and_in_order(tmp_path):
    """A 10 000-member entry is too much work for one loop turn: from JOURNAL_BUILD_OFF_LOOP members on it
    is built on a worker thread; nothing is lost and a group's entries still land in the order they ended."""
    h = await Harness(tmp_path).start()
    try:
        n = JOURNAL_BUILD_OFF_LOOP
        ids = await h.stable_group("big", n)
        await h.leave("big", [(mid, None) for mid in ids])  # everyone leaves in one request: Empty
        await wait_until_async(lambda: len(h.coordinator.reports.rebalance_journal("big")) == 2, 30, "two journal entries")
        first, second = h.coordinator.reports.rebalance_journal("big")
        assert (first.sequence, first.epoch_after, second.sequence, second.state_after) == (0, 1, 1, "Empty")
        assert sorted(m.member_id for m in first.members) == sorted(ids)
        assert {m.role for m in first.members} == {"cause", "joined"} and len(second.members) == n
        assert f"and {n - 10} more" in second.detail  # the reason names 10 of the members who left
        await h.restart()  # what was written replays the same, in the same order
        assert [(e.sequence, len(e.members)) for e in h.coordinator.reports.rebalance_journal("big")] == [(0, n), (1, n)]
    finally:
        await h.close()
