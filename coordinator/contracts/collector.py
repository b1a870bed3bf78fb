"""Big requests kept out of the cyclic garbage collector's way while they are decoded and refused.

Decoding or refusing a request of megabytes makes hundreds of thousands of objects at once; each full
collection the allocations trigger walks all of them (0.3-0.9 s a pass, the interpreter held meanwhile,
several passes a request), which stalls every other client of the loop. While such work runs on a worker
thread the collector is paused; when it is done, what it made is frozen (`gc.freeze`, as
`process.heap.HeapKeeper` freezes the survivors of collections: left out of every scan, freed by reference
counting as usual, cycles among them reclaimed by the keeper's periodic full collection) and the collector
resumes.
"""
from __future__ import annotations

import asyncio
import gc


class CollectorHold:
    """Counts big work in flight (`begin`/`end`, on the loop's thread) and pauses the collector around it;
    only a collector it paused itself is resumed."""

    __slots__ = ("_running", "_paused")

    def __init__(self) -> None:
        self._running = 0
        self._paused = False

    def begin(self) -> None:
        if self._running == 0 and gc.isenabled():
            gc.disable()
            self._paused = True
        self._running += 1

    def end(self) -> None:
        self._running -= 1
        gc.freeze()
        if self._running == 0 and self._paused:
            self._paused = False
            gc.enable()

    async def run(self, work):
        """`work()` on a worker thread with the collector paused."""
        self.begin()
        try:
            return await asyncio.get_running_loop().run_in_executor(None, work)
        finally:
            self.end()


# The process's one hold: every big decode and refusal goes through it.
COLLECTOR_HOLD = CollectorHold()
