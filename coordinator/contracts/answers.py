"""What a handler may answer besides a ready response (the contract the connection serves)."""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EncodeInThread:
    """A handler's answer too large to encode on the event loop: the server encodes it on a worker thread."""

    response: object


class AnswerWhenDone:
    """A handler's answer that waits for `future` (a commit's append): `then(state, future)` makes it once done.

    Why not a coroutine: a commit only ever waits for its append, and on Python 3.11 a task per
    commit cost about an eighth of durable-commit throughput; the connection adds a done-callback
    instead. `then` is called exactly once, whatever the outcome (it raises CancelledError for a
    cancelled future: never answered). Awaitable too, for wrappers such as the authorization guard.
    `state` rather than a partial of `then`: one object less per commit.
    """

    __slots__ = ("future", "then", "state")

    def __init__(self, future: asyncio.Future, then: Callable[[object, asyncio.Future], object], state) -> None:
        self.future = future
        self.then = then
        self.state = state

    def __await__(self):
        future = self.future
        if not future.done():
            try:
                yield from future
            except BaseException:
                if not future.done():
                    raise
        return self.then(self.state, future)
