"""The topic registry against a plain model: random creates, deletes and partition growth.

Invariants: every answer matches the model; topic ids are unique and stable; replaying the
records it asked to persist rebuilds exactly the same registry (what a restart does); a failed
write changes nothing.
"""
from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from cohort.coordinator.contracts.store import StorageError
from cohort.coordinator.records.types import TopicRecord, decode_record, encode_record
from cohort.coordinator.server.topics import Topic, TopicRefusal, TopicRegistry, topic_name_problem
from cohort.protocol.errors import ErrorCode

NAMES = st.sampled_from(["orders", "orders.v2", "orders_v2", "clicks", "a", "x" * 249, "x" * 250, "bad name", ""])
COUNTS = st.integers(min_value=-1, max_value=12)


class RegistryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.persisted: list[tuple[bytes, bytes | None]] = []
        self.fail_next_write = False
        self.registry = TopicRegistry(self.persist)
        self.model: dict[str, int] = {}
        self.ids: dict[str, object] = {}

    async def persist(self, records) -> None:
        if self.fail_next_write:
            self.fail_next_write = False
            raise StorageError("disk full")
        self.persisted.extend(encode_record(r) for r in records)  # byte form, as the log stores it

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.loop.close()

    @rule(name=NAMES, partitions=COUNTS)
    def create(self, name, partitions):
        result = self.run(self.registry.create(name, partitions))
        collides = any(n != name and n.replace(".", "_") == name.replace(".", "_") for n in self.model)
        if topic_name_problem(name) or collides:
            assert isinstance(result, TopicRefusal) and result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        elif name in self.model:
            assert isinstance(result, TopicRefusal) and result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
        elif partitions < 1:
            assert isinstance(result, TopicRefusal) and result.error_code == ErrorCode.INVALID_PARTITIONS
        else:
            assert isinstance(result, Topic) and result.partitions == partitions
            assert result.topic_id not in self.ids.values()
            self.model[name] = partitions
            self.ids[name] = result.topic_id

    @rule(name=NAMES)
    def delete(self, name):
        result = self.run(self.registry.delete(name))
        if name in self.model:
            assert isinstance(result, Topic) and result.topic_id == self.ids.pop(name)
            del self.model[name]
        else:
            assert isinstance(result, TopicRefusal) and result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    @rule(name=NAMES, count=COUNTS)
    def grow(self, name, count):
        result = self.run(self.registry.set_partition_count(name, count))
        if name not in self.model:
            assert result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif count <= self.model[name]:
            assert result.error_code == ErrorCode.INVALID_PARTITIONS
        else:
            assert isinstance(result, Topic) and result.topic_id == self.ids[name]
            self.model[name] = count

    @rule(name=NAMES, partitions=st.integers(min_value=1, max_value=4))
    def create_while_the_disk_fails(self, name, partitions):
        self.fail_next_write = True
        try:
            self.run(self.registry.create(name, partitions))
        except StorageError:
            pass
        self.fail_next_write = False

    @invariant()
    def matches_the_model(self):
        assert {t.name: t.partitions for t in self.registry} == self.model
        assert all(self.registry.get_by_id(self.ids[n]).name == n for n in self.model)

    @invariant()
    def replay_rebuilds_the_same_registry(self):
        restarted = TopicRegistry(self.persist)
        for key, value in self.persisted:
            restarted.apply(decode_record(key, value))
        assert {(t.name, t.topic_id, t.partitions) for t in restarted} == {
            (t.name, t.topic_id, t.partitions) for t in self.registry}


TestTopicRegistry = RegistryMachine.TestCase
TestTopicRegistry.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)


@pytest.mark.parametrize("name,problem", [
    ("ok-name_1.x", False), ("", True), (".", True), ("..", True), ("a" * 249, False), ("a" * 250, True),
    ("a/b", True), ("é", True),
])
def test_topic_name_rules(name, problem):
    assert (topic_name_problem(name) is not None) == problem


def test_records_round_trip_through_the_log_layout():
    record = TopicRecord("t", uuid.uuid4(), 3)
    assert decode_record(*encode_record(record)) == record
