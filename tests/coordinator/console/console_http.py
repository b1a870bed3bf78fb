"""Plain HTTP calls to the console's JSON API (urllib: nothing of ours between the test and the server)."""
from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request

from cohort.client.blocking import BlockingAdmin
from cohort.client.topic_partition import TopicPartition
from cohort_process import CohortServer, free_port
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.errors import CommitFailedError, RebalanceInProgressError
from kafka.admin import NewTopic


# What a script sends with a change (the console refuses changes a cross-site form could make)
SCRIPT_HEADERS = {"Content-Type": "application/json", "X-Cohort-Console": "1"}


def call(url: str, method: str = "GET", body=None, auth: tuple[str, str] | None = None,
         raw: bytes | None = None, timeout: float = 15.0, context=None,
         headers: dict[str, str] | None = None) -> tuple[int, dict, dict]:
    """(status, JSON body, headers) of one request; `headers` replace the script's usual ones."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, method=method,
                                     headers=SCRIPT_HEADERS if headers is None else headers)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status, _body(response.read(), response.headers), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, _body(exc.read(), exc.headers), dict(exc.headers)


def _body(data: bytes, headers) -> dict:
    if headers.get("Content-Type", "").startswith("application/json"):
        return json.loads(data)
    return {"text": data.decode()}


class ConsoleServer(CohortServer):
    """``cohort serve`` with ``--console.listen`` on an ephemeral port of its own."""

    def __init__(self, data_dir, *extra: str, **kwargs) -> None:
        self.console_port = free_port()
        self.reserved_ports = (self.console_port,)
        super().__init__(data_dir, "--console.listen", f"127.0.0.1:{self.console_port}", *extra, **kwargs)

    def api(self, path: str, **kwargs) -> tuple[int, dict, dict]:
        return call(f"http://127.0.0.1:{self.console_port}{path}", **kwargs)


def stable_consumers(bootstrap: str, topic: str, group: str, count: int, partitions: int, **settings):
    """`count` kafka-python consumers of `group` that together own all `partitions` of `topic`.

    Several kafka-python consumers polled in turn by one thread sometimes never settle (kafka-python
    3.0.12 drops a SyncGroup answer that lands between two polls and waits with no partitions; the
    server then expires it): such a set is closed and a fresh one tried, at most three times."""
    for _ in range(3):
        consumers = _try_consumers(bootstrap, topic, group, count, partitions, **settings)
        if consumers is not None:
            return consumers
    raise AssertionError(f"{count} consumers of {group} did not share {partitions} partitions in 3 tries of 25 s")


def _try_consumers(bootstrap: str, topic: str, group: str, count: int, partitions: int, **settings):
    consumers = [KafkaConsumer(group_id=group, bootstrap_servers=bootstrap, enable_auto_commit=False,
                               session_timeout_ms=6000, heartbeat_interval_ms=300, fetch_max_wait_ms=100,
                               client_id=f"{group}-c{i}", **settings) for i in range(count)]
    deadline = time.monotonic() + 25
    # Each consumer knows the topic's partitions before it joins: kafka-python 3.0.12 may otherwise stall
    # in the rebalance that follows a leader's join without them (tests/coordinator/test_clients_kafka_python.py).
    for c in consumers:
        while not c.partitions_for_topic(topic):
            assert time.monotonic() < deadline, f"kafka-python never saw partitions of {topic}"
            time.sleep(0.05)
        c.subscribe([topic])
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(timeout_ms=50)
        owned = [tp for c in consumers for tp in c.assignment()]
        if len(owned) == partitions and len(set(owned)) == partitions and all(c.assignment() for c in consumers[:partitions]):
            return consumers
    for c in consumers:
        c.close()
    return None


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def report_ends(bootstrap: str, ends: dict[tuple[str, int], int]) -> None:
    """What a source does: report how far each (topic, partition)'s data goes (ReportEndOffsets), the end
    every lag is measured against. Fails the test on any per-partition error."""
    with BlockingAdmin(bootstrap, request_timeout_ms=10000) as admin:
        kept = admin.report_end_offsets(ends)
    assert kept == {TopicPartition(t, p): end for (t, p), end in ends.items()}, kept


def commit(consumer: KafkaConsumer, offsets: dict) -> None:
    """A member's commit, retried (polling, so the member rejoins) while its group finishes a rebalance:
    kafka-python rejoins once more when it first sees its topic's metadata.

    Returns once the wall clock has left the millisecond the commit was answered in, so commits made one
    after the other carry distinct timestamps (on a fast disk a durable commit takes less than a
    millisecond), and "the offsets at time T" picks exactly one of them."""
    deadline = time.monotonic() + 30
    while True:
        try:
            consumer.commit(offsets)
            answered_ms = int(time.time() * 1000)
            while int(time.time() * 1000) <= answered_ms and time.monotonic() < deadline:
                pass  # at most a millisecond
            return
        except (RebalanceInProgressError, CommitFailedError):
            if time.monotonic() > deadline:
                raise
            consumer.poll(timeout_ms=100)
