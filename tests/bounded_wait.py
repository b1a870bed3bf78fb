"""Waiting for something in a test: poll a condition until it holds, and fail after a bound.

A fixed sleep is either too short on a loaded machine (a flaky failure) or too long everywhere
(a slow suite); a bounded poll is as fast as the thing it waits for and fails with what it waited for.
Sleeps that *are* the scenario (stay silent past a session timeout, give a wrong answer the chance
to show up) stay fixed, short, and say why next to them.
"""
from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Callable


def wait_until(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Call `condition` until it returns something truthy (returned); AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        last = condition()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


async def wait_until_async(condition: Callable[[], Any], timeout: float, what: str,
                           interval: float = 0.01) -> Any:
    """`wait_until` for coroutines: the event loop keeps running between polls; `condition` may be async."""
    deadline = time.monotonic() + timeout
    while True:
        last = condition()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        await asyncio.sleep(interval)
