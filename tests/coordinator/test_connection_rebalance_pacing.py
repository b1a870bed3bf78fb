"""A burst of JoinGroup/SyncGroup requests is served a slice of each loop turn; other requests are not held up.

Each scenario holds the server's loop while the test sends a
burst on many real connections, so that one loop turn reads it all, then
checks the order in which the server started the requests (a recording
wrapper around the real handlers) and what every client got back.
"""
from __future__ import annotations

import threading
import time

import pytest

from cohort.protocol import messages as m

pytestmark = pytest.mark.timeout(60)

JOIN, FETCH = m.JoinGroupRequest.API_KEY, m.OffsetFetchRequest.API_KEY
MEMBER_ID_REQUIRED = 79


def first_join(group: str) -> m.JoinGroupRequest:
    """A new member's first JoinGroup (v5): answered at once with MEMBER_ID_REQUIRED."""
    return m.JoinGroupRequest(
        group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
        group_instance_id=None, protocol_type="consumer",
        protocols=[m.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00")], reason=None)


def record_starts(server) -> list[int]:
    """Wrap the JoinGroup and OffsetFetch handlers so each start is recorded (API key, in order)."""
    started: list[int] = []

    def install():
        routes = server.server.handlers.routes
        for key in (JOIN, FETCH):
            handler = routes[key]

            def recording(req, version, ctx, _handler=handler, _key=key):
                started.append(_key)
                return _handler(req, version, ctx)  # a response, or the PendingAnswer of a handler that waits

            routes[key] = recording

    server.run(install)
    return started


def hold_loop(server, connections: int):
    """Once `connections` are accepted, block the server's loop until the returned function is called.

    What is sent meanwhile is read in one loop turn.
    """
    deadline = time.monotonic() + 10
    while server.run(lambda: len(server.server._connections)) < connections:
        assert time.monotonic() < deadline, "connections not accepted"
        time.sleep(0.01)
    blocked, release = threading.Event(), threading.Event()

    def hold() -> None:
        blocked.set()
        release.wait(10)

    server.loop.call_soon_threadsafe(hold)
    assert blocked.wait(5)
    return release.set


def test_a_fetch_read_with_a_burst_of_joins_starts_before_the_joins_queued_behind_the_slice(server, raw_client):
    server.run(lambda: setattr(server.server.rebalance_pacer, "slice_s", 0.0))  # one paced start per turn
    started = record_starts(server)
    members = [raw_client(server.port) for _ in range(30)]
    fetcher = raw_client(server.port)
    release = hold_loop(server, 31)
    for i, member in enumerate(members):
        member.send(first_join(f"big-{i % 3}"), 5)
    fetcher.send(m.OffsetFetchRequest(group_id="other", topics=None), 7)
    release()
    assert fetcher.receive(FETCH, 7)[1].error_code == 0
    answers = [member.receive(JOIN, 5)[1] for member in members]
    assert [a.error_code for a in answers] == [MEMBER_ID_REQUIRED] * 30  # every join served, in later turns
    assert len(started) == 31 and started.index(FETCH) <= 1


def test_requests_behind_a_paced_join_on_its_connection_wait_for_it_and_keep_their_order(server, raw_client):
    server.run(lambda: setattr(server.server.rebalance_pacer, "slice_s", 0.0))
    flood = [raw_client(server.port) for _ in range(10)]
    client = raw_client(server.port)
    release = hold_loop(server, 11)
    for i, member in enumerate(flood):
        member.send(first_join(f"g{i}"), 5)
    join_id = client.send(first_join("mine"), 5)
    fetch_id = client.send(m.OffsetFetchRequest(group_id="mine", topics=None), 7)
    release()
    assert client.receive(JOIN, 5)[0] == join_id
    assert client.receive(FETCH, 7)[0] == fetch_id
    assert all(member.receive(JOIN, 5)[1].error_code == MEMBER_ID_REQUIRED for member in flood)


def test_a_connection_closed_while_its_join_waits_is_skipped_and_the_others_are_served(server, raw_client):
    server.run(lambda: setattr(server.server.rebalance_pacer, "slice_s", 0.0))
    members = [raw_client(server.port) for _ in range(10)]
    release = hold_loop(server, 10)
    for i, member in enumerate(members):
        member.send(first_join(f"c{i}"), 5)
    members[5].close()
    release()
    survivors = members[:5] + members[6:]
    assert all(member.receive(JOIN, 5)[1].error_code == MEMBER_ID_REQUIRED for member in survivors)
    assert server.run(lambda: len(server.server.rebalance_pacer.waiting)) == 0
