"""Kafka's `sticky` and `cooperative-sticky` assignors.

Both compute the same target: as balanced as the subscriptions allow, while
moving as few partitions as possible away from their previous owners.

- `sticky` (eager): members revoke everything before joining, so each one
  remembers its previous assignment and generation in the subscription's
  user data (Kafka's StickyAssignorUserData, version 1 written, 0 or 1 read).
- `cooperative-sticky`: members keep their partitions while rebalancing and
  report them in the subscription's OwnedPartitions (v1+) and GenerationId
  (v2+). A partition that moves is only taken from its old owner in this
  rebalance; it is given to the new owner in the next one, after the old owner
  revoked it and rejoined (KIP-429). The user data carries the generation as an
  int32, as Java's assignor wrote it before subscription v2 existed.

When two members claim the same partition, the claim from the higher
generation wins; claims from the same generation cancel each other and the
partition is treated as unowned.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from construct import Int16sb, Int32sb, PascalString, PrefixedArray, Struct, StreamError, ConstructError

from cohort.client.assignors.assignor import (
    Assignment,
    PartitionAssignor,
    RebalanceProtocol,
    Subscription,
    member_order,
    subscribed_partitions,
)
from cohort.client.topic_partition import TopicPartition, flatten_partitions, partitions_by_topic

_TopicPartitions = Struct(
    "topic" / PascalString(Int16sb, "utf8"),
    "partitions" / PrefixedArray(Int32sb, Int32sb),
)
STICKY_USER_DATA_V0 = Struct("previous_assignment" / PrefixedArray(Int32sb, _TopicPartitions))
STICKY_USER_DATA_V1 = Struct(
    "previous_assignment" / PrefixedArray(Int32sb, _TopicPartitions),
    "generation" / Int32sb,
)
COOPERATIVE_USER_DATA = Struct("generation" / Int32sb)


def encode_sticky_user_data(previous_assignment: Sequence[TopicPartition], generation: int) -> bytes:
    """StickyAssignorUserData v1 (no version prefix, as Kafka writes it)."""
    return STICKY_USER_DATA_V1.build(
        {
            "previous_assignment": [
                {"topic": topic, "partitions": parts}
                for topic, parts in partitions_by_topic(previous_assignment).items()
            ],
            "generation": generation,
        }
    )


def decode_sticky_user_data(data: bytes | None) -> tuple[list[TopicPartition], int]:
    """(previous assignment, generation); unreadable data counts as no history, as in Kafka."""
    if not data:
        return [], -1
    for schema in (STICKY_USER_DATA_V1, STICKY_USER_DATA_V0):
        try:
            parsed = schema.parse(data)
        except (StreamError, ConstructError, UnicodeDecodeError):
            continue
        owned = flatten_partitions((e.topic, e.partitions) for e in parsed.previous_assignment)
        return owned, parsed.get("generation", -1)
    return [], -1


def decode_cooperative_user_data(data: bytes | None) -> int:
    """The generation an older cooperative-sticky member put in its user data, or -1."""
    if data is None or len(data) != 4:
        return -1
    return COOPERATIVE_USER_DATA.parse(data).generation


def resolve_prior_owners(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    claims: Mapping[str, tuple[Sequence[TopicPartition], int]],
) -> dict[TopicPartition, str]:
    """Who keeps what: one owner per partition, from the members' (owned, generation) claims.

    A claim counts only if the partition exists and its claimant still
    subscribes to the topic. Higher generation wins; a tie cancels.
    """
    best: dict[TopicPartition, tuple[int, str | None]] = {}
    for member_id in member_order(subscriptions):
        owned, generation = claims.get(member_id, ((), -1))
        topics = subscriptions[member_id].topics
        for tp in set(owned):
            if tp.topic not in topics or not 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0):
                continue
            current = best.get(tp)
            if current is None or generation > current[0]:
                best[tp] = (generation, member_id)
            elif generation == current[0]:
                best[tp] = (generation, None)
    return {tp: owner for tp, (_, owner) in best.items() if owner is not None}


def sticky_assignment(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    prior_owner: Mapping[TopicPartition, str],
) -> Assignment:
    """Balance the partitions, keeping each one with its prior owner unless balance needs it moved.

    1. Every valid prior ownership is kept.
    2. Unowned partitions go, most constrained first, to the least loaded
       member that subscribes to their topic.
    3. While some member has at least two partitions more than an eligible
       member, one partition moves from the most loaded member (preferring one
       it did not own before). Each move lowers the sum of squared counts, so
       this ends; with identical subscriptions it ends with counts within one
       of each other, having moved exactly the partitions balance requires.
    """
    ordered = member_order(subscriptions)
    rank = {member_id: i for i, member_id in enumerate(ordered)}
    eligible: dict[str, list[str]] = defaultdict(list)
    for member_id in ordered:
        for topic in set(subscriptions[member_id].topics):
            if topic in partitions_per_topic:
                eligible[topic].append(member_id)

    owned: dict[str, set[TopicPartition]] = {member_id: set() for member_id in ordered}
    unowned: list[TopicPartition] = []
    for tp in subscribed_partitions(partitions_per_topic, subscriptions):
        owner = prior_owner.get(tp)
        if owner in owned:
            owned[owner].add(tp)
        else:
            unowned.append(tp)

    def least_loaded(topic: str) -> str:
        return min(eligible[topic], key=lambda m: (len(owned[m]), rank[m]))

    unowned.sort(key=lambda tp: (len(eligible[tp.topic]), tp))
    for tp in unowned:
        owned[least_loaded(tp.topic)].add(tp)

    while True:
        moved = False
        for source in sorted(ordered, key=lambda m: (-len(owned[m]), rank[m])):
            # Give away what it gained in this round before what it had kept.
            for tp in sorted(owned[source], key=lambda tp: (prior_owner.get(tp) == source, tp)):
                target = least_loaded(tp.topic)
                if len(owned[target]) < len(owned[source]) - 1:
                    owned[source].remove(tp)
                    owned[target].add(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            break
    return {member_id: sorted(owned[member_id]) for member_id in ordered}


class StickyAssignor(PartitionAssignor):
    name = "sticky"
    supported_protocols = (RebalanceProtocol.EAGER,)

    def subscription_user_data(
        self, topics: Sequence[str], previous_assignment: Sequence[TopicPartition], generation_id: int
    ) -> bytes | None:
        return encode_sticky_user_data(previous_assignment, generation_id)

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> Assignment:
        # Eager members own nothing while joining; their history is in the user data.
        claims = {m: decode_sticky_user_data(s.user_data) for m, s in subscriptions.items()}
        prior = resolve_prior_owners(partitions_per_topic, subscriptions, claims)
        return sticky_assignment(partitions_per_topic, subscriptions, prior)


class CooperativeStickyAssignor(PartitionAssignor):
    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def subscription_user_data(
        self, topics: Sequence[str], previous_assignment: Sequence[TopicPartition], generation_id: int
    ) -> bytes | None:
        return COOPERATIVE_USER_DATA.build({"generation": generation_id})

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> Assignment:
        claims = {
            m: (
                s.owned_partitions,
                s.generation_id if s.generation_id >= 0 else decode_cooperative_user_data(s.user_data),
            )
            for m, s in subscriptions.items()
        }
        prior = resolve_prior_owners(partitions_per_topic, subscriptions, claims)
        target = sticky_assignment(partitions_per_topic, subscriptions, prior)
        return withhold_transfers(target, subscriptions)


def withhold_transfers(target: Assignment, subscriptions: Mapping[str, Subscription]) -> Assignment:
    """Drop from each member the partitions another member must revoke first (KIP-429).

    A partition some member owns but is not assigned is being revoked in this
    rebalance; giving it to a new owner now would let two members consume it.
    It is assigned in the next rebalance, when nobody owns it any more.
    """
    owned = {m: set(s.owned_partitions) for m, s in subscriptions.items()}
    revoked: set[TopicPartition] = set()
    for member_id, partitions in target.items():
        revoked |= owned.get(member_id, set()) - set(partitions)
    return {
        member_id: [tp for tp in partitions if tp in owned.get(member_id, set()) or tp not in revoked]
        for member_id, partitions in target.items()
    }
