"""The metrics port's connections are bounded (in all, per address, in time) and never starve the Kafka
listener of descriptors: a real ``cohort serve`` under a 400-descriptor limit, real sockets."""
from __future__ import annotations

import os
import resource
import select
import socket
import subprocess
import time

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from bounded_wait import wait_until
from cohort_process import CohortServer, cohort_command, http_get

pytestmark = pytest.mark.timeout(180)

DESCRIPTOR_LIMIT = 400
PARTIAL_HEADER = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"


class LimitedServer(CohortServer):
    """``cohort serve`` started under RLIMIT_NOFILE = `DESCRIPTOR_LIMIT`."""

    def launch(self):
        def lower_limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTOR_LIMIT, DESCRIPTOR_LIMIT))

        self._stderr = open(self.stderr_path, "w")
        self.process = subprocess.Popen(cohort_command(*self.args), env=self.env, stdout=subprocess.DEVNULL,
                                        stderr=self._stderr, preexec_fn=lower_limit)
        return self

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def healthy(self) -> bool:
        try:
            return http_get(f"http://127.0.0.1:{self.metrics_port}/health", timeout=2)[0] == 200
        except OSError:
            return False


@pytest.fixture
def limited(tmp_path):
    server = LimitedServer(tmp_path / "data").start()
    yield server
    server.stop()


def dribblers(port: int, count: int, sources: int) -> list[socket.socket]:
    """`count` connections from `sources` loopback addresses, each having sent part of a request's head."""
    opened = []
    for index in range(count):
        sock = socket.socket()
        sock.bind((f"127.0.0.{2 + index % sources}", 0))
        sock.settimeout(5)
        try:
            sock.connect(("127.0.0.1", port))
            sock.sendall(PARTIAL_HEADER)
        except OSError:
            pass  # closed at once (refused beyond the bound): counted as closed below
        opened.append(sock)
    return opened


def closed(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(65536) == b""
    except OSError:
        return True


def still_open(socks: list[socket.socket]) -> list[socket.socket]:
    return [s for s in socks if s.fileno() >= 0 and not closed(s)]


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def commit_and_read_back(bootstrap: str, group: str, offset: int) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             request_timeout_ms=20000)
    try:
        partition = TopicPartition("events", 0)
        consumer.commit({partition: OffsetAndMetadata(offset, "", -1)})
        return consumer.committed(partition)
    finally:
        consumer.close()


def test_dribbling_metrics_connections_are_bounded_and_closed_while_kafka_clients_commit(limited):
    baseline = limited.descriptors()
    socks = dribblers(limited.metrics_port, 380, sources=38)  # 10 per address
    try:
        time.sleep(1.0)  # the scenario: what the server keeps a second after they came
        held = still_open(socks)
        assert len(held) <= 16, f"{len(held)} metrics connections held beyond metrics.max.connections"
        assert limited.descriptors() <= baseline + 16 + 8
        assert commit_and_read_back(limited.bootstrap, "under-metrics-dribble", 42) == 42
        # a head that dribbles on is cut at metrics.request.timeout.ms (5 s) of its accept
        started = time.monotonic()
        while still_open(held) and time.monotonic() - started < 20:
            for sock in still_open(held):
                try:
                    sock.send(b"X")
                except OSError:
                    pass
            time.sleep(0.5)
        assert not still_open(held), "dribbling metrics connections were not closed"
        assert time.monotonic() - started < 12
    finally:
        close_all(socks)
    wait_until(limited.healthy, 15, "/health to answer")
    assert len(limited.stderr()) < 100_000


def test_one_address_holds_at_most_its_share_of_metrics_connections(limited):
    socks = dribblers(limited.metrics_port, 20, sources=1)
    try:
        time.sleep(1.0)
        assert len(still_open(socks)) == 8  # metrics.max.connections.per.ip
        assert limited.healthy()  # another address (127.0.0.1) is served at once
    finally:
        close_all(socks)


def test_refused_metrics_accepts_are_logged_once_per_interval(limited):
    """Kafka connections fill the descriptor limit: the metrics port's accepts fail; it says so once."""
    held = []
    try:
        for _ in range(DESCRIPTOR_LIMIT + 50):
            try:
                held.append(socket.create_connection(("127.0.0.1", limited.port), timeout=5))
            except OSError:
                break
        wait_until(lambda: f"listener=127.0.0.1:{limited.port}" in limited.stderr(), 30,
                   "the Kafka listener to report refused accepts")
        for _ in range(20):  # once every descriptor is taken
            try:
                held.append(socket.create_connection(("127.0.0.1", limited.metrics_port), timeout=5))
            except OSError:
                break
        wait_until(lambda: "listener=metrics" in limited.stderr(), 30, "the metrics port to report refused accepts")
        time.sleep(2.0)  # the scenario: accepts keep failing for a while
        lines = [line for line in limited.stderr().splitlines() if "cannot accept connections" in line]
        assert len(lines) <= 4, lines[:10]
        assert "Traceback" not in limited.stderr()
    finally:
        close_all(held)
    assert commit_and_read_back(limited.bootstrap, "after-the-metrics-flood", 7) == 7
    wait_until(limited.healthy, 15, "/health to answer")


def test_the_workers_supervisor_bounds_its_metrics_port_too(tmp_path):
    """`--workers 2`: the one public metrics port is the supervisor's; the same bounds hold there."""
    from workers_harness import WorkersServer

    server = WorkersServer(tmp_path / "data", 2, "--metrics.request.timeout.ms", "2000").start()
    try:
        socks = dribblers(server.metrics_port, 20, sources=1)
        try:
            time.sleep(1.0)
            held = still_open(socks)
            assert len(held) == 8  # metrics.max.connections.per.ip
            assert http_get(f"http://127.0.0.1:{server.metrics_port}/health", timeout=10)[0] == 200
            wait_until(lambda: not still_open(held), 15, "the dribbling connections to be closed")
        finally:
            close_all(socks)
        status, body = http_get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10)
        assert status == 200 and 'cohort_worker_up{worker="1"} 1' in body
    finally:
        assert server.stop() == 0
