"""Where the engines' runtime gets its clocks and timers: the loop's (`LoopScheduler`) or a manual clock
that moves only when told (`ManualScheduler`, for tests and simulations)."""
from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol

from cohort.coordinator.groups.effects import Now

_now = tuple.__new__  # Now(w, m) runs NamedTuple's Python-level __new__: ~1 us of every heartbeat


# ---------------------------------------------------------------------------------------------
# Time
# ---------------------------------------------------------------------------------------------
class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    """Where the runtime gets its clocks and its timers."""

    def now_ms(self) -> int:
        """Wall-clock milliseconds, for timestamps clients and records see."""
        ...

    def monotonic_ms(self) -> float:
        """The clock deadlines count on: a clock step must not move them."""
        ...

    def now(self) -> Now:
        """Both clocks at once, as the engine takes them (one call per event)."""
        ...

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle: ...


class LoopScheduler:
    """The production scheduler: wall-clock and monotonic milliseconds, the running loop's timers."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic_ms(self) -> float:
        return time.monotonic() * 1000.0

    def now(self) -> Now:
        return _now(Now, (int(time.time() * 1000), time.monotonic() * 1000.0))

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000.0, callback)


class _ManualTimer:
    __slots__ = ("when", "callback", "cancelled")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """A clock that moves only when told to: `advance(ms)` fires due timers in time order.

    For tests and simulations; timers with equal deadlines fire in the order they were set.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._heap: list[tuple[float, int, _ManualTimer]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return int(self._now)

    def monotonic_ms(self) -> float:
        return self._now

    def now(self) -> Now:
        return _now(Now, (int(self._now), self._now))

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> _ManualTimer:
        timer = _ManualTimer(self._now + max(delay_ms, 0), callback)
        heapq.heappush(self._heap, (timer.when, next(self._seq), timer))
        return timer

    def advance(self, ms: int) -> None:
        target = self._now + ms
        while self._heap and self._heap[0][0] <= target:
            when, _, timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            self._now = max(self._now, when)
            timer.callback()
        self._now = target

    def pending(self) -> int:
        return sum(1 for _, _, t in self._heap if not t.cancelled)
