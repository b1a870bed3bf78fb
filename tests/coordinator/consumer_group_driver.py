"""Drives a `ConsumerGroup` engine with a manual clock, as the runtime would: appends succeed at once
(or fail when told), timers fire when the clock passes them, and appended records are kept so a test
can replay them into a fresh group."""
from __future__ import annotations

import uuid

from cohort.coordinator.groups.consumer.engine import ConsumerGroup, TopicMetadata
from cohort.coordinator.groups.consumer.events import ConsumerGroupHeartbeat, HeartbeatResult, RecordReplayed
from cohort.coordinator.groups.effects import (
    Answer,
    AppendRecords,
    CancelAllTimers,
    CancelTimer,
    LoadCompleted,
    Now,
    RecordsAppended,
    Reply,
    SetTimer,
    TimerFired,
)


class Driver:
    def __init__(self, group: ConsumerGroup | None = None, **kwargs) -> None:
        # The assignor runs at every epoch bump unless a test asks for Kafka 4.3's batching interval.
        kwargs.setdefault("assignment_interval_ms", 0)
        self.group = group if group is not None else ConsumerGroup("g", **kwargs)
        self.clock = 0.0
        self.timers: dict[object, float] = {}
        self.log: list = []  # every record appended, in order
        self.events: list = []  # every effect, in order
        self.next_request = 0
        self.append_error = 0

    def now(self) -> Now:
        return Now(int(self.clock), self.clock)

    def send(self, event) -> list:
        out = []
        pending = [event]
        while pending:
            effects = self.group.handle(pending.pop(0), self.now())
            for effect in effects:
                self.events.append(effect)
                if isinstance(effect, AppendRecords):
                    if not self.append_error:
                        self.log.extend(effect.records)
                    pending.append(RecordsAppended(effect.purpose, self.append_error))
                elif isinstance(effect, SetTimer):
                    self.timers[effect.key] = self.clock + effect.delay_ms
                elif isinstance(effect, CancelTimer):
                    self.timers.pop(effect.key, None)
                elif isinstance(effect, CancelAllTimers):
                    self.timers.clear()
                elif isinstance(effect, (Reply, Answer)):
                    out.append(effect.result)
        return out

    def heartbeat(self, member_id: str, member_epoch: int, **fields) -> HeartbeatResult:
        self.next_request += 1
        answers = self.send(ConsumerGroupHeartbeat(self.next_request, member_id, member_epoch, **fields))
        assert len(answers) == 1, answers
        return answers[0]

    def join(self, member_id: str, topics=None, regex=None, **fields) -> HeartbeatResult:
        fields.setdefault("rebalance_timeout_ms", 60_000)
        return self.heartbeat(member_id, 0, subscribed_topic_names=topics, subscribed_topic_regex=regex,
                              topic_partitions=[], **fields)

    def advance(self, ms: float) -> None:
        """Move the clock, firing due timers in deadline order."""
        end = self.clock + ms
        while True:
            due = [(at, key) for key, at in self.timers.items() if at <= end]
            if not due:
                break
            at, key = min(due, key=lambda d: d[0])
            self.clock = max(self.clock, at)
            del self.timers[key]
            self.send(TimerFired(key))
        self.clock = end

    def replayed(self, **kwargs) -> "Driver":
        """A fresh group rebuilt from this one's records, loaded."""
        kwargs.setdefault("assignment_interval_ms", 0)
        fresh = Driver(ConsumerGroup(self.group.group_id, **kwargs))
        fresh.clock = self.clock
        for record in self.log:
            if type(record).__name__.startswith("ConsumerGroup"):  # a classic group's records go elsewhere
                fresh.send(RecordReplayed(record))
        fresh.send(LoadCompleted())
        return fresh


def topic(name: str, partitions: int) -> tuple[str, TopicMetadata]:
    return name, TopicMetadata(uuid.uuid5(uuid.NAMESPACE_DNS, name), partitions)


def tid(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_DNS, name)


def owned(result: HeartbeatResult) -> list[tuple[uuid.UUID, list[int]]]:
    return [(t, list(ps)) for t, ps in (result.assignment or [])]
