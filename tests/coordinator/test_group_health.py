"""Group health from samples of committed offsets: the rules, on a hand-driven clock."""
from __future__ import annotations

from cohort.coordinator.group_health import HealthMonitor

STALL = 1000
MEMBER = [("m", "client", "/h", 10.0)]


def sample(monitor: HealthMonitor, offset: int, now: int, reset_journaled: bool = False) -> str:
    offsets = [("t", 0, offset, now)]
    monitor.sample("g", offsets, now, lambda since: reset_journaled)
    return monitor.evaluate("g", offsets, MEMBER, now).status


def test_an_offset_that_keeps_moving_is_ok_and_one_that_stops_is_stalled_after_the_threshold():
    monitor = HealthMonitor(STALL)
    assert sample(monitor, 10, 0) == "OK"
    assert sample(monitor, 20, 500) == "OK"
    assert sample(monitor, 20, 1499) == "OK"      # moved at 500: not yet
    assert sample(monitor, 20, 1500) == "STALLED"
    assert sample(monitor, 21, 1600) == "OK"


def test_a_backwards_move_is_rewound_unless_an_admin_reset_was_journaled_in_between():
    monitor = HealthMonitor(STALL)
    sample(monitor, 50, 0)
    assert sample(monitor, 40, 100) == "REWOUND"
    assert sample(monitor, 40, 200) == "REWOUND"  # sticks while the offset stays
    assert sample(monitor, 41, 300) == "OK"       # until it moves forward
    assert sample(monitor, 0, 400, reset_journaled=True) == "OK"


def test_no_members_is_stopped_without_recent_commits_and_ok_with_them():
    monitor = HealthMonitor(STALL)
    offsets = [("t", 0, 5, 0)]
    monitor.sample("g", offsets, 0, lambda since: False)
    assert monitor.evaluate("g", offsets, [], 999).status == "OK"
    assert monitor.evaluate("g", offsets, [], 1000).status == "STOPPED"
    assert monitor.evaluate("g", [], [], 0).status == "STOPPED"  # never committed, nobody there


def test_member_ages_come_from_heartbeats_and_commits():
    monitor = HealthMonitor(STALL)
    monitor.member_committed("g", "m", 100)
    report = monitor.evaluate("g", [], MEMBER, 400)
    (member,) = report.members
    assert (member.heartbeat_age_ms, member.commit_age_ms) == (10, 300)
    assert report.to_json()["members"][0]["commit_age_ms"] == 300
