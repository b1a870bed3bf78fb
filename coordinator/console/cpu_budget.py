"""The console thread's share of a CPU, handed out fairly between browsers.

The console runs on a thread of its own but shares the interpreter's lock with the loop that serves Kafka
clients, so it keeps to a budget: at most `share` of one CPU, measured over `window_s`. Past it, requests
wait asleep (the lock is free for the Kafka loop) and are let in one at a time as the budget allows, taking
turns between browser addresses: a browser with many requests waiting (one guessing passwords, a page
refreshing in many tabs) waits behind its own requests, never in front of another browser's.
"""
from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable


class CpuBudget:
    """`admit(browser)` returns once the console may spend CPU on that browser's request."""

    def __init__(self, share: float, window_s: float = 1.0, clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.thread_time) -> None:
        self.share = share
        self.window_s = window_s
        self._clock = clock
        self._cpu = cpu
        self._window_started = clock()
        self._cpu_at_start = cpu()
        self._waiting: OrderedDict[str, deque[asyncio.Future]] = OrderedDict()  # in turn order
        self._timer: asyncio.TimerHandle | None = None

    def wait_s(self) -> float:
        """0 while the window's CPU is within the share, else how long until it is."""
        now, cpu = self._clock(), self._cpu()
        if now - self._window_started >= self.window_s:
            self._window_started, self._cpu_at_start = now, cpu
        over = (cpu - self._cpu_at_start) - self.share * (now - self._window_started)
        return max(0.0, over / self.share)

    @property
    def waiting(self) -> int:
        return sum(len(queue) for queue in self._waiting.values())

    async def admit(self, browser: str) -> None:
        if not self._waiting and self.wait_s() == 0:
            return
        turn = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(browser, deque()).append(turn)
        self._schedule()
        try:
            await turn
        except asyncio.CancelledError:
            queue = self._waiting.get(browser)
            if queue is not None and turn in queue:
                queue.remove(turn)
                if not queue:
                    del self._waiting[browser]
            raise

    def _schedule(self) -> None:
        if self._timer is None and self._waiting:
            self._timer = asyncio.get_running_loop().call_later(self.wait_s(), self._let_one_in)

    def _let_one_in(self) -> None:
        """The next browser in turn gets its oldest request in (then goes to the back of the line)."""
        self._timer = None
        if self.wait_s() == 0:
            while self._waiting:
                browser, queue = self._waiting.popitem(last=False)
                turn = queue.popleft()
                if queue:
                    self._waiting[browser] = queue
                if not turn.done():
                    turn.set_result(None)
                    break
        self._schedule()
