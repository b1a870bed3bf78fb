"""Big requests kept out of the cyclic garbage collector's way while they are decoded and answered.

Decoding or refusing a request of megabytes makes hundreds of thousands of objects at once; each full
collection the allocations trigger walks all of them (0.3-0.9 s a pass, the interpreter held meanwhile,
several passes a request), which stalls every other client of the loop. While such work runs on a worker
thread the collector is paused; when it is done its objects are frozen (`gc.freeze`: left out of every
scan, freed by reference counting as usual) and the collector resumes, and COLLECTOR_THAW_S later, once
the request is long answered, they are handed back (`gc.unfreeze`) so nothing is kept out for good.
"""
from __future__ import annotations

import asyncio
import gc

COLLECTOR_THAW_S = 5.0


class CollectorHold:
    """Counts big work in flight (`begin`/`end`, on the loop's thread) and pauses, freezes and thaws the
    collector around it; only a collector it paused itself is resumed."""

    __slots__ = ("_running", "_frozen", "_paused")

    def __init__(self) -> None:
        self._running = 0
        self._frozen = 0
        self._paused = False

    def begin(self) -> None:
        if self._running == 0 and gc.isenabled():
            gc.disable()
            self._paused = True
        self._running += 1

    def end(self, loop: asyncio.AbstractEventLoop) -> None:
        self._running -= 1
        gc.freeze()
        self._frozen += 1
        loop.call_later(COLLECTOR_THAW_S, self._thaw)
        if self._running == 0 and self._paused:
            self._paused = False
            gc.enable()

    def _thaw(self) -> None:
        self._frozen -= 1
        if self._frozen == 0 and self._running == 0:
            gc.unfreeze()

    async def run(self, work):
        """`work()` on a worker thread with the collector paused."""
        loop = asyncio.get_running_loop()
        self.begin()
        try:
            return await loop.run_in_executor(None, work)
        finally:
            self.end(loop)


# The process's one hold: every big decode and refusal goes through it.
COLLECTOR_HOLD = CollectorHold()
