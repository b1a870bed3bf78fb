"""The group scenario every real-client test runs, written once for any client library.

Each consumer lives in its own thread and keeps polling (so its library can
heartbeat and rebalance); the test asks it to do things between polls with
`ConsumerThread.call`. A `ClientAdapter` says how one library assigns,
commits and reads committed offsets.

The scenario (issue 3): three consumers subscribe to a 6-partition topic and
each gets 2 partitions; each commits offset 42 with metadata "m" for its
partitions and reads back exactly 42 and "m"; one closes and the other two
take over all 6 within a bounded time; the committed offsets survive the
rebalance; a consumer in another group sees its own (empty) offsets.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from bounded_wait import wait_until

TP = tuple[str, int]
ASSIGNMENT_TIMEOUT_S = 45.0


@dataclass
class ClientAdapter:
    """How to drive one client library's consumer (each callable runs on the consumer's thread)."""

    name: str
    open: Callable[[str], Any]  # group id -> consumer (subscribed)
    poll: Callable[[Any], Any]
    assignment: Callable[[Any], set[TP]]
    commit: Callable[[Any, dict[TP, tuple[int, str]]], Any]
    committed: Callable[[Any, list[TP]], Any]  # -> {tp: (offset, metadata) | None}
    close: Callable[[Any], Any]
    asyncio_loop: bool = False  # aiokafka: the callables are coroutine functions


class ConsumerThread:
    """One consumer polling in its own thread; `call` runs a function on that thread."""

    def __init__(self, adapter: ClientAdapter, group_id: str) -> None:
        self.adapter = adapter
        self.group_id = group_id
        self._commands: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._ready: concurrent.futures.Future = concurrent.futures.Future()
        self.consumer: Any = None
        self.closed = False
        self._thread = threading.Thread(target=self._main, name=f"{adapter.name}-{group_id}", daemon=True)
        self._thread.start()
        self._ready.result(30)

    def _main(self) -> None:
        if self.adapter.asyncio_loop:
            asyncio.run(self._async_main())
        else:
            self._sync_main()

    def _sync_main(self) -> None:
        try:
            self.consumer = self.adapter.open(self.group_id)
        except BaseException as exc:
            self._ready.set_exception(exc)
            return
        self._ready.set_result(None)
        while not self._stop.is_set():
            self._run_commands(lambda fn: fn(self.consumer))
            if not self.closed:
                self.adapter.poll(self.consumer)
            else:
                time.sleep(0.05)  # a closed consumer's thread idles until stopped: pacing, not a wait

    async def _async_main(self) -> None:
        try:
            self.consumer = await self.adapter.open(self.group_id)
        except BaseException as exc:
            self._ready.set_exception(exc)
            return
        self._ready.set_result(None)
        while not self._stop.is_set():
            while True:
                try:
                    fn, result = self._commands.get_nowait()
                except queue.Empty:
                    break
                try:
                    result.set_result(await fn(self.consumer))
                except BaseException as exc:
                    result.set_exception(exc)
            if not self.closed:
                await self.adapter.poll(self.consumer)
            else:
                await asyncio.sleep(0.05)  # a closed consumer's loop idles until stopped: pacing, not a wait

    def _run_commands(self, run: Callable) -> None:
        while True:
            try:
                fn, result = self._commands.get_nowait()
            except queue.Empty:
                return
            try:
                result.set_result(run(fn))
            except BaseException as exc:
                result.set_exception(exc)

    def call(self, fn: Callable[[Any], Any], timeout: float = 30.0) -> Any:
        result: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put((fn, result))
        return result.result(timeout)

    def assignment(self) -> set[TP]:
        return self.call(self.adapter.assignment)

    def commit(self, offsets: dict[TP, tuple[int, str]]) -> None:
        self.call(lambda c: self.adapter.commit(c, offsets))

    def committed(self, partitions: list[TP]) -> dict[TP, tuple[int, str] | None]:
        return self.call(lambda c: self.adapter.committed(c, partitions))

    def close(self) -> None:
        if not self.closed:
            def close_here(consumer):
                self.closed = True  # on the consumer's thread, before its next poll
                return self.adapter.close(consumer)
            self.call(close_here, timeout=60)

    def stop(self) -> None:
        try:
            self.close()
        finally:
            self._stop.set()
            self._thread.join(30)


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    return wait_until(condition, timeout, what, interval)


def assignments_are(consumers: list[ConsumerThread], topic: str, partitions: int, per_consumer: int):
    """A condition: every consumer has `per_consumer` partitions and together they cover the topic once."""
    def check():
        got = [c.assignment() for c in consumers]
        flat = [tp for a in got for tp in a]
        ok = (all(len(a) == per_consumer for a in got)
              and sorted(flat) == [(topic, p) for p in range(partitions)])
        return got if ok else _NotYet(got)
    return check


class _NotYet:
    """A falsy condition result that still shows what was observed (for the timeout message)."""

    def __init__(self, observed: Any) -> None:
        self.observed = observed

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"not yet: {self.observed!r}"


def run_group_scenario(adapter: ClientAdapter, topic: str, group: str = "scenario-group") -> None:
    consumers = [ConsumerThread(adapter, group) for _ in range(3)]
    outsider = None
    try:
        # Given three consumers of one group on a 6-partition topic, each gets 2 partitions.
        assigned = wait_for(assignments_are(consumers, topic, 6, 2), ASSIGNMENT_TIMEOUT_S, "3 x 2 partitions")

        # Each commits 42 / "m" for its partitions and reads back exactly that.
        for consumer, partitions in zip(consumers, assigned):
            consumer.commit({tp: (42, "m") for tp in partitions})
            assert consumer.committed(sorted(partitions)) == {tp: (42, "m") for tp in partitions}

        # When one closes, the other two take over all 6 partitions.
        consumers[0].close()
        survivors = consumers[1:]
        taken_over = wait_for(assignments_are(survivors, topic, 6, 3), ASSIGNMENT_TIMEOUT_S, "2 x 3 partitions")

        # The committed offsets survived the rebalance, read by their new owners.
        for consumer, partitions in zip(survivors, taken_over):
            assert consumer.committed(sorted(partitions)) == {tp: (42, "m") for tp in partitions}

        # A consumer of another group sees its own, empty, offsets.
        outsider = ConsumerThread(adapter, group + "-other")
        wait_for(assignments_are([outsider], topic, 6, 6), ASSIGNMENT_TIMEOUT_S, "outsider owns all 6")
        everything = [(topic, p) for p in range(6)]
        assert outsider.committed(everything) == {tp: None for tp in everything}
    finally:
        for consumer in consumers + ([outsider] if outsider else []):
            consumer.stop()


class LogCapture(logging.Handler):
    """Collects a library's log records so a test can assert it did not log errors in a loop."""

    def __init__(self, *logger_names: str) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._lock = threading.Lock()
        self._loggers = [logging.getLogger(n) for n in logger_names]

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock:
            self.records.append(record)

    def __enter__(self) -> "LogCapture":
        self._saved_levels = [logger.level for logger in self._loggers]
        for logger in self._loggers:
            logger.addHandler(self)
            if logger.level == logging.NOTSET or logger.level > logging.WARNING:
                logger.setLevel(logging.WARNING)
        return self

    def __exit__(self, *exc_info) -> None:
        for logger, level in zip(self._loggers, self._saved_levels):
            logger.removeHandler(self)
            logger.setLevel(level)

    def errors(self) -> list[str]:
        with self._lock:
            return [r.getMessage() for r in self.records if r.levelno >= logging.ERROR]

    def assert_no_repeated_errors(self, allowed_repeats: int = 2) -> None:
        """No ERROR line appears more than `allowed_repeats` times (a loop would repeat it)."""
        repeated = {msg: n for msg, n in Counter(_shape(m) for m in self.errors()).items() if n > allowed_repeats}
        assert not repeated, f"{len(repeated)} error lines repeated: {repeated}"


def _shape(message: str) -> str:
    """An error message with its numbers blanked, so repeats with new ids still count as one."""
    return "".join("#" if ch.isdigit() else ch for ch in message)[:300]
