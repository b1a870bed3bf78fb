"""Assignor properties: validity for all four, Kafka's worked examples, stickiness, cooperative safety."""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.client.assignors import (
    ASSIGNORS,
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    assignor_named,
)
from cohort.client.assignors.sticky import decode_sticky_user_data, encode_sticky_user_data
from cohort.client.topic_partition import TopicPartition

TOPICS = ["alpha", "beta", "gamma", "delta"]


@st.composite
def groups(draw, homogeneous: bool = False, min_members: int = 1):
    """(partitions_per_topic, subscriptions) with 1-6 members over up to 4 topics."""
    counts = draw(st.lists(st.integers(0, 12), min_size=len(TOPICS), max_size=len(TOPICS)))
    partitions_per_topic = dict(zip(TOPICS, counts))
    # A topic the cluster does not know yet: subscribed, never assigned.
    names = draw(st.lists(st.sampled_from(TOPICS + ["unknown"]), min_size=1, unique=True))
    n = draw(st.integers(min_members, 6))
    subscriptions = {}
    for i in range(n):
        topics = names if homogeneous else draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))
        instance = draw(st.none() | st.sampled_from([f"static-{j}" for j in range(6)]))
        if instance in {s.group_instance_id for s in subscriptions.values()}:
            instance = None
        subscriptions[f"member-{draw(st.integers(0, 10**6))}-{i}"] = Subscription(
            topics=tuple(topics), group_instance_id=instance
        )
    return partitions_per_topic, subscriptions


def expected_partitions(partitions_per_topic, subscriptions):
    topics = {t for s in subscriptions.values() for t in s.topics if t in partitions_per_topic}
    return {TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])}


def assert_valid(assignment, partitions_per_topic, subscriptions):
    """Each subscribed partition goes to exactly one member, and that member subscribes to its topic."""
    assert set(assignment) == set(subscriptions)
    owners = Counter(tp for parts in assignment.values() for tp in parts)
    assert set(owners) == expected_partitions(partitions_per_topic, subscriptions)
    assert all(n == 1 for n in owners.values()), owners
    for member_id, parts in assignment.items():
        assert all(tp.topic in subscriptions[member_id].topics for tp in parts)


def homogeneous(n_members: int, topics: dict[str, int]):
    subs = {f"C{i + 1}": Subscription(topics=tuple(topics)) for i in range(n_members)}
    return topics, subs


# ---------------------------------------------------------------- validity, every assignor

@pytest.mark.parametrize("name", ["range", "roundrobin", "sticky"])
@settings(max_examples=150, deadline=None)
@given(group=groups())
def test_every_subscribed_partition_goes_to_exactly_one_subscribed_member(name, group):
    partitions_per_topic, subscriptions = group
    assignment = assignor_named(name).assign(partitions_per_topic, subscriptions)
    assert_valid(assignment, partitions_per_topic, subscriptions)


@settings(max_examples=150, deadline=None)
@given(group=groups())
def test_cooperative_sticky_from_scratch_assigns_every_partition_once(group):
    partitions_per_topic, subscriptions = group
    assignment = CooperativeStickyAssignor().assign(partitions_per_topic, subscriptions)
    assert_valid(assignment, partitions_per_topic, subscriptions)


def test_unknown_assignor_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown partition assignor 'fancy'"):
        assignor_named("fancy")


def test_wire_names_match_kafka():
    assert set(ASSIGNORS) == {"range", "roundrobin", "sticky", "cooperative-sticky"}


# ---------------------------------------------------------------- the seeds' worked examples

@pytest.mark.parametrize(
    ("partitions", "expected"), [(10, [4, 3, 3]), (11, [4, 4, 3]), (12, [4, 4, 4]), (2, [1, 1, 0])]
)
@pytest.mark.parametrize("assignor", [RangeAssignor(), RoundRobinAssignor()])
def test_one_topic_over_three_consumers(assignor, partitions, expected):
    ppt, subs = homogeneous(3, {"t": partitions})
    assignment = assignor.assign(ppt, subs)
    assert [len(assignment[c]) for c in ("C1", "C2", "C3")] == expected


def test_range_gives_contiguous_ranges_with_extras_first():
    ppt, subs = homogeneous(3, {"t": 11})
    assignment = RangeAssignor().assign(ppt, subs)
    assert [[tp.partition for tp in assignment[c]] for c in ("C1", "C2", "C3")] == [
        [0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]
    ]


def test_range_two_topics_of_ten_give_the_first_consumer_eight():
    ppt, subs = homogeneous(3, {"t1": 10, "t2": 10})
    assignment = RangeAssignor().assign(ppt, subs)
    assert [len(assignment[c]) for c in ("C1", "C2", "C3")] == [8, 6, 6]


