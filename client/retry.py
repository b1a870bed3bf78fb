"""Exponential backoff with jitter, and the deadline every retry loop is bounded by."""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class Backoff:
    """Kafka's retry.backoff.ms / retry.backoff.max.ms: start small, double, cap, add ±20 % jitter."""

    initial_ms: float = 100.0
    max_ms: float = 1000.0
    attempts: int = 0

    def next_delay(self) -> float:
        """Seconds to wait before the next attempt."""
        base = min(self.max_ms, self.initial_ms * (2 ** self.attempts))
        self.attempts += 1
        return base * random.uniform(0.8, 1.2) / 1000.0

    def reset(self) -> None:
        self.attempts = 0


@dataclass(slots=True)
class Deadline:
    """A point in monotonic time; `remaining()` is what a bounded wait may still use."""

    seconds: float
    start: float = field(default_factory=time.monotonic)

    def remaining(self) -> float:
        return max(0.0, self.start + self.seconds - time.monotonic())

    @property
    def expired(self) -> bool:
        return self.remaining() <= 0.0
