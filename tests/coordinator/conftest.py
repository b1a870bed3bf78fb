"""Fixtures that run a real Cohort server for the server and real-client tests.

* `server`: a `CoordinatorServer` in-process, on its own event loop in a
  background thread (so blocking client libraries can run in the test's
  thread), on an ephemeral port with a tmp data dir.
* `cohort_serve`: the real ``cohort serve`` console script in a subprocess.
* `raw_client`: a tiny blocking Kafka-protocol client built on our codec, for
  requests no client library sends (bad input, odd versions).

Test settings keep rebalances fast: no initial rebalance delay and a low
minimum session timeout, so clients can use short sessions.
"""
from __future__ import annotations

import asyncio
import socket
import struct
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cohort_process import CohortServer  # noqa: E402
from coordinator.config import CoordinatorConfig  # noqa: E402
from coordinator.server import CoordinatorServer  # noqa: E402
from protocol.framing import FrameReader, decode_response, encode_request  # noqa: E402

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


@pytest.fixture
def server_factory(tmp_path):
    """Start in-process servers with config overrides; all are stopped at teardown."""
    started: list[ServerThread] = []

    def start(data_dir: Path | None = None, **overrides) -> ServerThread:
        directory = data_dir or tmp_path / f"data-{len(started)}"
        thread = ServerThread(make_config(directory, **overrides)).start()
        started.append(thread)
        return thread

    yield start
    for thread in started:
        thread.stop()


@pytest.fixture
def server(server_factory) -> ServerThread:
    return server_factory()


@pytest.fixture
def cohort_serve(tmp_path):
    """``cohort serve`` in a subprocess, tuned for fast rebalances."""
    process = CohortServer(
        tmp_path / "data",
        "--group.min.session.timeout.ms", str(FAST_GROUP_SETTINGS["group_min_session_timeout_ms"]),
    ).start()
    yield process
    assert process.stop() == 0, process.stderr()


class RawClient:
    """A blocking Kafka-protocol connection using our codec (requests no library sends)."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = FrameReader()
        self.frames: list[bytes] = []
        self.correlation_id = 0

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


@pytest.fixture
def raw_client():
    """Open raw connections to a port; all are closed at teardown."""
    opened: list[RawClient] = []

    def connect(port: int) -> RawClient:
        client = RawClient(port)
        opened.append(client)
        return client

    yield connect
    for client in opened:
        client.close()


def size_prefixed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body
