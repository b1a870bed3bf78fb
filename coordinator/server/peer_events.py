"""Log lines about what clients do wrong, aggregated per client address and interval.

Failed logins, refused mechanisms, requests before authentication, malformed
frames, failed TLS handshakes: a client (or an attacker) can cause thousands a
second, and a line each buried everything else in the log (2 400 lines/s). Here
the first such event from an address is logged at once, with its details; the
same event from the same address during the next ``log.aggregation.interval.ms``
is only counted, and when the interval ends one line says how many came, when the
first and the last did, and the distinct values of their fields (the users tried,
say; a few of each). The next one after that is logged at once again. At most
`MAX_ADDRESSES` addresses are tracked at a time; beyond, events are counted under
the address ``other``.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_ADDRESSES = 10_000
MAX_VALUES_PER_FIELD = 5  # distinct values listed per field in an aggregated line
OTHER = "other"


def iso_time(timestamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(timestamp)) + f".{int(timestamp * 1000) % 1000:03d}Z"


@dataclass(slots=True)
class _Aggregate:
    logger: logging.Logger
    level: int
    message: str
    count: int = 0  # events after the one logged at once, from `first` to `last`
    first: float = 0.0
    last: float = 0.0
    values: dict[str, list[str]] = field(default_factory=dict)


class PeerEvents:
    """One line per (event, client address) per interval, plus one with the count of the rest."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.time) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._open: dict[tuple[str, str, str], _Aggregate] = {}
        self._timers: list[asyncio.TimerHandle] = []

    def note(self, logger: logging.Logger, level: int, message: str, peer: str, *, kind: str = "",
             **fields) -> None:
        """An event from `peer` (host:port); `message` must be fixed text, the details go in `fields`;
        `kind` (from a small set, such as the SASL mechanism) keeps one aggregate apart from another."""
        host = peer.rpartition(":")[0] or peer
        key = (message, kind, host)
        if key not in self._open and len(self._open) >= MAX_ADDRESSES:
            key = (message, kind, OTHER)
        now = self._clock()
        aggregate = self._open.get(key)
        if aggregate is not None:
            if not aggregate.count:
                aggregate.first = now
            aggregate.count += 1
            aggregate.last = now
            for name, value in fields.items():
                seen = aggregate.values.setdefault(name, [])
                text = str(value)
                if text not in seen and len(seen) < MAX_VALUES_PER_FIELD:
                    seen.append(text)
            return
        self._open[key] = _Aggregate(logger, level, message)
        logger.log(level, message, extra={"peer": peer, **fields})
        loop = asyncio.get_running_loop()
        self._timers.append(loop.call_later(self.interval_s, self._close, key))
        if len(self._timers) > 64:
            now_loop = loop.time()
            self._timers = [t for t in self._timers if t.when() > now_loop]

    def _close(self, key: tuple[str, str, str]) -> None:
        aggregate = self._open.pop(key, None)
        if aggregate is None or aggregate.count == 0:
            return
        fields = {name: ",".join(values) for name, values in aggregate.values.items()}
        aggregate.logger.log(aggregate.level, aggregate.message + " (repeated)", extra={
            "peer_host": key[2], "count": aggregate.count, "first": iso_time(aggregate.first),
            "last": iso_time(aggregate.last), "interval_ms": round(self.interval_s * 1000), **fields})

    def flush(self) -> None:
        """Write every open aggregate now (the node is stopping)."""
        for timer in self._timers:
            timer.cancel()
        self._timers = []
        for key in list(self._open):
            self._close(key)
