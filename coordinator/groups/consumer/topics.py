"""The topics a KIP-848 consumer group subscribes to, resolved against the topic image.

Members subscribe by name or by an RE2 regex (Kafka resolves them with RE2/J); with topic access checked,
a member's regex matches only the topics its principal may DESCRIBE (KAFKA-18813). This keeps how many
members subscribe to each topic (Kafka's SubscriptionCount), each member's existing subscribed topic ids
(what the assignor and reconciliation see) and the hash of the subscribed topics' metadata (KIP-1101): when
it differs from the one stored with the group epoch, the epoch is bumped. Resolutions are cached until a
subscription, an access or the image changes.
"""
from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping

from cohort.coordinator.groups.consumer.events import TopicImage
from cohort.coordinator.groups.consumer.heartbeat import HeartbeatError, compile_regex
from cohort.coordinator.groups.consumer.member import ConsumerGroupMember


class SubscribedTopics:
    """A group's subscriptions over the topic image; `names` keeps every topic id's name ever seen (the
    journal names the partitions of a deleted topic)."""

    __slots__ = ("image", "names", "access_checked", "_regexes", "_describable", "_hash", "_topic_ids",
                 "_subscribers")

    def __init__(self, image: TopicImage, access_checked: bool) -> None:
        self.image: TopicImage = dict(image)
        self.names: dict[uuid.UUID, str] = {meta.topic_id: name for name, meta in self.image.items()}
        self.access_checked = access_checked
        self._regexes: dict[str, frozenset[str]] = {}  # regex -> matching topic names in the image
        # member id -> the topics its regex may match (access_checked): what its last heartbeat said its
        # principal may DESCRIBE; after a load, until that heartbeat, the topics it was assigned.
        self._describable: dict[str, frozenset[str]] = {}
        self._hash: int | None = None  # metadata_hash() until a subscription or the image changes
        self._topic_ids: dict[str, frozenset[uuid.UUID]] = {}  # member id -> its existing subscribed topics
        self._subscribers: Counter[str] = Counter()  # topic name -> members subscribing (names or regex)

    def subscribed(self) -> set[str]:
        return set(self._subscribers)

    def topic_ids(self, member: ConsumerGroupMember) -> frozenset[uuid.UUID]:
        """The ids of the existing topics the member subscribes to."""
        ids = self._topic_ids.get(member.member_id)
        if ids is None:
            image = self.image
            ids = self._topic_ids[member.member_id] = frozenset(
                image[name].topic_id for name in self.member_topics(member) if name in image)
        return ids

    def member_topics(self, member: ConsumerGroupMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            matches = self._regex_matches(member.subscribed_topic_regex)
            if self.access_checked:
                # Unknown (a member being loaded): nothing yet; `loaded` fills it in.
                matches = matches & self._describable.get(member.member_id, frozenset())
            names |= matches
        return names

    def update_access(self, member: ConsumerGroupMember, describable: frozenset[str] | None,
                      is_member: bool) -> bool:
        """Take the topics the member may now DESCRIBE; True when that changes what its regex matches."""
        if not self.access_checked or describable is None:
            return False
        member_id = member.member_id
        if self._describable.get(member_id) == describable:
            return False
        if not is_member:  # a new member: counted once its metadata record is applied
            self._describable[member_id] = describable
            return False
        before = self.member_topics(member)
        self._describable[member_id] = describable
        after = self.member_topics(member)
        if before == after:
            return False
        self._subscribers.subtract(before)
        self._subscribers.update(after)
        self._subscribers = +self._subscribers
        self._topic_ids.pop(member_id, None)
        self._hash = None
        return True

    def subscribe(self, member: ConsumerGroupMember) -> None:
        """The member's subscription is (again) what its fields say."""
        self._hash = None
        self._topic_ids.pop(member.member_id, None)
        self._subscribers.update(self.member_topics(member))
        self._subscribers = +self._subscribers  # drop topics nobody subscribes to any more

    def unsubscribe(self, member: ConsumerGroupMember, gone: bool = False) -> None:
        """Before the member's subscription changes, or once it is `gone` from the group."""
        self._hash = None
        self._topic_ids.pop(member.member_id, None)
        self._subscribers.subtract(self.member_topics(member))
        self._subscribers = +self._subscribers
        if gone:
            self._describable.pop(member.member_id, None)

    def forget(self, member_id: str) -> None:
        """A member id the group does not hold (a tombstone of one never seen)."""
        self._hash = None
        self._topic_ids.pop(member_id, None)

    def image_changed(self, image: TopicImage, members: Iterable[ConsumerGroupMember]) -> None:
        self.image = dict(image)
        self.names.update((meta.topic_id, name) for name, meta in self.image.items())
        self._regexes.clear()
        self._recount(members)

    def loaded(self, members: Mapping[str, ConsumerGroupMember],
               target: Mapping[str, Mapping[uuid.UUID, frozenset[int]]]) -> None:
        """After a load. Who may describe what is not stored: until its next heartbeat says, a member's
        regex keeps the topics it was given (all of them authorized when it was), so a restart moves nothing."""
        if not self.access_checked:
            return
        names = self.names
        for member_id, member in members.items():
            if member.subscribed_topic_regex and member_id not in self._describable:
                ids = {*member.assigned, *member.pending_revocation, *target.get(member_id, {})}
                self._describable[member_id] = frozenset(names[i] for i in ids if i in names)
        self._recount(members.values())

    def metadata_hash(self, has_members: bool) -> int:
        """A hash of the subscribed topics' ids and partition counts (Kafka's MetadataHash, KIP-1101); 0, as
        Kafka's, when no existing topic is subscribed, so members subscribing to nothing change no epoch."""
        if self._hash is not None:
            return self._hash
        if not has_members:
            return 0
        image = self.image
        existing = [(name, image[name]) for name in sorted(self._subscribers) if name in image]
        if not existing:
            self._hash = 0
            return 0
        digest = hashlib.blake2b(digest_size=8)
        for name, meta in existing:
            digest.update(f"{name}\0{meta.topic_id}\0{meta.partitions}\n".encode())
        self._hash = int.from_bytes(digest.digest(), "big", signed=True)
        return self._hash

    def _recount(self, members: Iterable[ConsumerGroupMember]) -> None:
        self._hash = None
        self._topic_ids.clear()
        self._subscribers = Counter(name for member in members for name in self.member_topics(member))

    def _regex_matches(self, regex: str) -> frozenset[str]:
        matches = self._regexes.get(regex)
        if matches is None:
            try:
                pattern = compile_regex(regex)
            except HeartbeatError:  # a record from a writer that accepted it: it matches nothing here
                matches = frozenset()
            else:
                matches = frozenset(name for name in self.image if pattern.fullmatch(name))
            self._regexes[regex] = matches
        return matches
