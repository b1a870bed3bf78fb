"""One answer shape: a handler answers a response, ready now, or a `PendingAnswer` that is settled once.

A commit's `PendingAnswer` is settled by the partition runtime in the very loop turn its append
settles (the local log's continuation), before any done-callback of the append could run; a coroutine
handler is wrapped at the dispatch edge, and one that finishes in its first step answers its response.
"""
from __future__ import annotations

import asyncio

from cohort.coordinator.contracts.answers import PendingAnswer, encode_off_loop
from cohort.coordinator.server.handlers import answering
from cohort.protocol import messages as m
from group_harness import CTX, E, Harness

T = m.OffsetCommitRequest.OffsetCommitRequestTopic


def commit_request(group_id: str, offset: int) -> m.OffsetCommitRequest:
    return m.OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
                                 group_instance_id=None, retention_time_ms=-1, topics=[T(name="t", partitions=[
                                     T.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                                    committed_metadata="")])])


async def test_a_commit_is_answered_in_the_loop_turn_its_append_settles(tmp_path):
    h = await Harness(tmp_path, flush_policy="always").start()
    try:
        answer = h.coordinator.offset_commit(commit_request("g", 7), 8, CTX)
        assert type(answer) is PendingAnswer and not answer.done
        answered_before_callbacks = []
        answer.source.add_done_callback(lambda _: answered_before_callbacks.append(answer.done))
        heard = []
        answer.subscribe(lambda arg, a: heard.append((arg, a.response)), "req")
        await asyncio.wait_for(asyncio.shield(answer.source), 10)
        await asyncio.sleep(0)
        assert answered_before_callbacks == [True]  # settled before the append's done-callbacks ran
        ((arg, response),) = heard
        assert arg == "req" and response.topics[0].partitions[0].error_code == E.NONE
        assert h.coordinator.offsets.get("g", "t", 0).offset == 7
    finally:
        await h.close()


async def test_a_refused_commit_answers_a_response_ready_now(tmp_path):
    h = await Harness(tmp_path).start()
    try:
        refused = h.coordinator.offset_commit(commit_request(None, 1), 8, CTX)
        assert type(refused) is m.OffsetCommitResponse
        assert refused.topics[0].partitions[0].error_code == E.INVALID_GROUP_ID
    finally:
        await h.close()


async def test_a_coroutine_handler_answers_its_response_when_it_finishes_in_its_first_step():
    async def at_once(request, version, ctx):
        return "response"

    gate = asyncio.Event()

    async def waiting(request, version, ctx):
        await gate.wait()
        return encode_off_loop("huge response")

    assert answering(at_once)(None, 0, CTX) == "response"
    pending = answering(waiting)(None, 0, CTX)
    assert type(pending) is PendingAnswer and not pending.done
    heard = []
    pending.subscribe(lambda arg, a: heard.append((a.response, a.off_loop)), None)
    gate.set()
    await asyncio.wait_for(pending.source, 5)
    assert heard == [("huge response", True)]


async def test_a_failing_coroutine_handler_answers_its_error_and_a_cancelled_answer_is_never_answered():
    async def broken(request, version, ctx):
        raise ValueError("bug")

    failed = answering(broken)(None, 0, CTX)
    assert type(failed) is PendingAnswer and failed.done and type(failed.error) is ValueError

    async def forever(request, version, ctx):
        await asyncio.get_running_loop().create_future()

    pending = answering(forever)(None, 0, CTX)
    heard = []
    pending.subscribe(lambda arg, a: heard.append(type(a.error)), None)
    pending.cancel()
    assert heard == [asyncio.CancelledError]


def test_a_settled_answer_lets_go_of_its_subscriber_without_waiting_for_the_collector():
    import gc
    import weakref

    class Request:
        task = None

    request = Request()
    gone = weakref.ref(request)
    answer = PendingAnswer()
    request.task = answer  # as the connection keeps it
    answer.subscribe(lambda arg, a: None, request)
    gc.disable()
    try:
        answer.settle("response")
        del request
        assert gone() is None  # freed by reference counting: one commit leaves no cycle behind
    finally:
        gc.enable()
