"""The runtime around the pure engine: big answer batches spread over loop turns, timers stop on unload.

A real GroupCoordinator over a real log (group_harness); only the clock is driven by hand.
"""
from __future__ import annotations

import asyncio

import pytest

from cohort.coordinator.groups.runtime import group_runtime as runtime
from cohort.coordinator.groups.runtime.group_runtime import ANSWERS_PER_TURN
from group_harness import E, Harness

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def h(tmp_path):
    harness = await Harness(tmp_path, group_min_session_timeout_ms=1000).start()
    yield harness
    await harness.close()


async def test_a_big_join_phase_is_answered_over_several_loop_turns(h):
    n = 3 * ANSWERS_PER_TURN
    ids = [await h.new_member("g", session_ms=1000) for _ in range(n)]
    joins = [h.join("g", member_id, session_ms=1000) for member_id in ids]
    await h.settle()
    assert not any(j.done() for j in joins)
    h.clock.advance(0)  # the (zero) initial delay ends: the join phase completes in this call
    done_after_turns = []
    for _ in range(3):
        await asyncio.sleep(0)
        done_after_turns.append(sum(j.done() for j in joins))
    assert done_after_turns[0] < n, done_after_turns  # not everyone in the completing turn
    await h.settle()
    results = [j.result() for j in joins]
    assert {r.error_code for r in results} == {E.NONE} and {r.generation_id for r in results} == {1}
    # each member's session restarted as its answer went out (the join timeout no longer watches it)
    deadlines = {h.group("g").session_deadline_ms(member_id) for member_id in ids}
    assert deadlines == {h.clock.monotonic_ms() + 1000}


async def test_a_turn_stops_answering_once_its_time_slice_is_spent(h, monkeypatch):
    monkeypatch.setattr(runtime, "ANSWER_SLICE_S", 0.0)  # every check finds the slice spent
    n = ANSWERS_PER_TURN
    ids = [await h.new_member("g", session_ms=1000) for _ in range(n)]
    joins = [h.join("g", member_id, session_ms=1000) for member_id in ids]
    await h.settle()
    h.clock.advance(0)
    done_after_turns = []
    for _ in range(3):
        await asyncio.sleep(0)
        done_after_turns.append(sum(j.done() for j in joins))
    # one check's worth per turn, not the whole per-turn count
    assert 0 < done_after_turns[0] <= runtime._ANSWERS_PER_CHECK < n, done_after_turns
    await h.settle()
    assert {j.result().error_code for j in joins} == {E.NONE}


async def test_unloading_answers_parked_requests_and_stops_every_timer(h):
    member_id = await h.new_member("g")
    parked = h.join("g", member_id)
    other = await h.new_member("g2")
    await h.settle()
    assert h.clock.pending() > 0  # sessions and the join timers
    h.coordinator.shutdown()
    await h.settle()
    assert parked.result().error_code == E.NOT_COORDINATOR
    assert h.clock.pending() == 0
    h.clock.advance(600_000)  # nothing fires into an unloaded group
    assert other in h.group("g2").membership.pending_members and h.group("g").members
