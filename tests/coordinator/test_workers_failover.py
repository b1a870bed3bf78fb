"""A worker killed with SIGKILL under load: the supervisor restarts it and no acknowledged commit is lost."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from cohort_process import metric_value
from workers_harness import WorkersServer, group_on_worker

from cohort.client.blocking import BlockingAdmin

pytestmark = pytest.mark.timeout(240)
WORKERS = 3


def worker_pids(supervisor_pid: int) -> dict[int, int]:
    """Worker index -> pid, from the supervisor's children and their command lines."""
    pids = {}
    children = Path(f"/proc/{supervisor_pid}/task/{supervisor_pid}/children").read_text().split()
    for pid in map(int, children):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):  # gone, or exiting (a killed worker): not a worker now
            continue
        if b"cohort.coordinator.process.worker" in argv:
            spec = json.loads(argv[argv.index(b"cohort.coordinator.process.worker") + 1])
            pids[spec["index"]] = pid
    return pids


def wait_until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


class Committer(threading.Thread):
    """Commits 1, 2, 3, ... for one group (a simple commit), remembering the last acknowledged one."""

    def __init__(self, bootstrap: str, group: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.group = bootstrap, group
        self.acked = 0
        self.attempted = 0
        self.failures = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with BlockingAdmin(self.bootstrap, api_timeout_ms=30000, request_timeout_ms=5000) as admin:
            while not self.stop.is_set():
                self.attempted += 1
                try:
                    admin.commit_offsets(self.group, {("load", 0): (self.attempted, "")})
                except Exception:  # noqa: BLE001 - the worker may be down; the next commit retries
                    self.failures += 1
                    time.sleep(0.05)
                    continue
                self.acked = self.attempted


def test_a_killed_worker_comes_back_and_keeps_every_acknowledged_commit(tmp_path):
    server = WorkersServer(tmp_path / "data", WORKERS).start()
    try:
        groups = [group_on_worker(f"load{i}", i % WORKERS, WORKERS) for i in range(2 * WORKERS)]
        committers = [Committer(server.bootstrap_of(i % WORKERS), g) for i, g in enumerate(groups)]
        for c in committers:
            c.start()
        wait_until(lambda: all(c.acked >= 20 for c in committers), 60, "every group committed 20 times")

        # When worker 1 is killed with SIGKILL while every group commits,
        victim = worker_pids(server.process.pid)[1]
        os.kill(victim, signal.SIGKILL)
        before = {c.group: c.acked for c in committers}

        # then the supervisor restarts it: /health is 200 again and the restart is counted,
        wait_until(lambda: worker_pids(server.process.pid).get(1) not in (None, victim), 30, "worker 1 restarted")
        wait_until(lambda: server.health()[0] == 200, 60, "all workers ready again")
        assert metric_value(server.scrape(), "cohort_worker_restarts_total", worker="1") == 1
        assert metric_value(server.scrape(), "cohort_worker_up", worker="1") == 1
        # and the killed worker's groups commit again.
        wait_until(lambda: all(c.acked > before[c.group] + 5 for c in committers), 60, "commits resumed everywhere")
    finally:
        for c in committers:
            c.stop.set()
        for c in committers:
            c.join(60)
    # Every acknowledged commit is there (a commit cut short by the kill may have landed too).
    with BlockingAdmin(server.bootstrap_of(2)) as admin:
        for c in committers:
            committed = admin.fetch_offsets(c.group)[("load", 0)].offset
            assert c.acked <= committed <= c.attempted, (c.group, c.acked, committed, c.attempted)
    assert server.stop() == 0, server.output()

    # After a clean stop and a restart, the offsets are the same.
    again = server.restarted(WORKERS).start()
    try:
        with BlockingAdmin(again.bootstrap_of(0)) as admin:
            for c in committers:
                assert admin.fetch_offsets(c.group)[("load", 0)].offset >= c.acked
    finally:
        assert again.stop() == 0, again.output()


def test_while_a_worker_is_down_its_groups_have_no_coordinator_and_metadata_leaves_it_out(tmp_path):
    import asyncio

    from cohort.client.connection import BrokerConnection
    from cohort.protocol.errors import ErrorCode
    from cohort.client.admin import NewTopic
    from cohort.protocol.messages import FindCoordinatorRequest, MetadataRequest

    server = WorkersServer(tmp_path / "data", WORKERS).start()
    group = group_on_worker("down", 1, WORKERS)
    with BlockingAdmin(server.bootstrap_of(1)) as admin:
        admin.create_topics([NewTopic("kept", 3)])

    async def topics_seen_by_worker_1():
        conn = BrokerConnection("127.0.0.1", server.ports[1])
        try:
            meta = await conn.request(MetadataRequest(topics=None), 9)
            return [(t.name, t.error_code, [(p.partition_index, p.error_code, p.leader_id) for p in t.partitions])
                    for t in meta.topics], sorted(b.node_id for b in meta.brokers)
        finally:
            await conn.close()

    async def ask():
        conn = BrokerConnection("127.0.0.1", server.ports[0])
        try:
            found = await conn.request(FindCoordinatorRequest(key=group, key_type=0), 3)
            meta = await conn.request(MetadataRequest(topics=None), 9)
            return found.error_code, found.node_id, sorted(b.node_id for b in meta.brokers)
        finally:
            await conn.close()

    try:
        assert asyncio.run(ask()) == (0, 1, [0, 1, 2])
        assert asyncio.run(topics_seen_by_worker_1()) == ([("kept", 0, [(0, 0, 0), (1, 0, 0), (2, 0, 0)])], [0, 1, 2])

        # When worker 0 (the topic registry's owner) dies, worker 1 still lists its topics, leaderless.
        # That lasts only while worker 0 is down (its restart backoff plus its start): a Metadata request
        # worker 1 forwards before the supervisor told it of the death waits for the restarted worker 0
        # and sees its topics led again. So worker 0 is killed again until the leaderless answer is seen;
        # each quick death doubles the restart backoff (0.5, 1, 2 s), widening the window. Bounded: 3 kills.
        leaderless = [("kept", 0, [(p, ErrorCode.LEADER_NOT_AVAILABLE, -1) for p in range(3)])]
        for attempt in range(3):
            os.kill(worker_pids(server.process.pid)[0], signal.SIGKILL)
            deadline = time.monotonic() + 20
            seen = False
            while time.monotonic() < deadline and not seen:
                seen = asyncio.run(topics_seen_by_worker_1()) == (leaderless, [1, 2])
                if not seen and server.health()[0] == 200:
                    break  # worker 0 is back: the window closed before a poll got in
                time.sleep(0.05)
            wait_until(lambda: server.health()[0] == 200, 60, "worker 0 back")
            if seen:
                break
        assert seen, "worker 1 never listed worker 0's topics as leaderless while worker 0 was down"
        wait_until(lambda: asyncio.run(topics_seen_by_worker_1())[0][0][1:] == (0, [(0, 0, 0), (1, 0, 0), (2, 0, 0)]),
                   20, "topics led by worker 0 again")

        # When worker 1 dies, worker 0 answers COORDINATOR_NOT_AVAILABLE for its groups and lists 0 and 2 only,
        os.kill(worker_pids(server.process.pid)[1], signal.SIGKILL)
        seen = wait_until(lambda: (lambda a: a if a[0] == ErrorCode.COORDINATOR_NOT_AVAILABLE else None)(asyncio.run(ask())),
                          20, "FindCoordinator answers COORDINATOR_NOT_AVAILABLE")
        assert seen == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, [0, 2])
        # /health says which worker is not ready, and why.
        status, body = wait_until(lambda: (lambda h: h if h[0] == 503 else None)(server.health()), 20, "503")
        assert body.splitlines()[0] == "not ready", body
        [line] = [line for line in body.splitlines() if line.startswith("worker 1 ")]
        assert "restarting (last exit: killed by SIGKILL)" in line or line.endswith(": loading"), body
        # and once it is back and ready, worker 1 coordinates them again.
        wait_until(lambda: asyncio.run(ask()) == (0, 1, [0, 1, 2]), 60, "worker 1 coordinates again")
        assert server.health()[0] == 200
    finally:
        assert server.stop() == 0, server.output()


