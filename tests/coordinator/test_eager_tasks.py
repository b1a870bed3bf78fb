"""`start_eager_task` behaves as a task that took its first step at once, on 3.11 as on 3.12+.

The core subset runs this file on 3.12 and 3.13 too (scripts/test); on 3.11 it
exercises the stand-in for eager start, on 3.12+ asyncio's own.
"""
from __future__ import annotations

import asyncio

import pytest

from cohort.coordinator.server.eager_tasks import start_eager_task

pytestmark = pytest.mark.timeout(30)


async def test_the_first_step_runs_inside_the_task_before_start_returns():
    loop = asyncio.get_running_loop()
    seen = []

    async def handler():
        seen.append(asyncio.current_task())
        return "done"

    task = start_eager_task(loop, handler())
    assert seen == [task]
    assert await task == "done"
    assert asyncio.current_task() is not task  # the caller's task is current again


async def test_a_suspended_task_gets_the_awaited_result_and_stays_current_when_resumed():
    loop = asyncio.get_running_loop()
    first, second = loop.create_future(), loop.create_future()
    seen = []

    async def handler():
        a = await first
        seen.append(asyncio.current_task())
        b = await second
        return a + b

    task = start_eager_task(loop, handler())
    assert not task.done()
    first.set_result(2)
    loop.call_soon(second.set_result, 3)
    assert await asyncio.wait_for(task, 5) == 5
    assert seen == [task]


async def test_an_exception_escaping_the_first_or_a_later_step_ends_the_task_with_it():
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    async def at_once():
        raise KeyError("first")

    async def later():
        await fut
        raise ValueError("later")

    early, late = start_eager_task(loop, at_once()), start_eager_task(loop, later())
    fut.set_result(None)
    with pytest.raises(KeyError):
        await early
    with pytest.raises(ValueError):
        await late


async def test_asyncio_timeout_entered_in_the_first_step_expires_and_is_caught():
    loop = asyncio.get_running_loop()

    async def handler():
        try:
            async with asyncio.timeout(0):
                await loop.create_future()
        except TimeoutError:
            return "timed out"

    assert await asyncio.wait_for(start_eager_task(loop, handler()), 5) == "timed out"


async def test_cancel_right_after_start_throws_cancelled_error_where_the_handler_waits():
    loop = asyncio.get_running_loop()
    seen = []

    async def handler():
        try:
            await loop.create_future()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = start_eager_task(loop, handler())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"] and task.cancelled()


async def test_cancel_of_a_task_that_finished_in_its_first_step_changes_nothing_it_did():
    loop = asyncio.get_running_loop()
    effects = []

    async def handler():
        effects.append("answered")
        return 1

    task = start_eager_task(loop, handler())
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    assert task.done() and effects == ["answered"]


async def test_a_task_may_start_another_eagerly_and_stays_current_itself():
    loop = asyncio.get_running_loop()
    inner_seen = []

    async def inner():
        inner_seen.append(asyncio.current_task())

    async def outer():
        me = asyncio.current_task()
        child = start_eager_task(loop, inner())
        assert asyncio.current_task() is me
        await asyncio.sleep(0)
        return child

    child = await start_eager_task(loop, outer())
    assert inner_seen == [child]
