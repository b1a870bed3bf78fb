"""The console's HTTP connections are bounded (in all, per address, in time) and never starve the Kafka
listener of descriptors: a real ``cohort serve`` under a 400-descriptor limit, real sockets."""
from __future__ import annotations

import socket
import time

import pytest

from bounded_wait import wait_until
from console_http import ConsoleServer, call
from dribbling_connections import (DescriptorLimited, close_all, commit_and_read_back,
                                   dribblers, still_open, take_every_descriptor)

pytestmark = pytest.mark.timeout(180)

PARTIAL_HEADER = b"GET /api/groups HTTP/1.1\r\nHost: 127.0.0.1\r\n"


class LimitedServer(DescriptorLimited, ConsoleServer):
    """``cohort serve`` under RLIMIT_NOFILE = `DESCRIPTOR_LIMIT`."""


@pytest.fixture
def limited(tmp_path):
    server = LimitedServer(tmp_path / "data").start()
    yield server
    server.stop()


def test_dribbling_console_connections_are_bounded_and_closed_while_kafka_clients_commit(limited):
    baseline = limited.descriptors()
    # 10 per address: only the bound in all applies
    socks = dribblers(limited.console_port, 380, sources=38, head=PARTIAL_HEADER)
    try:
        time.sleep(1.0)  # the scenario: what the server keeps a second after they came
        held = still_open(socks)
        assert len(held) <= 64, f"{len(held)} console connections held beyond console.max.connections"
        assert limited.descriptors() <= baseline + 64 + 16
        # Kafka clients still connect and commit while the console's connections are held
        assert commit_and_read_back(limited.bootstrap, "under-dribble", 42) == 42
        # a header that dribbles on is cut at console.request.timeout.ms (5 s) of its accept
        started = time.monotonic()
        while still_open(held) and time.monotonic() - started < 20:
            for sock in still_open(held):
                try:
                    sock.send(b"X")
                except OSError:
                    pass
            time.sleep(0.5)
        assert not still_open(held), "dribbling console connections were not closed"
        assert time.monotonic() - started < 12
    finally:
        close_all(socks)
    # the console answers again once they are gone
    wait_until(lambda: call(f"http://127.0.0.1:{limited.console_port}/api/groups")[0] == 200, 15,
               "the console to answer")
    assert len(limited.stderr()) < 100_000


def test_one_address_holds_at_most_its_share_of_console_connections(limited):
    socks = dribblers(limited.console_port, 40, sources=1, head=PARTIAL_HEADER)
    try:
        time.sleep(1.0)
        assert len(still_open(socks)) == 16  # console.max.connections.per.ip
        # another address is still served at once
        other = socket.create_connection(("127.0.0.1", limited.console_port), timeout=10)
        try:
            other.sendall(b"GET /api/groups HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert other.recv(64).startswith(b"HTTP/1.1 200")
        finally:
            other.close()
    finally:
        close_all(socks)


def test_an_idle_console_connection_is_closed_after_its_idle_time(tmp_path):
    server = ConsoleServer(tmp_path / "data", "--console.connections.max.idle.ms", "1000").start()
    try:
        sock = socket.create_connection(("127.0.0.1", server.console_port), timeout=10)
        try:
            sock.sendall(b"GET /api/groups HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert sock.recv(64).startswith(b"HTTP/1.1 200")
            sock.settimeout(0.2)
            wait_until(lambda: closed_blocking(sock), 10, "the idle connection to be closed")
        finally:
            sock.close()
    finally:
        assert server.stop() == 0


def closed_blocking(sock: socket.socket) -> bool:
    try:
        while data := sock.recv(65536):
            pass  # the rest of the answer
        return True
    except socket.timeout:
        return False
    except OSError:
        return True


def test_refused_accepts_are_logged_once_per_interval_on_both_listeners(limited):
    """Kafka connections fill the descriptor limit: both listeners' accepts fail; each says so once."""
    held = take_every_descriptor(limited, limited.console_port)
    try:
        wait_until(lambda: "listener=console" in limited.stderr(), 30, "the console to report refused accepts")
        time.sleep(2.0)  # the scenario: accepts keep failing for a while
        lines = [line for line in limited.stderr().splitlines() if "cannot accept connections" in line]
        assert len(lines) <= 4, lines[:10]
        assert "Traceback" not in limited.stderr()
    finally:
        close_all(held)
    assert commit_and_read_back(limited.bootstrap, "after-the-flood", 7) == 7