class ClientCommitter(threading.Thread):
    """Commits 1, 2, 3, ... with a real client's own commit call (a consumer with a manual assignment)."""

    def __init__(self, kind: str, bootstrap: str, group: str) -> None:
        super().__init__(daemon=True)
        self.kind, self.bootstrap, self.group = kind, bootstrap, group
        self.acked = self.attempted = 0
        self.stop = threading.Event()

    def run(self) -> None:
        if self.kind == "kafka-python":
            from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

            consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group, enable_auto_commit=False,
                                     request_timeout_ms=5000, retry_backoff_ms=50)
            tp = TopicPartition("load", 0)
            consumer.assign([tp])

            def commit(n: int) -> None:
                consumer.commit({tp: OffsetAndMetadata(n, "", -1)})
        else:
            from confluent_kafka import Consumer, TopicPartition

            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                 "enable.auto.commit": False, "socket.timeout.ms": 5000})

            def commit(n: int) -> None:
                consumer.commit(offsets=[TopicPartition("load", 0, n)], asynchronous=False)
        try:
            while not self.stop.is_set():
                self.attempted += 1
                try:
                    commit(self.attempted)
                except Exception:  # noqa: BLE001 - the coordinator may be down: the next commit retries
                    time.sleep(0.05)
                    continue
                self.acked = self.attempted
        finally:
            consumer.close()


def test_real_clients_committing_through_a_worker_kill_lose_no_acknowledged_commit(tmp_path):
    from kafka.admin import KafkaAdminClient, NewTopic

    server = WorkersServer(tmp_path / "data", WORKERS).start()
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap_of(0))
    admin.create_topics([NewTopic("load", 1, 1)])
    admin.close()
    # Two groups per client library, all on worker 1 (the one killed), bootstrapping from every worker.
    committers = [ClientCommitter(kind, server.bootstrap_of(i % WORKERS), group_on_worker(f"real-{kind}-{i}", 1, WORKERS))
                  for i, kind in enumerate(["kafka-python", "confluent", "kafka-python", "confluent"])]
    try:
        for c in committers:
            c.start()
        wait_until(lambda: all(c.acked >= 10 for c in committers), 60, "every client committed 10 times")
        os.kill(worker_pids(server.process.pid)[1], signal.SIGKILL)
        before = {c.group: c.acked for c in committers}
        wait_until(lambda: all(c.acked > before[c.group] + 5 for c in committers), 90, "commits resumed")
    finally:
        for c in committers:
            c.stop.set()
        for c in committers:
            c.join(60)
    with BlockingAdmin(server.bootstrap_of(2)) as admin:
        for c in committers:
            committed = admin.fetch_offsets(c.group)[("load", 0)].offset
            assert c.acked <= committed <= c.attempted, (c.kind, c.group, c.acked, committed, c.attempted)
    assert server.stop() == 0, server.output()
