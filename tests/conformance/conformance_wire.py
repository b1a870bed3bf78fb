"""Run the conformance corpus against one server and write down what it answered.

A scenario is an async function of a `Exchanges` recorder: it sends raw frames (encoded with
protocol/'s codecs, at the versions real clients send) over connections of its own, one per group
member, and uses the answers to build its next requests (member ids, generations, epochs), as a
client would. Every request and answer is recorded, in the order the scenario sent them, and
normalised so that two servers' recordings compare field by field:

* throttle times are dropped; error messages are recorded as sent but compared for presence only
  (their wording is each server's own);
* ids a server generates (member ids) become `<member 1>`, `<member 2>` … in the order the scenario
  first saw them; topic ids become `<id of TOPIC>`; the coordinator's port becomes `<port>`;
* lists whose order carries no meaning are sorted: a group's members, assigned partitions, and the
  groups of ListGroups, DescribeGroups and ConsumerGroupDescribe answers (Kafka lists a batch's
  groups in its offsets partitions' hash map order; clients match them by id). ListGroups keeps
  only the scenario's own groups (the server holds every scenario's).
"""
from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field

from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import (
    API_SCHEMAS,
    ConsumerGroupDescribeRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    MetadataRequest,
)

from bench.wire import KafkaSession

# The topics every scenario may use, created on each server before the corpus runs.
TOPICS = {"conf-a": 3, "conf-b": 2}
ANSWER_TIMEOUT_S = 20.0

_MEMBER_KEYS = ("member_id", "leader")
_UNORDERED = ("members", "topic_partitions", "assigned_partitions")
# Answers listing groups in an order of the server's own (Kafka: its offsets partitions' hash map order)
_GROUPS_UNORDERED = (ListGroupsRequest.API_KEY, DescribeGroupsRequest.API_KEY, ConsumerGroupDescribeRequest.API_KEY)


@dataclass
class Exchange:
    step: str
    api: str
    version: int
    request: dict
    response: dict | None = None


@dataclass
class Recording:
    scenario: str
    exchanges: list[Exchange] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"scenario": self.scenario, "exchanges": [e.__dict__ for e in self.exchanges]}


class Names:
    """Placeholders for generated ids, numbered in the order a scenario first meets them."""

    def __init__(self, topic_ids: dict[str, str]) -> None:
        self.members: dict[str, str] = {}
        self.topic_ids = topic_ids  # str(uuid) → topic name

    def member(self, value: str) -> str:
        if not value:
            return value
        if value not in self.members:
            self.members[value] = f"<member {len(self.members) + 1}>"
        return self.members[value]


def _plain(value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _sort_key(value) -> str:
    return repr(value)


def normalise(value, names: Names, key: str = ""):
    """A message's fields with generated values replaced (see the module's docstring)."""
    if isinstance(value, dict):
        # the member's own id first, so placeholders number in the order members appear
        order = sorted(value, key=lambda k: (k != "member_id", 0))
        out = {}
        for k in order:
            if k == "throttle_time_ms":
                continue
            v = value[k]
            if k in _MEMBER_KEYS and isinstance(v, str):
                out[k] = names.member(v)
            elif k == "topic_id" and isinstance(v, str):
                out[k] = f"<id of {names.topic_ids.get(v, 'an unknown topic' if v != str(uuid.UUID(int=0)) else 'none')}>"
            elif k == "port":
                out[k] = "<port>"
            else:
                out[k] = normalise(v, names, k)
        return {k: out[k] for k in value if k in out}
    if isinstance(value, list):
        items = [normalise(v, names, key) for v in value]
        if key in _UNORDERED or (key == "partitions" and all(isinstance(v, int) for v in items)):
            items.sort(key=_sort_key)
        return items
    return value


class Exchanges:
    """What a scenario talks through: named connections to one server, every exchange recorded."""

    def __init__(self, scenario: str, host: str, port: int, names: Names) -> None:
        self.recording = Recording(scenario)
        self.host, self.port = host, port
        self.names = names
        self.group = f"c-{scenario}"
        self._sessions: dict[str, KafkaSession] = {}
        self._control: KafkaSession | None = None

    async def _session(self, name: str) -> KafkaSession:
        if name not in self._sessions:
            self._sessions[name] = await KafkaSession.open(self.host, self.port, negotiate=False)
        return self._sessions[name]

    def _record(self, step: str, message, version: int) -> Exchange:
        exchange = Exchange(step=step, api=API_SCHEMAS[message.API_KEY].name.removesuffix("Request"),
                            version=version, request=normalise(_plain(message.to_dict()), self.names))
        self.recording.exchanges.append(exchange)
        return exchange

    async def call(self, conn: str, message, version: int, step: str = ""):
        """Send `message` on connection `conn` and wait for its answer."""
        return await (await self.start(conn, message, version, step))

    async def start(self, conn: str, message, version: int, step: str = "") -> "asyncio.Future":
        """Send `message` and return an awaitable of its answer (for requests a server holds, as
        JoinGroup during a rebalance)."""
        session = await self._session(conn)
        exchange = self._record(step or f"{conn}", message, version)
        future = session.send(message, version)

        async def answer():
            response = await asyncio.wait_for(future, ANSWER_TIMEOUT_S)
            if message.API_KEY == ListGroupsRequest.API_KEY:  # the server holds every scenario's groups
                response.groups = [g for g in response.groups if g.group_id.startswith(self.group)]
            if message.API_KEY in _GROUPS_UNORDERED:
                response.groups = sorted(response.groups, key=lambda g: g.group_id)
            exchange.response = normalise(_plain(response.to_dict()), self.names)
            return response
        return asyncio.ensure_future(answer())

    async def until(self, predicate, timeout_s: float = 15.0) -> None:
        """Wait, unrecorded, until the group's DescribeGroups answer satisfies `predicate` (a held request
        has reached the server before the scenario goes on)."""
        if self._control is None:
            self._control = await KafkaSession.open(self.host, self.port, negotiate=False)
        deadline = time.monotonic() + timeout_s
        while True:
            described = (await self._control.request(DescribeGroupsRequest(groups=[self.group]), 5)).groups[0]
            if predicate(described):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.recording.scenario}: group never reached the awaited state "
                                   f"({described.group_state}, {len(described.members)} members)")
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        for session in [*self._sessions.values(), *([self._control] if self._control else [])]:
            await session.close()


