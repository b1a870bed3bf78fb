"""Group health from samples of committed offsets: the rules, on a hand-driven clock."""
from __future__ import annotations

from cohort.coordinator.groups.reports.health import HealthMonitor

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


def test_with_a_reported_end_no_new_data_is_ok_and_data_waiting_without_progress_is_stalled():
    monitor = HealthMonitor(STALL)
    end = {"value": 20}
    offsets = [("t", 0, 20, 0)]
    monitor.sample("g", offsets, 0, lambda since: False)
    # caught up with the end: an idle topic, however long nobody moves
    report = monitor.evaluate("g", offsets, MEMBER, 60_000, lambda t, p: end["value"])
    assert report.status == "OK" and (report.partitions[0].end_offset, report.partitions[0].lag) == (20, 0)
    assert report.total_lag == 0 and report.partitions_without_end == 0
    # the source reports more data and the group does not move: stalled, with its lag
    end["value"] = 25
    report = monitor.evaluate("g", offsets, MEMBER, 60_000, lambda t, p: end["value"])
    assert report.status == "STALLED" and report.partitions[0].lag == 5 and report.total_lag == 5
    # without members: caught up is OK, lag left behind is STOPPED
    assert monitor.evaluate("g", offsets, [], 60_000, lambda t, p: 20).status == "OK"
    assert monitor.evaluate("g", offsets, [], 60_000, lambda t, p: 25).status == "STOPPED"


def test_without_a_reported_end_lag_is_unknown_not_zero():
    monitor = HealthMonitor(STALL)
    offsets = [("t", 0, 20, 0)]
    monitor.sample("g", offsets, 0, lambda since: False)
    report = monitor.evaluate("g", offsets, MEMBER, 60_000)
    assert report.status == "STALLED"  # an idle topic and a stuck group look alike without an end
    assert (report.partitions[0].end_offset, report.partitions[0].lag) == (None, None)
    assert report.total_lag is None and report.partitions_without_end == 1


def test_last_moved_is_the_commit_that_moved_the_offset_never_later_than_the_last_commit():
    monitor = HealthMonitor(STALL)
    monitor.sample("g", [("t", 0, 10, 100)], 150, lambda since: False)
    # committed 11 at 200, noticed by the sample at 900
    offsets = [("t", 0, 11, 200)]
    monitor.sample("g", offsets, 900, lambda since: False)
    (partition,) = monitor.evaluate("g", offsets, MEMBER, 900).partitions
    assert partition.last_moved_ms == 200 <= partition.last_commit_ms


def test_group_lag_sums_known_partitions_and_counts_the_others():
    from cohort.coordinator.groups.reports.lag import group_lag
    from cohort.coordinator.server.topics import ReportedEnd

    ends = {("t", 0): ReportedEnd(10, 5), ("t", 1): ReportedEnd(3, 6)}
    lag = group_lag([("t", 1, 4), ("t", 0, 7), ("t", 2, 1)], lambda t, p: ends.get((t, p)))
    assert [(p["partition"], p["end_offset"], p["lag"]) for p in lag["partitions"]] == [
        (0, 10, 3), (1, 3, 0), (2, None, None)]
    assert (lag["total_lag"], lag["partitions_without_end"]) == (3, 1)
