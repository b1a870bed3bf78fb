"""Connections that dribble a request's head, and a ``cohort serve`` under a low descriptor limit: what
the tests of the console's and the metrics port's connection bounds share."""
from __future__ import annotations

import os
import resource
import select
import socket
import subprocess

from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from bounded_wait import wait_until
from cohort_process import cohort_command

DESCRIPTOR_LIMIT = 400


class DescriptorLimited:
    """Mixed into a server class of the tests: ``cohort serve`` started under RLIMIT_NOFILE = `DESCRIPTOR_LIMIT`."""

    def launch(self):
        def lower_limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTOR_LIMIT, DESCRIPTOR_LIMIT))

        self._stderr = open(self.stderr_path, "w")
        self.process = subprocess.Popen(cohort_command(*self.args), env=self.env, stdout=subprocess.DEVNULL,
                                        stderr=self._stderr, preexec_fn=lower_limit)
        return self

    def descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))


def dribblers(port: int, count: int, sources: int, head: bytes) -> list[socket.socket]:
    """`count` connections from `sources` loopback addresses, each having sent `head`, part of a request's head."""
    opened = []
    for index in range(count):
        sock = socket.socket()
        sock.bind((f"127.0.0.{2 + index % sources}", 0))
        sock.settimeout(5)
        try:
            sock.connect(("127.0.0.1", port))
            sock.sendall(head)
        except OSError:
            pass  # closed at once (refused beyond the bound): counted as closed below
        opened.append(sock)
    return opened


def closed(sock: socket.socket) -> bool:
    """True once the server closed it (EOF or reset); reads whatever it got."""
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
    """A kafka-python consumer commits `offset` for events/0 and reads it back: the Kafka listener still serves."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             request_timeout_ms=20000)
    try:
        partition = TopicPartition("events", 0)
        consumer.commit({partition: OffsetAndMetadata(offset, "", -1)})
        return consumer.committed(partition)
    finally:
        consumer.close()


def take_every_descriptor(server, other_port: int) -> list[socket.socket]:
    """Kafka connections until the server's descriptors run out (its Kafka listener says so), then up to 20
    connections to `other_port`, whose accepts now fail: the sockets, for the caller to close."""
    held: list[socket.socket] = []
    for _ in range(DESCRIPTOR_LIMIT + 50):
        try:
            held.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        except OSError:
            break
    wait_until(lambda: f"listener=127.0.0.1:{server.port}" in server.stderr(), 30,
               "the Kafka listener to report refused accepts")
    for _ in range(20):
        try:
            held.append(socket.create_connection(("127.0.0.1", other_port), timeout=5))
        except OSError:
            break
    return held
