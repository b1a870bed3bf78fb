"""An async request handler runs in a real asyncio task, on every supported Python.

Handlers may use what needs a task (``asyncio.timeout``, ``wait_for``,
``current_task``), whether they suspend or not; results, exceptions and
cancellation at shutdown behave as in any task, and pipelined answers keep
request order. Each scenario swaps one API's handler in a real server and
talks to it over a real socket. The core subset runs this file on 3.12 and
3.13 too (scripts/test), where the first step is eager (inline). A commit that
arrives while the rebalance pacer holds a burst back starts its fsync round
at once (the store's `hurry`).
"""
from __future__ import annotations

import asyncio
import time

import pytest

from cohort.coordinator.server.handlers import answering
from cohort.protocol.framing import encode_request
from cohort.protocol import messages as m

pytestmark = pytest.mark.timeout(60)

HEARTBEAT = m.HeartbeatRequest.API_KEY
NOT_COORDINATOR = 16
REQUEST_TIMED_OUT = 7


def heartbeat(group: str = "g") -> m.HeartbeatRequest:
    return m.HeartbeatRequest(group_id=group, generation_id=1, member_id="m", group_instance_id=None)


def answer(error_code: int) -> m.HeartbeatResponse:
    return m.HeartbeatResponse(throttle_time_ms=0, error_code=error_code)


def serve_heartbeats_with(server, handler) -> None:
    """Replace the Heartbeat handler of a running server (on its own loop)."""
    server.run(lambda: server.server.handlers.routes.__setitem__(HEARTBEAT, answering(handler)))


def test_a_handler_timing_out_with_asyncio_timeout_answers(server, raw_client):
    async def handler(req, version, ctx):
        try:
            async with asyncio.timeout(0.05):
                await asyncio.get_running_loop().create_future()  # never done
        except TimeoutError:
            return answer(REQUEST_TIMED_OUT)
        return answer(0)

    serve_heartbeats_with(server, handler)
    client = raw_client(server.port)
    started = time.monotonic()
    assert client.request(heartbeat(), 4).error_code == REQUEST_TIMED_OUT
    assert time.monotonic() - started < 5


def test_a_handler_finishing_within_asyncio_timeout_answers_its_result(server, raw_client):
    async def handler(req, version, ctx):
        async with asyncio.timeout(5):
            await asyncio.sleep(0.01)
        return answer(0)

    serve_heartbeats_with(server, handler)
    assert raw_client(server.port).request(heartbeat(), 4).error_code == 0


def test_a_handler_using_wait_for_gets_the_result_or_the_timeout(server, raw_client):
    async def handler(req, version, ctx):
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.call_later(0.01, ready.set_result, NOT_COORDINATOR)
        code = await asyncio.wait_for(ready, 5)
        try:
            await asyncio.wait_for(loop.create_future(), 0.02)
        except TimeoutError:
            return answer(code)
        return answer(0)

    serve_heartbeats_with(server, handler)
    assert raw_client(server.port).request(heartbeat(), 4).error_code == NOT_COORDINATOR


def test_a_handler_runs_inside_its_own_task_from_its_first_step(server, raw_client):
    tasks = []

    async def handler(req, version, ctx):
        tasks.append(asyncio.current_task())  # before any suspension
        await asyncio.sleep(0)
        tasks.append(asyncio.current_task())
        return answer(0)

    serve_heartbeats_with(server, handler)
    client = raw_client(server.port)
    client.request(heartbeat(), 4)
    client.request(heartbeat(), 4)
    assert len(tasks) == 4 and None not in tasks
    assert tasks[0] is tasks[1] and tasks[2] is tasks[3] and tasks[0] is not tasks[2]


def test_an_exception_after_a_suspension_closes_only_that_connection(server, raw_client):
    async def handler(req, version, ctx):
        await asyncio.sleep(0.01)
        if req.group_id == "bad":
            raise ValueError("boom")
        return answer(0)

    serve_heartbeats_with(server, handler)
    bad, good = raw_client(server.port), raw_client(server.port)
    bad.send(heartbeat("bad"), 4)
    assert bad.is_closed_by_server()
    assert good.request(heartbeat("good"), 4).error_code == 0


def test_pipelined_answers_keep_request_order_when_later_handlers_finish_first(server, raw_client):
    # Heartbeats may overlap on one connection: the first waits longest, yet is answered first.
    async def handler(req, version, ctx):
        await asyncio.sleep(int(req.group_id) / 1000)
        return answer(int(req.group_id))

    serve_heartbeats_with(server, handler)
    client = raw_client(server.port)
    sent = [client.send(heartbeat(str(delay)), 4) for delay in (60, 30, 0)]
    received = [client.receive(HEARTBEAT, 4) for _ in sent]
    assert [cid for cid, _ in received] == sent
    assert [r.error_code for _, r in received] == [60, 30, 0]


