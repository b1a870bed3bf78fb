"""Group health by Burrow's evaluation rules over a sliding window of commits: the rules, on a hand-driven
clock, and a Hypothesis check against Burrow's rules stated independently."""
from __future__ import annotations

from hypothesis import given, strategies as st

from cohort.coordinator.groups.reports.health import HealthMonitor, WindowCommit, group_status, partition_status

MEMBER = [("m", "client", "/h", 10.0)]


class Partition:
    """One partition of group g: commits at given times, its end reported as `end` (None: no end)."""

    def __init__(self, window: int = 4, min_distance: int = 10) -> None:
        self.monitor = HealthMonitor(window, min_distance)
        self.end: int | None = 1000
        self.offset, self.commit_ms = 0, 0

    def commit(self, offset: int, at: int, reset_journaled: bool = False) -> None:
        self.offset, self.commit_ms = offset, at
        self.monitor.sample("g", self.offsets(), at, lambda since: reset_journaled, self.end_offset)

    def offsets(self):
        return [("t", 0, self.offset, self.commit_ms)]

    def end_offset(self, topic, partition):
        return self.end

    def status(self, now: int) -> str:
        report = self.monitor.evaluate("g", self.offsets(), MEMBER, now, self.end_offset)
        return report.partitions[0].status


def test_a_group_that_consumes_and_catches_up_is_ok():
    p = Partition()
    for i, at in enumerate(range(0, 400, 100)):
        p.end = 100 * (i + 1)
        p.commit(100 * i + 90, at)  # 10 behind, then caught up
    p.end = 390
    assert p.status(400) == "OK"


def test_lag_that_never_goes_down_while_the_group_commits_is_warn():
    p = Partition()
    for i, at in enumerate(range(0, 400, 100)):
        p.end = 200 * (i + 1)  # the data grows faster than the group consumes it
        p.commit(100 * (i + 1), at)
    assert p.status(350) == "WARN"
    p.end = 450  # the group gained on it between two commits: not WARN
    p.commit(420, 400)
    assert p.status(450) == "OK"


def test_commits_that_do_not_move_with_lag_waiting_are_stall_and_no_commits_at_all_is_stop():
    p = Partition()
    for at in range(0, 400, 100):
        p.commit(50, at)
    assert p.status(350) == "STALL"
    # stopped committing: longer since the last commit than the window spans (300 ms)
    assert p.status(600) == "STALL"
    assert p.status(601) == "STOP"


def test_an_offset_that_goes_back_is_rewind_unless_an_admin_reset_was_journaled():
    p = Partition()
    p.commit(500, 0)
    p.commit(400, 100)
    assert p.status(150) == "REWIND"
    q = Partition()
    q.commit(500, 0)
    q.commit(400, 100, reset_journaled=True)  # the window starts over at the reset
    q.commit(450, 200)
    assert q.status(250) == "OK"


def test_without_a_reported_end_only_a_rewind_is_seen_and_lag_is_unknown_not_zero():
    p = Partition()
    p.end = None
    for at in range(0, 400, 100):
        p.commit(50, at)
    report = p.monitor.evaluate("g", p.offsets(), MEMBER, 10_000, p.end_offset)
    assert report.status == "OK" and report.partitions[0].lag is None and report.total_lag is None
    assert report.partitions_without_end == 1
    p.commit(40, 500)
    assert p.status(600) == "REWIND"


def test_commits_closer_than_the_min_distance_replace_the_newest_window_entry():
    p = Partition(window=3, min_distance=100)
    for offset, at in ((1, 0), (2, 100), (3, 150), (4, 190), (5, 200)):
        p.commit(offset, at)
    window = p.monitor._partitions["g"][("t", 0)].window
    assert [(c.offset, c.commit_ms) for c in window] == [(1, 0), (4, 190), (5, 200)]


def test_group_status_is_warn_or_err_and_partitions_carry_the_window():
    assert group_status(["OK", "WARN"]) == "WARN"
    assert all(group_status(["OK", s]) == "ERR" for s in ("STOP", "STALL", "REWIND"))
    p = Partition(window=4)
    p.commit(10, 0)
    p.commit(20, 100)
    report = p.monitor.evaluate("g", p.offsets(), MEMBER, 150, p.end_offset).to_json()
    assert report["window_commits"] == 4 and report["partitions"][0]["window_commits"] == 2
    assert report["partitions"][0]["complete"] == 0.5 and report["complete"] == 0.0
    assert report["counts"]["OK"] == 1


def test_member_ages_come_from_heartbeats_and_commits():
    monitor = HealthMonitor()
    monitor.member_committed("g", "m", 100)
    report = monitor.evaluate("g", [], MEMBER, 400)
    (member,) = report.members
    assert (member.heartbeat_age_ms, member.commit_age_ms) == (10, 300)
    assert report.to_json()["members"][0]["commit_age_ms"] == 300


def test_last_moved_is_the_commit_that_moved_the_offset_never_later_than_the_last_commit():
    p = Partition()
    p.commit(10, 100)
    p.commit(20, 200)
    p.commit(20, 300)
    report = p.monitor.evaluate("g", p.offsets(), MEMBER, 400, p.end_offset)
    assert (report.partitions[0].last_moved_ms, report.partitions[0].last_commit_ms) == (200, 300)


def burrow(window: list[tuple[int, int, int | None]], current_lag: int | None, now: int) -> str:
    """Burrow's evaluator (core/internal/evaluator), stated again: lag -1 (unknown) counts as 0."""
    lag_now = current_lag or 0
    lags = [lag or 0 for _, _, lag in window]
    if not window:
        return "OK"
    if lag_now > 0 and all(lag != 0 for lag in lags):
        offsets = [o for o, _, _ in window]
        if any(offsets[i] < offsets[i - 1] for i in range(1, len(offsets))):
            return "REWIND"
        if now - window[-1][1] > window[-1][1] - window[0][1]:
            return "STOP"
        if all(offsets[i] == offsets[i - 1] for i in range(1, len(offsets))):
            return "STALL"
        if all(lags[i] >= lags[i - 1] for i in range(1, len(lags))):
            return "WARN"
    return "OK"


windows = st.lists(st.tuples(st.integers(0, 5), st.integers(1, 50), st.one_of(st.none(), st.integers(0, 4))),
                   max_size=6)


@given(windows, st.one_of(st.none(), st.integers(0, 4)), st.integers(0, 400))
def test_partition_status_is_burrows_evaluation(steps, current_lag, wait):
    commits, at = [], 0
    for offset, gap, lag in steps:
        at += gap
        commits.append((offset, at, lag))
    now = at + wait
    got = partition_status([WindowCommit(*c) for c in commits], current_lag, now)
    expected = burrow(commits, current_lag, now)
    offsets = [o for o, _, _ in commits]
    if current_lag is None and any(b < a for a, b in zip(offsets, offsets[1:])):
        expected = "REWIND"  # Cohort's one addition: a rewind needs no end offset to be seen
    assert got == expected
