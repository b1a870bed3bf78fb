"""Every workload runs end to end against a real `cohort serve` and yields well-formed, error-free results.

Smoke-sized (seconds); no timing assertions: speed is measured by `python -m bench`, not here.
"""
from __future__ import annotations

import stat

import pytest
from result_checks import assert_well_formed

from bench.targets import CohortServer, cohort_executable
from bench.workloads import workload_function


async def test_commit_workload_covers_simple_member_and_connection_sweep(cohort, smoke_profile):
    results = await workload_function("commit")(cohort, smoke_profile)

    variants = [r.variant for r in results]
    assert variants == ["simple-1p", "simple-10p", "member-1p", "member-10p", "connections-1", "connections-2"]
    for r in results:
        assert_well_formed(r, server=cohort)
        assert r.workload == "commit" and r.target == "cohort"
    ten = next(r for r in results if r.variant == "simple-10p")
    assert ten.extra["offsets_per_s"] == pytest.approx(ten.throughput_per_s * 10, rel=1e-3)


async def test_fetch_workload_reads_one_ten_and_all_partitions(cohort, smoke_profile):
    results = await workload_function("fetch")(cohort, smoke_profile)

    assert [r.variant for r in results] == ["fetch-1p", "fetch-10p", "fetch-all"]
    for r in results:
        assert_well_formed(r, server=cohort)


async def test_heartbeat_fleet_and_max_rate(cohort, smoke_profile):
    results = await workload_function("heartbeat")(cohort, smoke_profile)

    fleet, max_rate = results
    assert fleet.variant == "fleet" and max_rate.variant == "max-rate"
    assert_well_formed(fleet, closed_loop=False, server=cohort)
    assert_well_formed(max_rate, server=cohort)
    assert fleet.params["members"] == smoke_profile.heartbeat_members
    # every member beat at least once in the window
    assert fleet.operations >= smoke_profile.heartbeat_members


async def test_join_storm_assigns_every_member_and_survives_a_leave(cohort, smoke_profile):
    (result,) = await workload_function("join-storm")(cohort, smoke_profile)

    assert_well_formed(result, closed_loop=False, server=cohort)
    e = result.extra
    assert result.params["members"] == smoke_profile.storm_sizes[0]
    assert 0 < e["join_phase_complete_s"] <= e["all_assigned_s"]
    assert e["stable_s"] is not None and e["stable_s"] <= e["all_assigned_s"]
    assert e["leave_rebalance_s"] > 0


async def test_mixed_fleet_reports_latency_per_request_type(cohort, smoke_profile):
    (result,) = await workload_function("mixed")(cohort, smoke_profile)

    assert_well_formed(result, closed_loop=False, server=cohort)
    per_api = result.extra["per_api_ms"]
    assert per_api["heartbeat"]["count"] > 0 and per_api["commit"]["count"] > 0
    assert result.extra["joins"] >= 1 and result.extra["leaves"] >= 1
    assert per_api["heartbeat"]["count"] + per_api["commit"]["count"] == result.operations


async def test_restart_loads_the_log_and_measures_rss_per_offset(cohort, smoke_profile):
    (result,) = await workload_function("restart")(cohort, smoke_profile)

    assert_well_formed(result, closed_loop=False, server=cohort)
    e = result.extra
    assert result.params["records"] >= smoke_profile.restart_records[0]
    assert 0 < e["time_to_listen_s"] <= e["time_to_serve_all_groups_s"]
    assert e["log_bytes"] > 0
    assert e["server_reported_load_ms"] is not None  # parsed from the server's own load line
    assert isinstance(e["rss_bytes_per_offset"], float)


async def test_restart_runs_the_executable_of_the_target_it_is_given(tmp_path, smoke_profile):
    """`compare --b cohort=PATH --workload restart` must measure PATH, not this checkout, in every server it starts."""
    calls = tmp_path / "calls"
    wrapper = tmp_path / "other-cohort"
    wrapper.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nexec {' '.join(cohort_executable())} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    with CohortServer(executable=[str(wrapper)]) as target:
        (result,) = await workload_function("restart")(target, smoke_profile)
    assert_well_formed(result, closed_loop=False)
    started = calls.read_text().splitlines()
    # the target itself, then the restart workload's empty, filling and restarted servers
    assert len(started) == 1 + 2 + smoke_profile.restart_repeats, started
    assert all(line.startswith("serve ") for line in started)
