"""Short pauses from CPython's cyclic garbage collector in a server whose heap is mostly long-lived.

A collection walks every tracked object of the generations it collects. A full one in a server
holding 10 000 connections and members walks about 1.5 M objects: 140 ms in which no request is
served (measured: a 10 000-member group's join delayed an unrelated commit by that much). What
survives two collections nearly always stays alive (connections, members, offsets, the log's
tables), so walking it again and again finds nothing. Hence:

* what start-up built is collected once and frozen (moved to the permanent generation, which no
  collection walks);
* after every collection of the middle or the old generation, its survivors are frozen too: the old
  generation stays nearly empty, so no collection walks more than what was allocated lately
  (measured during a 10 000-member join: full passes of 14-41 ms when only full collections froze
  their survivors; see `bench/reports/huge-groups/`);
* frozen objects that later die are freed by reference counting at once, except those in cycles:
  every `refreeze_interval_s` the whole heap is collected once and frozen again (one full pause at
  a known rhythm, bounding what such cycles can hold).

And memory the C allocator keeps (glibc): a thread that allocates gets a malloc arena of its own,
and what is freed in an arena stays in the process. The log recovers partitions on writer threads,
so a start-up over 300 000 offsets left ~65 bytes per offset more resident than the old
single-threaded loader. Hence at most `MALLOC_ARENAS` arenas per process (`limit_malloc_arenas`, before
any thread starts; the GIL serialises nearly every allocation anyway), and what start-up and each
refreeze freed is handed back to the OS (`malloc_trim`).
"""
from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import gc
import logging
import os
import threading
import time

log = logging.getLogger("cohort.heap")

# A young generation of 2 000, not CPython's 700: a server with a few hundred requests in flight keeps
# about 30 tracked objects alive per durable commit, so at 700 nearly every fsync round set off a
# young collection walking them all (830 collections a second, 4 % of the CPU at 32 commits in
# flight; at 2 000: none). A middle collection comes every 3 young ones instead of 10, so it walks
# what it did before (a larger middle generation made those of a forming 5 000-member fleet take
# 30-60 ms instead of 10-25 ms).
GC_THRESHOLDS = (2000, 3, 10)
REFREEZE_INTERVAL_S = 600.0
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter number


@functools.cache
def _glibc():
    """glibc's handle, or None elsewhere (musl, macOS): the allocator settings are then left alone."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> None:
    """(before any thread starts) At most `arenas` malloc arenas, unless MALLOC_ARENA_MAX says otherwise."""
    libc = _glibc()
    if libc is not None and "MALLOC_ARENA_MAX" not in os.environ:
        libc.mallopt(_M_ARENA_MAX, arenas)


def trim_malloc() -> None:
    """Hand the memory malloc holds free back to the OS (glibc's malloc_trim; a few ms)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


class HeapKeeper:
    """Freezes the survivors of every middle or full collection; collects everything every `refreeze_interval_s`."""

    def __init__(self, refreeze_interval_s: float = REFREEZE_INTERVAL_S) -> None:
        self.refreeze_interval_s = refreeze_interval_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._freeze_pending = False
        self._refreezer: asyncio.Task | None = None

    def start(self) -> None:
        """(on the event loop, once start-up is done) Collect and freeze what start-up built."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        gc.collect()
        gc.freeze()
        trim_malloc()  # what loading the offsets freed
        gc.set_threshold(*GC_THRESHOLDS)
        gc.callbacks.append(self._on_collection)
        self._refreezer = self._loop.create_task(self._refreeze_periodically(), name="heap-refreeze")

    def stop(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)
        if self._refreezer is not None:
            self._refreezer.cancel()
            self._refreezer = None

    def refreeze(self) -> float:
        """Collect the whole heap (frozen objects included) and freeze what survives; returns seconds paused."""
        started = time.perf_counter()
        gc.unfreeze()
        gc.collect()  # its callback freezes the survivors
        gc.freeze()
        trim_malloc()
        return time.perf_counter() - started

    def _on_collection(self, phase: str, info: dict) -> None:
        # Any thread may run a collection; the freeze happens on the loop, right after it.
        if phase != "stop" or info["generation"] == 0 or self._freeze_pending or self._loop is None:
            return
        self._freeze_pending = True
        if threading.get_ident() == self._loop_thread:
            self._loop.call_soon(self._freeze)
            return
        try:
            self._loop.call_soon_threadsafe(self._freeze)
        except RuntimeError:  # the loop is closed: nothing runs any more
            self._freeze_pending = False

    def _freeze(self) -> None:
        self._freeze_pending = False
        gc.freeze()

    async def _refreeze_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.refreeze_interval_s)
            paused = self.refreeze()
            log.debug("heap: collected and refrozen in %.1f ms", paused * 1000)