async def prepare(host: str, port: int) -> Names:
    """Create the corpus's topics (CreateTopics) and learn their ids (Metadata v12)."""
    from cohort.protocol.messages import CreateTopicsRequest
    session = await KafkaSession.open(host, port)
    try:
        creatable = CreateTopicsRequest.CreatableTopic
        answer = await session.request(CreateTopicsRequest(topics=[
            creatable(name=t, num_partitions=n, replication_factor=1, assignments=[], configs=[])
            for t, n in TOPICS.items()], timeout_ms=30000), 5)
        for topic in answer.topics:
            if topic.error_code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                raise RuntimeError(f"CreateTopics {topic.name}: {ErrorCode(topic.error_code).name}")
        ids: dict[str, str] = {}
        deadline = time.monotonic() + 30
        while len(ids) < len(TOPICS):
            metadata = await session.request(MetadataRequest(topics=[
                MetadataRequest.MetadataRequestTopic(name=t) for t in TOPICS]), 12)
            ids = {str(t.topic_id): t.name for t in metadata.topics
                   if t.error_code == 0 and t.topic_id.int != 0 and len(t.partitions) == TOPICS[t.name]}
            if time.monotonic() > deadline:
                raise TimeoutError("the corpus's topics were not all visible in Metadata")
        return Names(ids)
    finally:
        await session.close()


async def run_corpus(host: str, port: int, scenarios) -> list[dict]:
    """Every scenario against the server at host:port, one after the other; their recordings."""
    topic_ids = (await prepare(host, port)).topic_ids
    recordings = []
    for name, scenario in scenarios:
        exchanges = Exchanges(name, host, port, Names(topic_ids))
        try:
            await scenario(exchanges)
        finally:
            await exchanges.close()
        for exchange in exchanges.recording.exchanges:
            if exchange.response is None:
                raise RuntimeError(f"{name}: the answer to step {exchange.step!r} was never awaited")
        recordings.append(exchanges.recording.to_json())
    return recordings


def differences(expected: list[dict], actual: list[dict]) -> list[dict]:
    """Field-by-field differences between two recordings of the corpus: one entry per differing leaf."""
    found: list[dict] = []
    by_name = {r["scenario"]: r for r in actual}
    for rec in expected:
        other = by_name.get(rec["scenario"])
        if other is None:
            found.append({"scenario": rec["scenario"], "step": "", "api": "", "path": "", "kafka": "recorded",
                          "cohort": "missing"})
            continue
        for i, (a, b) in enumerate(zip(rec["exchanges"], other["exchanges"])):
            where = {"scenario": rec["scenario"], "step": f"{i}:{a['step']}", "api": f"{a['api']} v{a['version']}"}
            for path, x, y in _leaf_diffs(a["response"], b["response"], ""):
                found.append({**where, "path": path, "kafka": x, "cohort": y})
        if len(rec["exchanges"]) != len(other["exchanges"]):
            found.append({"scenario": rec["scenario"], "step": "", "api": "", "path": "exchanges",
                          "kafka": len(rec["exchanges"]), "cohort": len(other["exchanges"])})
    return found


def _leaf_diffs(x, y, path: str):
    if isinstance(x, dict) and isinstance(y, dict):
        for k in x.keys() | y.keys():
            yield from _leaf_diffs(x.get(k, "<absent>"), y.get(k, "<absent>"), f"{path}.{k}" if path else k)
    elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        for i, (a, b) in enumerate(zip(x, y)):
            yield from _leaf_diffs(a, b, f"{path}[{i}]")
    elif path.endswith("error_message") and (x in (None, "<absent>")) == (y in (None, "<absent>")):
        return  # the wording is each server's own: present on both, or absent (or null) on both
    elif x != y:
        yield path, x, y


def exchange_count(recordings: list[dict]) -> int:
    return sum(len(r["exchanges"]) for r in recordings)
