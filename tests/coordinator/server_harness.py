"""A real Cohort server and a raw Kafka-protocol client, for the server and real-client tests.

Kept out of conftest.py so tests import it by a name no other test directory uses.
"""
from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from pathlib import Path

from cohort.coordinator.config import CoordinatorConfig
from cohort.coordinator.server.node import CoordinatorServer
from cohort.protocol.framing import FrameReader, decode_response, encode_request

FAST_GROUP_SETTINGS = {
    "group_initial_rebalance_delay_ms": 0,
    "group_min_session_timeout_ms": 500,
}


class ServerThread:
    """A CoordinatorServer served by an event loop in a daemon thread."""

    def __init__(self, config: CoordinatorConfig) -> None:
        self.config = config
        self.loop = asyncio.new_event_loop()
        self.server = CoordinatorServer(config)
        self._thread = threading.Thread(target=self.loop.run_forever, name="cohort-test-server", daemon=True)

    def start(self) -> "ServerThread":
        self._thread.start()
        self.call(self.server.start())
        return self

    def call(self, coro, timeout: float = 30):
        """Run a coroutine on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def run(self, fn, timeout: float = 10):
        """Run a plain function on the server's loop (to read server state safely)."""
        async def wrapper():
            return fn()
        return self.call(wrapper(), timeout)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self.call(self.server.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


def make_config(data_dir: Path, **overrides) -> CoordinatorConfig:
    settings = {"listeners": "127.0.0.1:0", "data_dir": data_dir, **FAST_GROUP_SETTINGS}
    settings.update(overrides)
    return CoordinatorConfig(**settings)


class RawClient:
    """A blocking Kafka-protocol connection using our codec (requests no library sends)."""

    def __init__(self, port: int, timeout: float = 10.0, source: str | None = None) -> None:
        """`source`: the local address to connect from (any of 127.0.0.0/8 on loopback)."""
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = FrameReader()
        self.frames: list[bytes] = []
        self.correlation_id = 0

    @classmethod
    def over(cls, sock: socket.socket) -> "RawClient":
        """A client on a socket opened elsewhere (a TLS one, say)."""
        client = cls.__new__(cls)
        client.sock, client.reader, client.frames, client.correlation_id = sock, FrameReader(), [], 0
        return client

    def send(self, message, version: int, client_id: str | None = "raw-client") -> int:
        self.correlation_id += 1
        self.sock.sendall(encode_request(message, version, self.correlation_id, client_id))
        return self.correlation_id

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive_frame(self) -> bytes:
        while not self.frames:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("server closed the connection")
            self.frames.extend(self.reader.feed(data))
        return self.frames.pop(0)

    def receive(self, api_key: int, version: int):
        correlation_id, message = decode_response(api_key, version, self.receive_frame())
        return correlation_id, message

    def request(self, message, version: int, client_id: str | None = "raw-client"):
        sent = self.send(message, version, client_id)
        correlation_id, response = self.receive(message.API_KEY, version)
        assert correlation_id == sent
        return response

    def is_closed_by_server(self, timeout: float = 5.0) -> bool:
        """True if the server closes the connection within `timeout` (reads until EOF)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return False
            except ConnectionResetError:
                return True
            if not data:
                return True
        return False

    def close(self) -> None:
        self.sock.close()


def size_prefixed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body
