"""`DurableFuture`: a future like any other to awaiting tasks and done-callbacks, plus one continuation that
runs once, when its settler says so, or at once when it is cancelled (shutdown)."""
from __future__ import annotations

import asyncio

from cohort.coordinator.log.durable_future import DurableFuture


async def test_a_task_awaiting_it_gets_its_result_and_done_callbacks_run_a_turn_later():
    fut = DurableFuture()
    seen: list[str] = []
    fut.add_done_callback(lambda f: seen.append("done-callback"))
    async def wait() -> int:
        return await fut

    waiter = asyncio.ensure_future(wait())
    await asyncio.sleep(0)  # the task now waits on it
    fut.set_result(7)
    assert seen == []  # scheduled, not run: that is what the continuation is for
    assert await waiter == 7
    assert seen == ["done-callback"]


async def test_the_continuation_runs_once_when_its_settler_asks():
    fut = DurableFuture()
    runs: list[int] = []
    fut.continuation = lambda f: runs.append(f.result())
    fut.set_result(3)
    assert runs == []  # settling alone does not run it
    fut.run_continuation()
    fut.run_continuation()
    assert runs == [3]


async def test_cancelling_runs_the_continuation_with_the_cancelled_future():
    fut = DurableFuture()
    seen: list[bool] = []
    fut.continuation = lambda f: seen.append(f.cancelled())
    assert fut.cancel()
    assert seen == [True]
    assert not fut.cancel()  # already done: nothing runs again
    assert seen == [True]


async def test_without_a_continuation_running_it_does_nothing():
    fut = DurableFuture()
    fut.set_exception(ValueError("refused"))
    fut.run_continuation()
    assert isinstance(fut.exception(), ValueError)
