"""Group membership against a real `cohort serve`: forming, failures, leaves, static members, fencing."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cohort.client.admin import Admin, NewTopic
from cohort.client.errors import IllegalGenerationError
from cohort.client.membership import GroupMember, MemberState, RebalanceListener
from cohort.client.topic_partition import TopicPartition
from bounded_wait import wait_until_async
from client_harness import CohortServe

pytestmark = pytest.mark.timeout(120)

FAST = dict(heartbeat_interval_ms=200, rebalance_timeout_ms=5000)


async def make_topic(bootstrap: str, name: str, partitions: int) -> None:
    async with Admin(bootstrap) as admin:
        assert await admin.create_topics([NewTopic(name, partitions)]) == {name: None}


async def until(predicate, timeout: float, what: str) -> None:
    """Poll `predicate` every 50 ms, failing with `what` after `timeout` seconds."""
    await wait_until_async(predicate, timeout, what, interval=0.05)


def settled(members, partitions: int) -> bool:
    """Every member stable in one generation, and together they own each partition exactly once."""
    if not all(m.state is MemberState.STABLE for m in members):
        return False
    if len({m.generation.generation_id for m in members}) != 1:
        return False
    owned = [tp for m in members for tp in m.assignment]
    return len(owned) == partitions == len(set(owned))


async def test_three_members_split_a_topic(shared_cohort_server):
    bootstrap = shared_cohort_server.bootstrap
    await make_topic(bootstrap, "split", 6)
    members = [GroupMember(bootstrap, "g-split", ["split"], session_timeout_ms=6000, **FAST) for _ in range(3)]
    try:
        for m in members:
            await m.start(wait=False)
        await until(lambda: settled(members, 6), 20, "three members owning 6 partitions")
        assert sorted(len(m.assignment) for m in members) == [2, 2, 2]
        assert sum(m.is_leader for m in members) == 1
        async with Admin(bootstrap) as admin:
            description = await admin.describe_group("g-split")
        assert description.state == "Stable" and description.protocol == "range"
        assert {d.member_id: set(d.assignment) for d in description.members} == {
            m.member_id: set(m.assignment) for m in members
        }
    finally:
        await asyncio.gather(*(m.close() for m in members))


async def test_killed_member_is_replaced_after_its_session_timeout(shared_cohort_server):
    bootstrap = shared_cohort_server.bootstrap
    await make_topic(bootstrap, "killed", 6)
    script = Path(__file__).with_name("member_process.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])}
    victim = subprocess.Popen(
        [sys.executable, str(script), bootstrap, "g-killed", "killed", "2000"],
        stdout=subprocess.PIPE, text=True, env=env,
    )
    survivors = [GroupMember(bootstrap, "g-killed", ["killed"], session_timeout_ms=2000, **FAST) for _ in range(2)]
    try:
        for m in survivors:
            await m.start(wait=False)
        # The victim reports every assignment it gets (one JSON line each); follow the latest.
        reports = []
        reader = threading.Thread(target=lambda: reports.extend(json.loads(line) for line in victim.stdout), daemon=True)
        reader.start()
        await until(lambda: reports and len(reports[-1]["partitions"]) == 2 and settled_with(survivors, reports[-1], 6),
                    30, "the victim and two survivors sharing 6 partitions")
        report = reports[-1]
        generation = report["generation"]
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        # No LeaveGroup was sent: the coordinator notices when the 2 s session runs out.
        await until(lambda: settled(survivors, 6), 20, "survivors owning all 6 partitions")
        assert all(m.generation.generation_id > generation for m in survivors)
        assert sorted(len(m.assignment) for m in survivors) == [3, 3]
    finally:
        if victim.poll() is None:
            victim.kill()
        await asyncio.gather(*(m.close() for m in survivors))


def settled_with(survivors, report, partitions: int) -> bool:
    if not all(m.state is MemberState.STABLE and m.generation.generation_id == report["generation"] for m in survivors):
        return False
    owned = [tuple(p) for p in report["partitions"]] + [tuple(tp) for m in survivors for tp in m.assignment]
    return len(owned) == partitions == len(set(owned))


async def test_graceful_leave_hands_partitions_over_at_once(shared_cohort_server):
    bootstrap = shared_cohort_server.bootstrap
    await make_topic(bootstrap, "leave", 6)
    # A 30 s session: if the others only took over after the session timeout, this would time out.
    members = [GroupMember(bootstrap, "g-leave", ["leave"], session_timeout_ms=30000, **FAST) for _ in range(3)]
    try:
        for m in members:
            await m.start(wait=False)
        await until(lambda: settled(members, 6), 20, "three members settled")
        revoked = []

        class Watch(RebalanceListener):
            async def on_partitions_revoked(self, partitions):
                revoked.append(partitions)

        leaver = members.pop(0)
        leaver.listener = Watch()
        before = set(leaver.assignment)
        started = time.monotonic()
        await leaver.close(reason="test: scaling down")
        assert revoked == [frozenset(before)]  # the leaver gave its partitions up first
        await until(lambda: settled(members, 6), 10, "two members owning all 6 partitions")
        assert time.monotonic() - started < 30
    finally:
        await asyncio.gather(*(m.close() for m in members))


@pytest.mark.parametrize("static_leads", [False, True])
async def test_static_member_restarts_within_its_session_without_a_rebalance(shared_cohort_server, static_leads):
    bootstrap = shared_cohort_server.bootstrap
    group, topic = f"g-static-{static_leads}", f"static-{static_leads}"
    await make_topic(bootstrap, topic, 6)
    options = dict(session_timeout_ms=15000, **FAST)
    others = [GroupMember(bootstrap, group, [topic], **options) for _ in range(2)]
    static = GroupMember(bootstrap, group, [topic], group_instance_id="pod-1", **options)
    replacement = None
    try:
        # The first member to join leads; a replaced leader must not reassign (SkipAssignment).
        first, later = ([static], others) if static_leads else (others[:1], others[1:] + [static])
        await first[0].start(timeout=10)
        for m in later:
            await m.start(wait=False)
        await until(lambda: settled(others + [static], 6), 20, "three members settled")
        assert static.is_leader == static_leads
        generation = static.generation.generation_id
        owned = static.assignment
        rebalances = [m.rebalances for m in others]
        old_member_id = static.member_id

        await static.close()  # a static member does not send LeaveGroup by default
        replacement = GroupMember(bootstrap, group, [topic], group_instance_id="pod-1", **options)
        assert await replacement.start(timeout=10) == owned
        assert replacement.generation.generation_id == generation
        assert replacement.member_id != old_member_id
        await asyncio.sleep(1.0)  # the scenario: a window of several heartbeats for a wrong rebalance to show up
        assert [m.generation.generation_id for m in others] == [generation, generation]
        assert [m.rebalances for m in others] == rebalances
        assert all(m.state is MemberState.STABLE for m in others)
    finally:
        await asyncio.gather(*(m.close() for m in others + ([replacement] if replacement else [])))


async def test_commit_from_a_stale_generation_raises_illegal_generation(shared_cohort_server):
    bootstrap = shared_cohort_server.bootstrap
    await make_topic(bootstrap, "fenced", 4)
    # A static member that heartbeats rarely misses the next rebalance but stays in the group
    # (static members are kept); its generation is then behind the group's.
    sleepy = GroupMember(bootstrap, "g-fenced", ["fenced"], group_instance_id="sleepy", session_timeout_ms=30000,
                         heartbeat_interval_ms=60000, rebalance_timeout_ms=1500)
    newcomer = GroupMember(bootstrap, "g-fenced", ["fenced"], session_timeout_ms=30000, heartbeat_interval_ms=200,
                           rebalance_timeout_ms=1500)
    try:
        await sleepy.start(timeout=10)
        stale = sleepy.generation.generation_id
        partition = sorted(sleepy.assignment)[0]
        await sleepy.commit({partition: (10, "gen-ok")})

        await newcomer.start(timeout=15)
        assert newcomer.generation.generation_id > stale
        with pytest.raises(IllegalGenerationError) as info:
            await sleepy.commit({partition: (11, "too late")})
        message = str(info.value)
        assert "ILLEGAL_GENERATION" in message and f"generation {stale}" in message and "g-fenced" in message
        committed = await newcomer.committed([partition])
        assert committed[partition].offset == 10  # the fenced commit was not stored

        # The refused commit made the member rejoin; afterwards it can commit again.
        await until(lambda: sleepy.state is MemberState.STABLE and sleepy.generation.generation_id > stale, 15,
                    "the fenced member rejoined")
        mine = sorted(sleepy.assignment)
        if mine:
            await sleepy.commit({mine[0]: (12, "rejoined")})
    finally:
        await asyncio.gather(sleepy.close(leave=True), newcomer.close())


async def test_cooperative_sticky_never_has_two_owners_and_keeps_partitions(shared_cohort_server):
    bootstrap = shared_cohort_server.bootstrap
    await make_topic(bootstrap, "coop", 8)
    owner: dict[TopicPartition, str] = {}
    violations: list[str] = []

    class Track(RebalanceListener):
        def __init__(self, name):
            self.name = name

        async def on_partitions_assigned(self, assigned):
            for tp in assigned:
                if tp in owner and owner[tp] != self.name:
                    violations.append(f"{tp} given to {self.name} while {owner[tp]} owns it")
                owner[tp] = self.name

        async def on_partitions_revoked(self, revoked):
            for tp in revoked:
                owner.pop(tp, None)

    def member(name):
        return GroupMember(bootstrap, "g-coop", ["coop"], assignors=["cooperative-sticky"], session_timeout_ms=6000,
                           listener=Track(name), **FAST)

    members = [member("a"), member("b")]
    try:
        for m in members:
            await m.start(wait=False)
        await until(lambda: settled(members, 8), 20, "two cooperative members settled")
        kept = {tp for m in members for tp in m.assignment}
        before = {m.member_id: set(m.assignment) for m in members}
        members.append(member("c"))
        await members[-1].start(wait=False)
        await until(lambda: settled(members, 8) and len(members[-1].assignment) > 0, 20, "three cooperative members")
        assert violations == []
        assert sorted(len(m.assignment) for m in members) == [2, 3, 3]
        # Sticky: the first two kept every partition they still own; only what c needed moved.
        for m in members[:2]:
            assert set(m.assignment) <= before[m.member_id]
        assert kept == {tp for m in members for tp in m.assignment}
    finally:
        await asyncio.gather(*(m.close() for m in members))


async def test_expired_member_loses_its_partitions_and_rejoins(shared_cohort_server):
    bootstrap = shared_cohort_server.bootstrap
    await make_topic(bootstrap, "lost", 2)
    events = []

    class Watch(RebalanceListener):
        async def on_partitions_assigned(self, assigned):
            events.append(("assigned", frozenset(assigned)))

        async def on_partitions_lost(self, lost):
            events.append(("lost", frozenset(lost)))

    # Heartbeats slower than the session: the coordinator expires the member between two heartbeats.
    member = GroupMember(bootstrap, "g-lost", ["lost"], session_timeout_ms=1000, heartbeat_interval_ms=2500,
                         rebalance_timeout_ms=3000, listener=Watch())
    try:
        first = await member.start(timeout=10)
        first_id = member.member_id
        await until(lambda: any(kind == "lost" for kind, _ in events), 15, "the member noticing it was removed")
        assert events[:2] == [("assigned", first), ("lost", first)]
        await until(lambda: len(events) >= 3 and member.state is MemberState.STABLE, 15, "the member rejoining")
        assert events[2] == ("assigned", first) and member.member_id != first_id
    finally:
        await member.abort()


async def test_async_commit_reports_through_its_task(shared_cohort_server):
    bootstrap = shared_cohort_server.bootstrap
    await make_topic(bootstrap, "async-commit", 1)
    member = GroupMember(bootstrap, "g-async-commit", ["async-commit"], session_timeout_ms=6000, **FAST)
    try:
        await member.start(timeout=10)
        tasks = [member.commit_async({("async-commit", 0): (n, f"n={n}")}) for n in range(1, 6)]
        await asyncio.gather(*tasks)
        committed = await member.committed()
        assert committed[TopicPartition("async-commit", 0)].offset in range(1, 6)
        with pytest.raises(TypeError):
            member.commit_async({("async-commit", 0): "not an offset"})
    finally:
        await member.close()


async def test_leader_rebalances_when_a_subscribed_topic_grows(shared_cohort_server):
    bootstrap = shared_cohort_server.bootstrap
    await make_topic(bootstrap, "grows", 2)
    members = [GroupMember(bootstrap, "g-grows", ["grows"], session_timeout_ms=6000, metadata_max_age_ms=300, **FAST)
               for _ in range(2)]
    try:
        for m in members:
            await m.start(wait=False)
        await until(lambda: settled(members, 2), 20, "two members owning 2 partitions")
        async with Admin(bootstrap) as admin:
            assert await admin.create_partitions({"grows": 6}) == {"grows": None}
        await until(lambda: settled(members, 6), 20, "the new partitions assigned")
        assert sorted(len(m.assignment) for m in members) == [3, 3]
    finally:
        await asyncio.gather(*(m.close() for m in members))


async def test_members_ride_out_a_coordinator_restart(tmp_path):
    server = CohortServe(tmp_path / "data").start()
    await make_topic(server.bootstrap, "restart", 4)
    members = [GroupMember(server.bootstrap, "g-restart", ["restart"], session_timeout_ms=20000, **FAST)
               for _ in range(2)]
    try:
        for m in members:
            await m.start(wait=False)
        await until(lambda: settled(members, 4), 20, "two members settled")
        await members[0].commit({tp: (3, "before restart") for tp in members[0].assignment})
        server.stop()
        await asyncio.sleep(0.5)  # the scenario: the server stays down a while; heartbeats fail, members retry
        server.start()
        # The group was reloaded from the log; the members reconnect, rediscover and carry on.
        await until(lambda: settled(members, 4) and all(m.error is None for m in members), 30, "members after restart")
        committed = await members[0].committed()
        assert {om.offset for om in committed.values()} == {3}
    finally:
        await asyncio.gather(*(m.close() for m in members))
        server.stop()


async def test_slow_rebalance_callbacks_do_not_cost_the_session(shared_cohort_server):
    bootstrap = shared_cohort_server.bootstrap
    await make_topic(bootstrap, "slow-callback", 4)

    class Slow(RebalanceListener):
        async def on_partitions_assigned(self, assigned):
            await asyncio.sleep(6.0)  # the scenario: a callback running twice the session timeout

    # A 3 s session leaves room for a loaded CI machine's scheduling stalls.
    options = dict(session_timeout_ms=3000, heartbeat_interval_ms=300, rebalance_timeout_ms=8000)
    steady = GroupMember(bootstrap, "g-slow", ["slow-callback"], **options)
    slow = GroupMember(bootstrap, "g-slow", ["slow-callback"], listener=Slow(), **options)
    try:
        await steady.start(timeout=10)
        await slow.start(wait=False)
        await until(lambda: settled([steady, slow], 4), 30, "both members settled")
        generation = steady.generation.generation_id
        await asyncio.sleep(4.0)  # the scenario: most of the slow callback, past the 3 s session
        # Heartbeats went on during the 6 s callback: nobody was expired, no further rebalance.
        assert steady.generation.generation_id == slow.generation.generation_id == generation
        assert settled([steady, slow], 4)
    finally:
        await asyncio.gather(steady.close(), slow.close())