def test_stop_cancels_a_handler_that_never_finishes_and_the_server_stops(server_factory, raw_client):
    server = server_factory(shutdown_timeout_ms=400)
    seen = []

    async def handler(req, version, ctx):
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return answer(0)

    serve_heartbeats_with(server, handler)
    client = raw_client(server.port)
    client.send(heartbeat(), 4)
    deadline = time.monotonic() + 5
    while not server.run(lambda: len(server.server.inflight)) and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    server.call(server.server.stop())
    assert seen == ["cancelled"] and time.monotonic() - started < 3
    assert server.run(lambda: len(server.server.inflight)) == 0
    assert client.is_closed_by_server()  # never answered: the client retries elsewhere


class _Waiting:
    """Stands in the rebalance pacer's queue, as a connection whose JoinGroup waits for a later turn."""

    closed = True  # (never served: the pacer skips closed connections)


@pytest.mark.parametrize("flood", [True, False])
def test_a_commit_made_while_the_pacer_holds_a_rebalance_burst_back_starts_its_fsync_round_at_once(
        server, raw_client, flood, monkeypatch):
    hurried: list[int] = []
    log_class = type(server.server.store)  # (the log has slots: its method is wrapped on the class)
    hurry = log_class.hurry
    monkeypatch.setattr(log_class, "hurry", lambda log: (hurried.append(1), hurry(log)))

    def setup() -> None:
        if flood:
            server.server.rebalance_pacer.waiting.append(_Waiting())

    server.run(setup)
    T = m.OffsetCommitRequest.OffsetCommitRequestTopic
    commit = m.OffsetCommitRequest(group_id="bystander", generation_id_or_member_epoch=-1, member_id="",
                                   retention_time_ms=-1, topics=[T(name="t", partitions=[
                                       T.OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                                      committed_metadata="")])])
    response = raw_client(server.port).request(commit, 2)
    assert response.topics[0].partitions[0].error_code == 0
    assert bool(hurried) is flood
    server.run(lambda: server.server.rebalance_pacer.waiting.clear())



class _RecordingTransport:
    """A connection's real transport, noting each write in `events`."""

    def __init__(self, transport, index: int, events: list) -> None:
        self._transport, self._index, self._events = transport, index, events

    def write(self, data: bytes) -> None:
        self._events.append(("write", self._index))
        self._transport.write(data)

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


@pytest.mark.parametrize("flood", [False, True])
def test_answers_made_in_one_loop_turn_leave_together_at_its_end_unless_a_rebalance_flood_is_served(
        server, raw_client, flood):
    """Two connections read in one turn: each gets one write, and only after both were read (a client is
    woken once per turn); while the pacer holds a rebalance burst back, answers leave at once."""
    clients = [raw_client(server.port) for _ in range(2)]
    for client in clients:  # both connections are set up and served
        client.request(heartbeat("warm-up"), 4)
    by_port = {}
    for client in clients:
        pipelined = []
        for _ in range(2):
            client.correlation_id += 1
            pipelined.append(encode_request(heartbeat("g"), 4, client.correlation_id, "raw-client"))
        by_port[client.sock.getsockname()[1]] = b"".join(pipelined)

    async def one_turn() -> list:
        node = server.server
        connections = list(node._connections)
        assert len(connections) == 2
        if flood:
            node.rebalance_pacer.waiting.append(_Waiting())
        events: list = []
        real = [conn.transport for conn in connections]
        for index, conn in enumerate(connections):
            conn.transport = _RecordingTransport(conn.transport, index, events)
        try:
            for index, conn in enumerate(connections):
                conn.data_received(by_port[int(conn.peer.rpartition(":")[2])])  # as one poll's reads would
                events.append(("read", index))
            await asyncio.sleep(0)  # the next loop turn
        finally:
            node.rebalance_pacer.waiting.clear()
            for conn, transport in zip(connections, real):
                conn.transport = transport
        return events

    events = server.call(one_turn())
    if flood:
        assert events == [("write", 0), ("read", 0), ("write", 1), ("read", 1)]
    else:
        assert events == [("read", 0), ("read", 1), ("write", 0), ("write", 1)]
    for client in clients:  # both answers, in order
        first, second = client.receive(HEARTBEAT, 4), client.receive(HEARTBEAT, 4)
        assert second[0] == first[0] + 1
