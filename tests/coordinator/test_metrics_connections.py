"""The metrics port's connections are bounded (in all, per address, in time) and never starve the Kafka
listener of descriptors: a real ``cohort serve`` under a 400-descriptor limit, real sockets."""
from __future__ import annotations

import time

import pytest

from bounded_wait import wait_until
from cohort_process import CohortServer, http_get
from dribbling_connections import (DescriptorLimited, close_all, commit_and_read_back,
                                   dribblers, still_open, take_every_descriptor)

pytestmark = pytest.mark.timeout(180)

PARTIAL_HEADER = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"


class LimitedServer(DescriptorLimited, CohortServer):
    """``cohort serve`` under RLIMIT_NOFILE = `DESCRIPTOR_LIMIT`."""

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


def test_dribbling_metrics_connections_are_bounded_and_closed_while_kafka_clients_commit(limited):
    baseline = limited.descriptors()
    socks = dribblers(limited.metrics_port, 380, sources=38, head=PARTIAL_HEADER)  # 10 per address
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
    socks = dribblers(limited.metrics_port, 20, sources=1, head=PARTIAL_HEADER)
    try:
        time.sleep(1.0)
        assert len(still_open(socks)) == 8  # metrics.max.connections.per.ip
        assert limited.healthy()  # another address (127.0.0.1) is served at once
    finally:
        close_all(socks)


def test_refused_metrics_accepts_are_logged_once_per_interval(limited):
    """Kafka connections fill the descriptor limit: the metrics port's accepts fail; it says so once."""
    held = take_every_descriptor(limited, limited.metrics_port)
    try:
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
        socks = dribblers(server.metrics_port, 20, sources=1, head=PARTIAL_HEADER)
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
