"""Memory and connections stay bounded whatever clients send (hardening, items 6 and 7).

* `queued.max.request.bytes`: ten connections each sending part of a 100 MB request took the server
  from 39 MB to 983 MB of RSS. Partly received requests now share one budget; a connection that would
  go beyond it stops being read until others finish, while complete small requests are served.
* `socket.request.read.timeout.ms`: the idle timer restarted on every byte, so clients trickling one byte
  at a time held their connections forever. A request must now arrive whole within the timeout.
"""
from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

from cohort_process import CohortServer, metric_value
from server_harness import RawClient
from cohort.protocol.messages import ApiVersionsRequest

pytestmark = pytest.mark.timeout(120)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_partial_huge_requests_are_held_within_the_global_budget(tmp_path):
    budget = 20 << 20
    server = CohortServer(tmp_path / "data", "--queued.max.request.bytes", str(budget),
                          "--socket.request.read.timeout.ms", "60000").start()
    attackers = []
    try:
        before = rss_bytes(server.process.pid)
        chunk = b"\x00" * (1 << 20)
        for _ in range(10):
            s = socket.create_connection(("127.0.0.1", server.port))
            s.sendall(struct.pack(">i", 100_000_000))  # a 100 MB request that never completes
            s.settimeout(0.2)
            attackers.append(s)
        deadline = time.monotonic() + 20
        stuck = set()
        while len(stuck) < len(attackers) and time.monotonic() < deadline:
            for i, s in enumerate(attackers):  # push up to 30 MB each, until the server stops reading
                if i in stuck:
                    continue
                try:
                    for _ in range(30):
                        s.sendall(chunk)
                    stuck.add(i)
                except (socket.timeout, BlockingIOError):
                    stuck.add(i)  # the server stopped reading this one (kernel buffers are full)
        grown = rss_bytes(server.process.pid) - before
        bystander = RawClient(server.port)
        try:
            assert bystander.request(ApiVersionsRequest(), 0).error_code == 0  # complete requests are served
        finally:
            bystander.close()
    finally:
        for s in attackers:
            s.close()
        assert server.stop() == 0, server.stderr()
    # The budget, a read chunk per connection over it, and the interpreter's own slack; not 10 x 30 MB.
    assert grown < budget + 60 << 20, f"RSS grew by {grown >> 20} MiB"


def test_a_request_trickled_byte_by_byte_is_cut_off_at_the_read_timeout(tmp_path):
    server = CohortServer(tmp_path / "data", "--socket.request.read.timeout.ms", "1000",
                          "--connections.max.idle.ms", "600000").start()
    trickling = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(20)]
    quiet = RawClient(server.port)  # connected, nothing in flight: only the idle timeout applies to it
    try:
        frame = struct.pack(">i", 64) + b"\x00" * 64
        closed = set()
        deadline = time.monotonic() + 15
        i = 0
        while len(closed) < len(trickling) and time.monotonic() < deadline:
            for n, s in enumerate(trickling):
                if n in closed:
                    continue
                try:
                    s.send(frame[i % len(frame):i % len(frame) + 1])
                except OSError:
                    closed.add(n)
            i += 1
            time.sleep(0.05)  # the trickle rate, not a wait for a result
            for n, s in enumerate(trickling):
                s.setblocking(False)
                try:
                    if s.recv(1) == b"":
                        closed.add(n)
                except BlockingIOError:
                    pass
                except OSError:
                    closed.add(n)
        assert len(closed) == len(trickling), f"{len(trickling) - len(closed)} trickling connections still open"
        assert quiet.request(ApiVersionsRequest(), 0).error_code == 0
        assert metric_value(server.scrape(), "cohort_connections_closed_total", reason="request_read_timeout") == 20
    finally:
        for s in trickling:
            s.close()
        quiet.close()
        assert server.stop() == 0, server.stderr()