def test_roundrobin_two_topics_of_ten_stay_balanced():
    ppt, subs = homogeneous(3, {"t1": 10, "t2": 10})
    assignment = RoundRobinAssignor().assign(ppt, subs)
    assert [len(assignment[c]) for c in ("C1", "C2", "C3")] == [7, 7, 6]


def test_static_members_sort_before_dynamic_ones_by_instance_id():
    subs = {
        "a-dynamic": Subscription(topics=("t",)),
        "z-member": Subscription(topics=("t",), group_instance_id="instance-1"),
        "b-member": Subscription(topics=("t",), group_instance_id="instance-2"),
    }
    assignment = RangeAssignor().assign({"t": 3}, subs)
    assert assignment == {
        "z-member": [TopicPartition("t", 0)],
        "b-member": [TopicPartition("t", 1)],
        "a-dynamic": [TopicPartition("t", 2)],
    }


@settings(max_examples=100, deadline=None)
@given(group=groups(homogeneous=True))
def test_roundrobin_and_sticky_balance_identical_subscriptions_within_one(group):
    partitions_per_topic, subscriptions = group
    for assignor in (RoundRobinAssignor(), StickyAssignor(), CooperativeStickyAssignor()):
        counts = [len(p) for p in assignor.assign(partitions_per_topic, subscriptions).values()]
        assert max(counts) - min(counts) <= 1


# ---------------------------------------------------------------- sticky: minimum movement

def eager_round(assignor, partitions_per_topic, subscriptions, previous, generation):
    """Run the eager sticky assignor where each member reports `previous` in its user data."""
    with_history = {
        m: Subscription(
            topics=s.topics,
            group_instance_id=s.group_instance_id,
            user_data=assignor.subscription_user_data(s.topics, previous.get(m, []), generation),
        )
        for m, s in subscriptions.items()
    }
    return assignor.assign(partitions_per_topic, with_history)


def minimum_moves(previous, survivors, total):
    """Fewest partitions that must change owner to balance `total` partitions over `survivors`
    (identical subscriptions): the largest previous holders get the ceiling slots."""
    share, extra = divmod(total, len(survivors))
    held = sorted((len(previous.get(m, [])) for m in survivors), reverse=True)
    caps = [share + 1] * extra + [share] * (len(survivors) - extra)
    kept = sum(min(h, c) for h, c in zip(held, caps))
    return total - kept


def moved(previous, current):
    before = {tp: m for m, parts in previous.items() for tp in parts}
    return sum(1 for m, parts in current.items() for tp in parts if tp in before and before[tp] != m) + sum(
        1 for m, parts in current.items() for tp in parts if tp not in before
    )


@settings(max_examples=150, deadline=None)
@given(group=groups(homogeneous=True, min_members=2), data=st.data())
def test_sticky_moves_the_minimum_when_one_member_leaves(group, data):
    partitions_per_topic, subscriptions = group
    assignor = StickyAssignor()
    first = eager_round(assignor, partitions_per_topic, subscriptions, {}, -1)
    leaver = data.draw(st.sampled_from(sorted(subscriptions)))
    rest = {m: s for m, s in subscriptions.items() if m != leaver}
    second = eager_round(assignor, partitions_per_topic, rest, first, 1)
    assert_valid(second, partitions_per_topic, rest)
    total = len(expected_partitions(partitions_per_topic, rest))
    assert moved(first, second) == minimum_moves(first, list(rest), total)
    # In practice: only the leaver's partitions change hands.
    assert moved(first, second) == len(first[leaver])


@settings(max_examples=150, deadline=None)
@given(group=groups(homogeneous=True), data=st.data())
def test_sticky_moves_the_minimum_when_one_member_joins(group, data):
    partitions_per_topic, subscriptions = group
    assignor = StickyAssignor()
    first = eager_round(assignor, partitions_per_topic, subscriptions, {}, -1)
    topics = next(iter(subscriptions.values())).topics
    joined = {**subscriptions, "newcomer": Subscription(topics=topics)}
    second = eager_round(assignor, partitions_per_topic, joined, first, 1)
    assert_valid(second, partitions_per_topic, joined)
    total = len(expected_partitions(partitions_per_topic, joined))
    assert moved(first, second) == minimum_moves(first, list(joined), total)
    assert moved(first, second) == len(second["newcomer"])


