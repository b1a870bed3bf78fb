"""SASL/PLAIN password checks, off the event loop and throttled per client address.

A PLAIN check is a PBKDF2 over the user's SCRAM salt (8-12 ms at Kafka's
iteration counts; an unknown user costs the same, so timing tells no names).
On the event loop, 120 wrong guesses a second took more than a core and every
signed-in client waited behind them. Here checks run on a small thread pool
(`hashlib.pbkdf2_hmac` releases the GIL), at most one thread fewer than the
machine has cores (at least one, at most four), so the loop keeps a core, and at
a lower CPU priority than the loop's thread, so that on a busy machine signed-in
clients' requests go first and the guesses wait.

Each client address also has a budget of checks (a token bucket: `FAILURE_BURST`
at once, refilled at `FAILURE_RATE` a second; a check takes a token and a
success gives it back). An address guessing faster than that waits its turn,
first come first served, on top of ``connection.failed.authentication.delay.ms``
(which only holds each failed connection open); a check whose connection
closed meanwhile is never run. Addresses that guess nothing cost nothing. The console's own
sign-ins (proved by `console_sign_ins`) are outside these budgets: the console keeps its own, per browser
address and per user name.
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from cohort.coordinator.security.sasl import PasswordCheck

FAILURE_BURST = 10  # checks an address may start at once before it is throttled
FAILURE_RATE = 2.0  # then this many a second (successes give their token back)
_PRUNE_EVERY = 1024  # checks between sweeps of addresses that have their whole budget again


def _yield_to_the_loop() -> None:
    """(each pool thread, once) Run at a lower CPU priority than the event loop: when cores are short,
    signed-in clients' requests go first and password checks wait (Linux: a nice value per thread)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10))
    except (AttributeError, OSError):
        pass  # elsewhere, or not allowed: the pool's size still leaves the loop a core


def _run_if_wanted(job: "_Waiting") -> bool:
    """(pool thread) The check, unless its connection closed while it was queued (no PBKDF2 for nobody)."""
    return job.check.run() if job.wanted() else False


def default_threads() -> int:
    return max(1, min(4, (os.cpu_count() or 2) - 1))


@dataclass(slots=True)
class _Waiting:
    check: PasswordCheck = field(repr=False)
    done: Callable[[bool], None]
    wanted: Callable[[], bool]


@dataclass(slots=True)
class _Address:
    tokens: float
    updated: float
    waiting: deque = field(default_factory=deque)
    timer: asyncio.TimerHandle | None = None


class PasswordChecks:
    """Runs `PasswordCheck`s on a bounded pool, each client address within its budget."""

    def __init__(self, threads: int | None = None, *, burst: int = FAILURE_BURST, rate: float = FAILURE_RATE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.threads = threads or default_threads()
        self._pool: ThreadPoolExecutor | None = None
        self._burst = burst
        self._rate = rate
        self._clock = clock
        self._addresses: dict[str, _Address] = {}
        self._started = 0
        self.throttled = 0  # checks that had to wait for their address's budget

    def submit(self, host: str, check: PasswordCheck, done: Callable[[bool], None],
               wanted: Callable[[], bool], budgeted: bool = True) -> None:
        """Run `check` for a client at `host`; `done(matches)` on the loop (not if `wanted()` turned False).
        `budgeted=False`: a check the console already budgeted, run at once and counted against no address."""
        job = _Waiting(check, done, wanted)
        if not budgeted:
            self._run(None, job)
            return
        address = self._address(host)
        if not address.waiting and address.tokens >= 1:
            address.tokens -= 1
            self._run(address, job)
            return
        self.throttled += 1
        address.waiting.append(job)
        self._wake_later(address)

    def close(self) -> None:
        for address in self._addresses.values():
            if address.timer is not None:
                address.timer.cancel()
        self._addresses.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _address(self, host: str) -> _Address:
        now = self._clock()
        address = self._addresses.get(host)
        if address is None:
            address = self._addresses[host] = _Address(float(self._burst), now)
        else:
            address.tokens = min(self._burst, address.tokens + (now - address.updated) * self._rate)
            address.updated = now
        return address

    def _run(self, address: _Address | None, job: _Waiting) -> None:
        self._started += 1
        if self._started % _PRUNE_EVERY == 0:
            self._prune()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="cohort-password-check",
                                            initializer=_yield_to_the_loop)
        loop = asyncio.get_running_loop()
        running = loop.run_in_executor(self._pool, _run_if_wanted, job)

        def finished(future: asyncio.Future) -> None:
            if future.cancelled():
                return
            matches = future.exception() is None and future.result()
            if matches and address is not None:
                address.tokens = min(self._burst, address.tokens + 1)
            if job.wanted():
                job.done(bool(matches))

        running.add_done_callback(finished)

    def _wake_later(self, address: _Address) -> None:
        if address.timer is None:
            delay = max(0.0, (1 - address.tokens) / self._rate)
            address.timer = asyncio.get_running_loop().call_later(delay, self._wake, address)

    def _wake(self, address: _Address) -> None:
        address.timer = None
        now = self._clock()
        address.tokens = min(self._burst, address.tokens + (now - address.updated) * self._rate)
        address.updated = now
        waiting = address.waiting
        while waiting and address.tokens >= 1:
            job = waiting.popleft()
            if not job.wanted():
                continue  # its connection closed while it waited: no work, no token
            address.tokens -= 1
            self._run(address, job)
        while waiting and not waiting[0].wanted():
            waiting.popleft()
        if waiting:
            self._wake_later(address)

    def _prune(self) -> None:
        now = self._clock()
        for host, address in list(self._addresses.items()):
            full = address.tokens + (now - address.updated) * self._rate >= self._burst
            if full and not address.waiting and address.timer is None:
                del self._addresses[host]
