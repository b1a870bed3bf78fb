"""The console's own budget of password checks, per browser address and per user name.

Each browser address and each user name has a token bucket: a sign-in attempt takes a token from both
and a correct password gives them back, so only wrong passwords spend the budget. An attempt while
either is empty answers 429 at once (with Retry-After) and checks no password. A browser guessing
passwords therefore spends its own address's budget (``console.sign.in.failures.per.ip`` at once, then
one per ``console.sign.in.failure.interval.ms``) and, from many addresses together, the user's
(``console.sign.in.failures.per.user``, earned back four times as fast), never another browser's nor
the Kafka listener's (the console's sign-ins are not counted against its address:
`cohort.coordinator.security.console_sign_ins`).

The browser's address is the TCP peer's. ``X-Forwarded-For`` is believed only from the addresses in
``console.trusted.proxies``: then the address is the last one it names that is not a trusted proxy.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from cohort.coordinator.server.connection_quotas import address_key

USER_REFILL_FACTOR = 4  # a user name earns a token back this many times as fast as an address
MAX_TRACKED = 100_000  # buckets kept at most per kind; full ones are dropped first


class SignInThrottled(Exception):
    """Too many wrong passwords from this address or for this user: try again after `retry_after_s`."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class _Buckets:
    def __init__(self, burst: int, per_second: float, clock: Callable[[], float]) -> None:
        self.burst = burst
        self.per_second = per_second
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def _current(self, key: str) -> _Bucket:
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= MAX_TRACKED:
                self._prune(now)
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
        else:
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.per_second)
            bucket.updated = now
        return bucket

    def wait_s(self, key: str) -> float:
        """0 when `key` has a token, else how long until it has one."""
        tokens = self._current(key).tokens
        return 0.0 if tokens >= 1 else (1 - tokens) / self.per_second

    def take(self, key: str) -> None:
        self._current(key).tokens -= 1

    def give_back(self, key: str) -> None:
        bucket = self._current(key)
        bucket.tokens = min(self.burst, bucket.tokens + 1)

    def _prune(self, now: float) -> None:
        for key, bucket in list(self._buckets.items()):
            if bucket.tokens + (now - bucket.updated) * self.per_second >= self.burst:
                del self._buckets[key]


class SignInBudget:
    """Per browser address and per user name (one thread: the console's loop)."""

    def __init__(self, per_address: int = 10, per_user: int = 20, interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._addresses = _Buckets(per_address, 1 / interval_s, clock)
        self._users = _Buckets(per_user, USER_REFILL_FACTOR / interval_s, clock)
        self.refused = 0

    def take(self, address: str, user: str) -> None:
        """A token of each, or SignInThrottled (nothing taken)."""
        address = address_key(address)
        by_address, by_user = self._addresses.wait_s(address), self._users.wait_s(user)
        if by_address or by_user:
            self.refused += 1
            which = "from this address" if by_address >= by_user else "for this user"
            raise SignInThrottled(f"too many wrong passwords {which}: try again in a moment",
                                  max(by_address, by_user))
        self._addresses.take(address)
        self._users.take(user)

    def give_back(self, address: str, user: str) -> None:
        """The password was right: the tokens it took are given back."""
        self._addresses.give_back(address_key(address))
        self._users.give_back(user)


def retry_after(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))


def browser_address(peer: str | None, forwarded_for: str | None, trusted_proxies: frozenset[str]) -> str:
    """The browser's address: the TCP peer's unless it is a trusted proxy naming one in X-Forwarded-For."""
    address = address_key(peer or "unknown")
    if forwarded_for is None or address not in trusted_proxies:
        return address
    for hop in reversed([part.strip() for part in forwarded_for.split(",") if part.strip()]):
        hop = address_key(hop)
        if hop not in trusted_proxies:
            return hop
    return address