def test_sticky_user_data_round_trips_and_reads_version_zero():
    owned = [TopicPartition("a", 2), TopicPartition("a", 0), TopicPartition("b", 1)]
    data = encode_sticky_user_data(owned, 7)
    assert decode_sticky_user_data(data) == (sorted(owned), 7)
    version_zero = data[:-4]  # v0 is v1 without the trailing generation
    assert decode_sticky_user_data(version_zero) == (sorted(owned), -1)
    assert decode_sticky_user_data(b"\x00garbage") == ([], -1)
    assert decode_sticky_user_data(None) == ([], -1)


def test_sticky_higher_generation_claim_wins_and_equal_claims_cancel():
    assignor = StickyAssignor()
    tp = TopicPartition("t", 0)
    subs = {
        "old": Subscription(topics=("t",), user_data=encode_sticky_user_data([tp], 3)),
        "new": Subscription(topics=("t",), user_data=encode_sticky_user_data([tp], 4)),
    }
    assert assignor.assign({"t": 1}, subs)["new"] == [tp]


# ---------------------------------------------------------------- cooperative-sticky

@st.composite
def cooperative_rounds(draw):
    """A group, a previous valid assignment it owns, then a membership change."""
    partitions_per_topic, subscriptions = draw(groups())
    previous = RoundRobinAssignor().assign(partitions_per_topic, subscriptions) if draw(st.booleans()) else (
        StickyAssignor().assign(partitions_per_topic, subscriptions)
    )
    members = sorted(subscriptions)
    leaving = draw(st.lists(st.sampled_from(members), unique=True, max_size=len(members) - 1))
    joining = draw(st.integers(0, 2))
    after = {m: s for m, s in subscriptions.items() if m not in leaving}
    for i in range(joining):
        after[f"joiner-{i}"] = Subscription(topics=tuple(draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))))
    # Members sometimes also change their subscription, and the cluster may grow.
    grown = {t: n + draw(st.integers(0, 2)) for t, n in partitions_per_topic.items()}
    return grown, after, previous


def owning(subscriptions, owned, generation):
    return {
        m: Subscription(
            topics=s.topics,
            group_instance_id=s.group_instance_id,
            owned_partitions=tuple(owned.get(m, [])),
            generation_id=generation,
        )
        for m, s in subscriptions.items()
    }


@settings(max_examples=200, deadline=None)
@given(rounds=cooperative_rounds())
def test_cooperative_sticky_never_gives_a_partition_away_in_the_rebalance_that_revokes_it(rounds):
    partitions_per_topic, subscriptions, previous = rounds
    assignor = CooperativeStickyAssignor()
    first = assignor.assign(partitions_per_topic, owning(subscriptions, previous, 5))

    generation = 5
    owned = previous
    for _ in range(6):
        current = assignor.assign(partitions_per_topic, owning(subscriptions, owned, generation))
        revoked = {tp for m in subscriptions for tp in set(owned.get(m, [])) - set(current[m])}
        for member_id, parts in current.items():
            for tp in parts:
                if tp not in owned.get(member_id, []):
                    assert tp not in revoked, f"{tp} given to {member_id} while another member revokes it"
        owners = Counter(tp for parts in current.values() for tp in parts)
        assert all(n == 1 for n in owners.values())
        if not revoked and current == owned:
            break
        # Members that revoked something rejoin; everyone now owns what it was given.
        owned, generation = current, generation + 1
    else:
        pytest.fail("cooperative rebalances did not converge in six rounds")
    assert_valid(current, partitions_per_topic, subscriptions)


def test_cooperative_sticky_withholds_a_moving_partition_until_the_next_rebalance():
    assignor = CooperativeStickyAssignor()
    everything = [TopicPartition("t", p) for p in range(4)]
    subs = {"A": Subscription(topics=("t",), owned_partitions=tuple(everything), generation_id=1),
            "B": Subscription(topics=("t",), generation_id=-1)}
    first = assignor.assign({"t": 4}, subs)
    assert len(first["A"]) == 2 and first["B"] == []
    subs = {"A": Subscription(topics=("t",), owned_partitions=tuple(first["A"]), generation_id=2),
            "B": Subscription(topics=("t",), generation_id=2)}
    second = assignor.assign({"t": 4}, subs)
    assert second["A"] == first["A"] and len(second["B"]) == 2


def test_cooperative_generation_falls_back_to_user_data():
    assignor = CooperativeStickyAssignor()
    tp = TopicPartition("t", 0)
    subs = {
        "stale": Subscription(topics=("t",), owned_partitions=(tp,), user_data=assignor.subscription_user_data(("t",), [], 2)),
        "fresh": Subscription(topics=("t",), owned_partitions=(tp,), user_data=assignor.subscription_user_data(("t",), [], 3)),
    }
    assert assignor.assign({"t": 1}, subs)["fresh"] == [tp]
