"""Fleet formation keeps joined members alive while the rest of the fleet joins.

A real `cohort serve` with a 1 s minimum session; one member is slow to join (it waits 2.5 s,
two and a half sessions, before its first JoinGroup, as a member does on a loaded machine when
its turn comes late). The members that joined first must keep their sessions: the server
expires nobody (its own member-expiry counter) and their group ends Stable with all of them.
"""
from __future__ import annotations

import asyncio
import re
import urllib.request

import pytest

from bench.members import BenchMember, ProtocolVersions, describe_state, form_groups
from bench.targets import CohortServer
from bench.wire import KafkaSession

SESSION_MS = 1000


class SlowToJoin(BenchMember):
    async def join(self) -> list:
        if not self.member_id:
            await asyncio.sleep(2.5 * SESSION_MS / 1000)  # the scenario: silent past its pending id's session
        return await super().join()


def member_expirations(server: CohortServer) -> float:
    with urllib.request.urlopen(f"http://{server.settings['metrics']}/metrics", timeout=5) as response:
        text = response.read().decode()
    match = re.search(r"^cohort_member_expirations(?:_total)? ([0-9.e+]+)$", text, re.M)
    assert match, "no member expiry counter in the metrics"
    return float(match.group(1))


@pytest.fixture(scope="module")
def short_sessions():
    with CohortServer(settings={"group.initial.rebalance.delay.ms": 0,
                                "group.min.session.timeout.ms": SESSION_MS}) as server:
        yield server


async def test_members_joined_first_keep_their_sessions_while_a_slow_member_joins(short_sessions):
    target = short_sessions
    control = await KafkaSession.open(target.host, target.port)
    versions = ProtocolVersions.negotiate(control)
    timeouts = dict(session_timeout_ms=SESSION_MS, rebalance_timeout_ms=5000)
    early = [await BenchMember.open(target.host, target.port, "early", versions, **timeouts) for _ in range(3)]
    session = await KafkaSession.open(target.host, target.port, negotiate=False)
    slow = SlowToJoin(session, "slow", versions, **timeouts)
    fleet = [*early, slow]
    try:
        await asyncio.wait_for(form_groups(fleet, timeout_s=20), 30)
        assert member_expirations(target) == 0
        state, count = await describe_state(control, "early", versions.describe)
        assert (state, count) == ("Stable", 3)
    finally:
        await asyncio.gather(*(m.leave() for m in fleet), return_exceptions=True)
        await asyncio.gather(*(m.close() for m in fleet), return_exceptions=True)
        await control.close()
