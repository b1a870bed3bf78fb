"""`start_eager_task`: an asyncio task whose first step runs now, inline, on every supported Python.

A request handler usually finishes without ever suspending (all but commits
and parked joins). Scheduling its first step for the next loop turn, as
``loop.create_task`` does, costs a loop turn per request, and a connection's
pipelined requests that must run one after another (OffsetFetch behind
OffsetFetch) then advance one per turn: measured, half the OffsetFetch
throughput on Python 3.11. Python 3.12 added eager tasks
(``asyncio.Task(coro, eager_start=True)``): the first step runs inside the new
task before the call returns. Python 3.11 has no such thing, so there the task
is created as usual, its first step is taken at once with the task entered as
the loop's current task (what 3.12's eager start does), and the step the loop
runs later only hands the task what that first step awaited. Either way the
handler always runs inside its task: ``asyncio.timeout``, ``wait_for`` and
``current_task`` work from its first line.
"""
from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

__all__ = ["start_eager_task"]

if sys.version_info >= (3, 12):
    def start_eager_task(loop: asyncio.AbstractEventLoop, coro: Coroutine) -> asyncio.Task:
        """A task for `coro` whose first step has run when this returns (it may be done already)."""
        return asyncio.Task(coro, loop=loop, eager_start=True)

else:
    import types
    from asyncio.tasks import _enter_task, _leave_task

    _YIELDED, _RETURNED, _RAISED = 0, 1, 2

    @types.coroutine
    def _rest_of(coro: Coroutine, first: list):
        """The task's coroutine: `coro` after its first step, whose outcome `first` holds.

        Primed at once, so that a cancel arriving before the task's own first step
        is thrown into `coro` where it waits. Then what the first step awaited is
        handed to the task, and every later step is passed through to `coro`, as
        ``yield from`` would do.
        """
        thrown = None
        try:
            yield  # primed by start_eager_task; the task's first step resumes here
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # noqa: BLE001 - a cancel before the task's first step
            thrown = exc
        outcome, value = first
        if outcome == _RAISED:
            raise value
        if outcome == _RETURNED:
            if thrown is not None:
                raise thrown
            return value
        while True:
            if thrown is None:
                try:
                    sent = yield value
                except GeneratorExit:
                    coro.close()
                    raise
                except BaseException as exc:  # noqa: BLE001 - thrown in by the task (a cancel): passed on
                    thrown = exc
                    continue
                try:
                    value = coro.send(sent)
                except StopIteration as done:
                    return done.value
            else:
                exc, thrown = thrown, None
                try:
                    value = coro.throw(exc)
                except StopIteration as done:
                    return done.value

    def start_eager_task(loop: asyncio.AbstractEventLoop, coro: Coroutine) -> asyncio.Task:
        """A task for `coro` whose first step has run when this returns (`task.done()` only later on 3.11)."""
        first: list = [_RAISED, None]
        rest = _rest_of(coro, first)
        rest.send(None)
        task = loop.create_task(rest)
        outer = asyncio.current_task(loop)  # a task may start another (a queued request behind it)
        if outer is not None:
            _leave_task(loop, outer)
        _enter_task(loop, task)
        try:
            first[:] = _YIELDED, coro.send(None)
        except StopIteration as done:
            first[:] = _RETURNED, done.value
        except BaseException as exc:  # noqa: BLE001 - raised again in the task, as a task would
            first[1] = exc
        finally:
            _leave_task(loop, task)
            if outer is not None:
                _enter_task(loop, outer)
        return task
