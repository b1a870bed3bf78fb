"""Server-side assignors against properties stated here, independently of how they work.

Every assignor: each partition of a topic somebody subscribes to goes to exactly one subscriber of that
topic; nothing else is assigned; running it again on its own output changes nothing (sticky fixpoint).
Uniform: balanced (identical subscriptions: loads differ by at most one; otherwise no member holds a
partition that a subscriber with two fewer partitions could take) and sticky (a member keeps at least
min(what it had, the smaller quota)). Range: per topic, each subscriber gets floor or ceil of P/N, and a
fresh assignment is contiguous ranges in member-id order, the same for topics alike (co-partitioned).
"""
from __future__ import annotations

import uuid

from hypothesis import given, settings, strategies as st

from cohort.coordinator.groups.consumer.assignors import ASSIGNORS, MemberSubscription

TOPICS = [uuid.UUID(int=i + 1) for i in range(5)]


@st.composite
def groups(draw, homogeneous: bool | None = None):
    partitions = {t: draw(st.integers(0, 12)) for t in TOPICS[: draw(st.integers(1, len(TOPICS)))]}
    names = draw(st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=8, unique=True))
    same = draw(st.booleans()) if homogeneous is None else homogeneous
    shared = frozenset(draw(st.sets(st.sampled_from(list(partitions)), min_size=1)))
    members = {}
    for name in names:
        topics = shared if same else frozenset(draw(st.sets(st.sampled_from(list(partitions)))))
        current = {}
        if draw(st.booleans()):  # some prior target, possibly stale or overlapping with others
            for t in draw(st.sets(st.sampled_from(list(partitions)))):
                current[t] = frozenset(draw(st.sets(st.integers(0, 14), max_size=6)))
        members[name] = MemberSubscription(topics, current)
    return members, partitions


def check_exactly_once(members, partitions, result):
    assert set(result) == set(members)
    seen = {}
    for member_id, assignment in result.items():
        for t, ps in assignment.items():
            assert t in members[member_id].topics, "assigned a topic the member does not subscribe to"
            for p in ps:
                assert 0 <= p < partitions[t]
                assert (t, p) not in seen, f"{(t, p)} assigned twice"
                seen[(t, p)] = member_id
    for t, count in partitions.items():
        if any(t in spec.topics for spec in members.values()):
            assert {p for (u, p) in seen if u == t} == set(range(count)), "a subscribed partition is unassigned"


def load(result, member_id):
    return sum(len(ps) for ps in result[member_id].values())


def again(members, result):
    return {m: MemberSubscription(spec.topics, result[m]) for m, spec in members.items()}


@settings(max_examples=300, deadline=None)
@given(groups(), st.sampled_from(sorted(ASSIGNORS)))
def test_every_subscribed_partition_goes_to_exactly_one_subscriber_and_the_result_is_a_fixpoint(group, name):
    members, partitions = group
    assignor = ASSIGNORS[name]
    result = assignor.assign(members, partitions)
    check_exactly_once(members, partitions, result)
    assert assignor.assign(again(members, result), partitions) == result


@settings(max_examples=300, deadline=None)
@given(groups())
def test_uniform_is_balanced(group):
    members, partitions = group
    result = ASSIGNORS["uniform"].assign(members, partitions)
    if len({spec.topics for spec in members.values()}) == 1:
        loads = [load(result, m) for m in members]
        assert max(loads) - min(loads) <= 1
    for giver, assignment in result.items():
        for t, ps in assignment.items():
            if ps:
                for taker, spec in members.items():
                    if t in spec.topics:
                        assert load(result, giver) <= load(result, taker) + 1, (giver, taker, t)


@settings(max_examples=300, deadline=None)
@given(groups(homogeneous=True), st.text("xyz", min_size=4, max_size=4))
def test_uniform_moves_only_what_balance_requires_when_a_member_joins(group, newcomer):
    members, partitions = group
    uniform = ASSIGNORS["uniform"]
    before = uniform.assign(members, partitions)
    topics = next(iter(members.values())).topics
    joined = {**again(members, before), newcomer: MemberSubscription(topics)}
    after = uniform.assign(joined, partitions)
    check_exactly_once(joined, partitions, after)
    total = sum(partitions[t] for t in topics)
    floor_quota = total // len(joined)
    for m in members:
        kept = sum(len(after[m].get(t, frozenset()) & ps) for t, ps in before[m].items())
        assert kept >= min(load(before, m), floor_quota)


@settings(max_examples=300, deadline=None)
@given(groups())
def test_range_gives_each_subscriber_floor_or_ceil_of_each_topic(group):
    members, partitions = group
    result = ASSIGNORS["range"].assign(members, partitions)
    for t, count in partitions.items():
        subscribers = [m for m, spec in members.items() if t in spec.topics]
        if subscribers:
            sizes = sorted(len(result[m].get(t, ())) for m in subscribers)
            base, extra = divmod(count, len(subscribers))
            assert sizes == [base] * (len(subscribers) - extra) + [base + 1] * extra


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text("abcdef", min_size=1, max_size=3), min_size=1, max_size=6, unique=True),
       st.integers(0, 12))
def test_range_from_scratch_is_contiguous_in_member_order_and_co_partitioned(names, count):
    t1, t2 = TOPICS[:2]
    members = {n: MemberSubscription(frozenset({t1, t2})) for n in names}
    result = ASSIGNORS["range"].assign(members, {t1: count, t2: count})
    expected_start = 0
    for n in sorted(names):
        ps = sorted(result[n].get(t1, ()))
        assert ps == list(range(expected_start, expected_start + len(ps)))
        expected_start += len(ps)
        assert result[n].get(t1, frozenset()) == result[n].get(t2, frozenset())
