"""What a handler answers: a response, ready now, or a `PendingAnswer` (the one other shape).

Kafka's coordinator runtime holds a write's response until its records are durable; Cohort's handlers
likewise hand back a `PendingAnswer` whenever the response is not ready yet: a commit waiting for its
append (settled by the partition runtime in the very loop turn the append settles), a JoinGroup parked
until its rebalance ends, an OffsetFetch behind writes in flight, any coroutine handler that suspended.
The connection subscribes once and encodes what it is settled with. A response too large to encode on
the event loop is a `PendingAnswer` too, settled at once with `off_loop` set (`encode_off_loop`).
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine


class PendingAnswer:
    """A response to come: settled exactly once, by `settle` (the response) or `fail` (an exception;
    CancelledError: never answered, the request was cancelled at shutdown).

    `subscribe(callback, arg)` asks for `callback(arg, self)` once settled: at once when it already is,
    else inside the settling call (no loop turn in between). `source` is what it waits for (a task or an
    append's future), so shutdown can wait for it or cancel it.
    """

    __slots__ = ("response", "error", "off_loop", "source", "done", "_callback", "_arg")

    def __init__(self, source: asyncio.Future | None = None) -> None:
        # (`response`, `off_loop` and `_arg` are set when they are made: one per commit, each store counts)
        self.source = source
        self.error: BaseException | None = None
        self.done = False
        self._callback = None

    def settle(self, response, off_loop: bool = False) -> None:
        """The response is made (`off_loop`: encode it on a worker thread); the subscriber hears it now."""
        if self.done:
            return
        self.response = response
        self.off_loop = off_loop
        self._settled()

    def settle_with(self, result) -> None:
        """Settle from what a maker returned: a response, or a `PendingAnswer` (its response and flag, once
        it is settled)."""
        if type(result) is PendingAnswer:
            if not result.done:
                result.subscribe(PendingAnswer.settle_with, self)
            elif result.error is not None:
                self.fail(result.error)
            else:
                self.settle(result.response, result.off_loop)
        else:
            self.settle(result)

    def fail(self, error: BaseException) -> None:
        if self.done:
            return
        self.error = error
        self.response = None
        self.off_loop = False
        self._settled()

    def _settled(self) -> None:
        """Done: the subscriber, if any, hears it now, and is let go of."""
        self.done = True
        callback = self._callback
        if callback is not None:
            self._callback = None
            arg, self._arg = self._arg, None  # (the subscriber's request holds this answer: no cycle left behind)
            callback(arg, self)

    def subscribe(self, callback: Callable[[object, PendingAnswer], None], arg) -> None:
        """Have `callback(arg, self)` run once settled (the one subscriber: the connection, or `__await__`)."""
        if self.done:
            callback(arg, self)
            return
        self._callback = callback
        self._arg = arg

    def cancel(self) -> None:
        """Shutdown: stop waiting (the source is cancelled; the answer fails with CancelledError)."""
        if self.source is not None:
            self.source.cancel()
        self.fail(asyncio.CancelledError())

    def __await__(self):
        """For wrappers that post-process an answer (the authorization guard): the response, or this
        answer itself when it is to be encoded off the loop."""
        if not self.done:
            waiter = asyncio.get_running_loop().create_future()
            self.subscribe(_wake, waiter)
            yield from waiter
        if self.error is not None:
            raise self.error
        return self if self.off_loop else self.response


def _wake(waiter: asyncio.Future, answer: PendingAnswer) -> None:
    if not waiter.done():
        waiter.set_result(None)


def encode_off_loop(response) -> PendingAnswer:
    """`response`, ready now but large enough that the connection encodes it on a worker thread."""
    answer = PendingAnswer()
    answer.settle(response, off_loop=True)
    return answer


def answer_when_done(future: asyncio.Future, make: Callable[[object], object]) -> PendingAnswer:
    """The answer `make(result)` once `future` (an engine's parked request) is done."""
    answer = PendingAnswer(future)

    def done(_: asyncio.Future) -> None:
        if future.cancelled():
            answer.fail(asyncio.CancelledError())
        elif future.exception() is not None:
            answer.fail(future.exception())
        else:
            try:
                answer.settle_with(make(future.result()))
            except Exception as exc:  # noqa: BLE001 - reported by whoever subscribed (the connection logs it)
                answer.fail(exc)

    future.add_done_callback(done)
    return answer


def answer_after(first: PendingAnswer, make: Callable[[object], object]) -> PendingAnswer:
    """The answer `make(response)` makes once `first` (a write's answer) is settled; `make` may return a
    `PendingAnswer` of its own."""
    answer = PendingAnswer(first.source)
    first.subscribe(_made_after, (answer, make))
    return answer


def _made_after(pending: tuple, first: PendingAnswer) -> None:
    answer, make = pending
    if first.error is not None:
        answer.fail(first.error)
        return
    try:
        answer.settle_with(make(first.response))
    except Exception as exc:  # noqa: BLE001 - reported by whoever subscribed (the connection logs it)
        answer.fail(exc)


def answer_when_all(answers: list[PendingAnswer], make: Callable[[], object]) -> PendingAnswer:
    """The answer `make()` makes once every one of `answers` (writes' answers) is settled."""
    answer = PendingAnswer()
    left = [len(answers)]

    def one_settled(_, settled: PendingAnswer) -> None:
        left[0] -= 1
        if settled.error is not None:
            answer.fail(settled.error)
        elif left[0] == 0:
            try:
                answer.settle_with(make())
            except Exception as exc:  # noqa: BLE001 - reported by whoever subscribed (the connection logs it)
                answer.fail(exc)

    if not answers:
        answer.settle_with(make())
    for each in answers:
        each.subscribe(one_settled, None)
    return answer


async def settling(coro: Coroutine, answer: PendingAnswer) -> None:
    """Run a coroutine handler and settle `answer` with what it returns (the task's body; see `answer_of`)."""
    try:
        result = await coro
    except asyncio.CancelledError as exc:
        answer.fail(exc)
        raise
    except Exception as exc:  # noqa: BLE001 - reported by whoever subscribed (the connection logs it)
        answer.fail(exc)
        return
    answer.settle_with(result)


def answer_of(coro: Coroutine) -> PendingAnswer:
    """A coroutine's result as a `PendingAnswer` (run as a task: for the groups' waiting paths)."""
    answer = PendingAnswer()
    answer.source = asyncio.get_running_loop().create_task(settling(coro, answer))
    return answer
