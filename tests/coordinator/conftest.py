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

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cohort_process import CohortServer  # noqa: E402
from server_harness import FAST_GROUP_SETTINGS, RawClient, ServerThread, make_config  # noqa: E402


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
