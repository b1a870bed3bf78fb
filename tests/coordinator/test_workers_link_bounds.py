"""The `--workers` link (a loopback port per worker, for the workers alone) holds only what it may: at most
LINK_MAX_CONNECTIONS sockets, each closed unless it signs in within LINK_SIGN_IN_S, while the workers go on
serving. Sockets that send nothing used to stay open, uncounted, until connections.authentication.timeout.ms."""
from __future__ import annotations

import os
import socket
import time

import pytest

from cohort.coordinator.server.node import LINK_MAX_CONNECTIONS
from server_harness import RawClient
from workers_harness import WorkersServer
from cohort.protocol.messages import MetadataRequest

pytestmark = pytest.mark.timeout(180)


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    with open(f"/proc/{pid}/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                ports.add(int(fields[1].split(":")[1], 16))
    return ports


def closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def test_the_worker_link_bounds_its_sockets_and_their_time_to_sign_in(tmp_path):
    server = WorkersServer(tmp_path / "data", 2).start()
    sockets: list[socket.socket] = []
    try:
        link_ports = listening_ports(server.process.pid) - {*server.ports, server.metrics_port}
        assert len(link_ports) == 2, link_ports
        link = min(link_ports)
        sockets = [socket.create_connection(("127.0.0.1", link), timeout=10) for _ in range(150)]
        deadline = time.monotonic() + 10
        while sum(not closed(s) for s in sockets) > LINK_MAX_CONNECTIONS:
            assert time.monotonic() < deadline, "more sockets than the bound stayed open"
            time.sleep(0.05)
        # the others are closed at their sign-in deadline (seconds), not at connections.authentication.timeout.ms
        deadline = time.monotonic() + 8
        while any(not closed(s) for s in sockets):
            assert time.monotonic() < deadline, "a socket that never signed in stayed open"
            time.sleep(0.1)
        for worker in range(2):  # the workers still reach each other: Metadata is forwarded to the controller
            client = RawClient(server.ports[worker])
            try:
                assert client.request(MetadataRequest(topics=[]), 1).brokers
            finally:
                client.sock.close()
    finally:
        for s in sockets:
            s.close()
        assert server.stop() == 0
