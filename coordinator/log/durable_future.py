"""`DurableFuture`: an append's future whose one continuation runs in the loop turn the append settles.

Why: a plain future runs its done-callbacks a loop turn later (``call_soon``). A durable commit
already needs several loop turns (read, write, fsync reply), and while a flood of other requests
(a 10 000-member rebalance) makes every turn long, each extra turn is one more wait for everyone
else's commit. The log settles an append's future when its fsync round returns and then, once its
own bookkeeping is consistent again, runs the continuation at once: the commit is answered in the
turn its fsync came back. Done-callbacks and awaiting tasks behave exactly as with any future.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable


class DurableFuture(asyncio.Future):
    """An `asyncio.Future` with one `continuation`, run by whoever settles it (`run_continuation`).

    `continuation` is a slot, not a class attribute with a default: one per commit, a future with an
    instance dict cost ~40 % more to make and settle. Unset counts as None; the log sets it (None)
    where it makes one, so its own reads need no fallback. No `__init__` of its own: that costs more still.
    """

    __slots__ = ("continuation",)
    continuation: Callable[[asyncio.Future], object] | None

    def run_continuation(self) -> None:
        """Run the continuation once (the future is done); a later call does nothing."""
        try:
            then = self.continuation
        except AttributeError:  # never set
            return
        if then is not None:
            self.continuation = None
            then(self)

    def cancel(self, msg=None) -> bool:
        cancelled = super().cancel(msg)
        if cancelled:  # (shutdown) nobody else settles it now
            self.run_continuation()
        return cancelled
