"""A suspended request handler is stepped by the futures it awaits, the way a Task would step it.

The server gives no asyncio task to a handler that suspends (a commit waiting
for its append); `_Continuation` resumes it instead. These scenarios drive the
continuation with a recording stand-in for the connection (it only receives the
outcome) and check Task semantics: results and exceptions of awaited futures
reach the handler, a bare ``yield`` resumes on the next loop turn, a yield of a
non-future is thrown back as RuntimeError, cancel() cancels the awaited future
or throws CancelledError at the next step, and the server's in-flight set is
emptied at the end.
"""
from __future__ import annotations

import asyncio

import pytest

from cohort.coordinator.connection import _Continuation

pytestmark = pytest.mark.timeout(30)


class _Server:
    def __init__(self) -> None:
        self._inflight: set = set()
        self.ended = 0

    def _handler_ended(self, run) -> None:
        self._inflight.discard(run)
        self.ended += 1


class _Header:
    api_key = 8
    api_version = 2
    client_id = "test"


class _Req:
    header = _Header()


class _Conn:
    """Records how the handler ended: its response, or a failure."""

    def __init__(self) -> None:
        self.server = _Server()
        self._loop = asyncio.get_running_loop()
        self.responses: list = []
        self.failures: list = []
        self.done = self._loop.create_future()

    def _complete(self, req, response) -> None:
        self.responses.append(response)
        self.done.set_result(None)

    def _fail(self, header) -> None:
        self.failures.append(header)
        self.done.set_result(None)


def start(conn: _Conn, coro) -> _Continuation:
    """What the server does: step once inline, then hand the suspended coroutine over."""
    awaiting = coro.send(None)
    return _Continuation(conn, _Req(), coro, awaiting)


async def finished(conn: _Conn) -> None:
    await asyncio.wait_for(asyncio.shield(conn.done), 5)


async def test_a_handler_gets_each_awaited_result_and_its_response_is_completed():
    conn = _Conn()
    loop = asyncio.get_running_loop()
    first, second = loop.create_future(), loop.create_future()

    async def handler():
        a = await first
        b = await second
        return a + b

    run = start(conn, handler())
    assert conn.server._inflight == {run}
    first.set_result(2)
    await asyncio.sleep(0)
    second.set_result(3)
    await finished(conn)
    assert conn.responses == [5]
    assert conn.server._inflight == set() and conn.server.ended == 1


async def test_an_awaited_exception_is_raised_inside_the_handler():
    conn = _Conn()
    fut = asyncio.get_running_loop().create_future()

    async def handler():
        try:
            await fut
        except KeyError:
            return "handled"

    start(conn, handler())
    fut.set_exception(KeyError("x"))
    await finished(conn)
    assert conn.responses == ["handled"]


async def test_an_exception_escaping_the_handler_fails_the_request():
    conn = _Conn()
    fut = asyncio.get_running_loop().create_future()

    async def handler():
        await fut
        raise ValueError("boom")

    start(conn, handler())
    fut.set_result(None)
    await finished(conn)
    assert conn.responses == [] and len(conn.failures) == 1
    assert conn.server._inflight == set()


async def test_a_bare_yield_resumes_on_a_later_loop_turn():
    conn = _Conn()
    fut = asyncio.get_running_loop().create_future()

    async def handler():
        await fut
        await asyncio.sleep(0)  # a bare yield
        await asyncio.sleep(0)
        return "after yields"

    start(conn, handler())
    fut.set_result(None)
    await finished(conn)
    assert conn.responses == ["after yields"]


async def test_yielding_something_that_is_not_a_future_is_thrown_back_as_runtime_error():
    conn = _Conn()
    fut = asyncio.get_running_loop().create_future()

    class Odd:
        def __await__(self):
            yield "not a future"

    async def handler():
        await fut
        try:
            await Odd()
        except RuntimeError as exc:
            return str(exc)

    start(conn, handler())
    fut.set_result(None)
    await finished(conn)
    assert "not a future" in conn.responses[0]


async def test_cancel_cancels_the_awaited_future_and_the_handler_sees_cancelled_error():
    conn = _Conn()
    fut = asyncio.get_running_loop().create_future()
    seen = []

    async def handler():
        try:
            await fut
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    run = start(conn, handler())
    run.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    assert fut.cancelled() and seen == ["cancelled"]
    # a cancelled handler is never answered, and no longer in flight
    assert conn.responses == [] and conn.failures == []
    assert conn.server._inflight == set() and conn.server.ended == 1


async def test_cancel_after_the_future_is_done_throws_at_the_next_step():
    conn = _Conn()
    fut = asyncio.get_running_loop().create_future()

    async def handler():
        await fut
        return "not reached"

    run = start(conn, handler())
    fut.set_result(None)  # done, its callback not run yet
    run.cancel()
    for _ in range(5):
        await asyncio.sleep(0)
    assert conn.responses == [] and conn.server._inflight == set()
