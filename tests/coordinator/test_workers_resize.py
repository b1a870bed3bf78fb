"""Changing `--workers` between restarts: partitions get new owners and every offset and group stays.

The data layout does not depend on N; a partition's new owner replays what older owners journaled
for it (`cohort.coordinator.log`), also after the whole server was killed with SIGKILL.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from test_workers_failover import wait_until, worker_pids
from workers_harness import WorkersServer

from cohort.client.blocking import BlockingAdmin

pytestmark = pytest.mark.timeout(240)
GROUPS = [f"resize-{i}" for i in range(40)]  # spread over every worker of every N below


def commit_all(bootstrap: str, round_: int) -> None:
    with BlockingAdmin(bootstrap) as admin:
        for i, group in enumerate(GROUPS):
            admin.commit_offsets(group, {("t", 0): (round_ * 1000 + i, f"r{round_}"), ("t", 1): (i, "")})


def assert_offsets(bootstrap: str, round_: int) -> None:
    with BlockingAdmin(bootstrap) as admin:
        fetched = admin.fetch_offsets_many({g: None for g in GROUPS})
    for i, group in enumerate(GROUPS):
        got = {tp: (om.offset, om.metadata) for tp, om in fetched[group].items()}
        assert got == {("t", 0): (round_ * 1000 + i, f"r{round_}"), ("t", 1): (i, "")}, group


def test_changing_the_number_of_workers_keeps_every_offset(tmp_path):
    # Given 3 workers with commits for 40 groups,
    server = WorkersServer(tmp_path / "data", 3).start()
    commit_all(server.bootstrap, 1)
    assert server.stop() == 0, server.output()

    # when restarted with 2, 1 (a single process) and 4 workers, each sees all of them and commits more.
    for round_, workers in enumerate((2, 1, 4), start=2):
        server = server.restarted(workers).start()
        try:
            assert_offsets(server.bootstrap, round_ - 1)
            commit_all(server.bootstrap, round_)
            assert_offsets(server.bootstrap, round_)
        finally:
            assert server.stop() == 0, server.output()


def test_a_killed_server_restarted_with_another_n_keeps_what_its_workers_acknowledged(tmp_path):
    # Given 3 workers killed right after acknowledging commits (journals not checkpointed), by killing
    # their supervisor with SIGKILL,
    server = WorkersServer(tmp_path / "data", 3).start()
    commit_all(server.bootstrap, 1)
    pids = worker_pids(server.process.pid)
    assert len(pids) == 3
    server.kill()  # the supervisor only: its workers die with it (parent-death signal)
    wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids.values()), 10, "workers gone")

    # when the data dir is started with 2 workers, every acknowledged commit is there.
    server = server.restarted(2).start()
    try:
        assert_offsets(server.bootstrap, 1)
        commit_all(server.bootstrap_of(1), 2)
    finally:
        server.kill()
    # And again after a SIGKILL with a single process.
    server = server.restarted(1).start()
    try:
        assert_offsets(server.bootstrap, 2)
    finally:
        assert server.stop() == 0, server.output()



def test_a_stable_groups_members_and_assignment_survive_a_change_of_n(tmp_path):
    import asyncio

    from workers_harness import group_on_worker

    from cohort.client.admin import Admin, NewTopic
    from cohort.client.membership import GroupMember

    server = WorkersServer(tmp_path / "data", 3).start()
    group = group_on_worker("stable", 2, 3)  # on worker 2 of 3; on worker 0 or 1 of 2

    async def form() -> None:
        async with Admin(server.bootstrap_of(1)) as admin:
            await admin.create_topics([NewTopic("st", 2)])
        member = GroupMember(server.bootstrap_of(0), group, ["st"], group_instance_id="static-1",
                             client_id="keeper", session_timeout_ms=60000, heartbeat_interval_ms=500)
        await member.start(timeout=30)
        await member.commit({("st", 0): 5, ("st", 1): 6})
        await member.close()  # a static member keeps its place in the group (no LeaveGroup)

    asyncio.run(form())
    assert server.stop() == 0, server.output()

    # When the data dir restarts with 2 workers, the group is Stable with its static member and assignment.
    server = server.restarted(2).start()

    async def describe():
        async with Admin(server.bootstrap_of(1)) as admin:
            return await admin.describe_group(group), await admin.fetch_offsets(group)

    try:
        description, offsets = asyncio.run(describe())
        assert description.state == "Stable" and description.protocol_type == "consumer"
        [member] = description.members
        assert (member.group_instance_id, member.client_id) == ("static-1", "keeper")
        assert sorted(member.assignment) == [("st", 0), ("st", 1)]
        assert {tp: om.offset for tp, om in offsets.items()} == {("st", 0): 5, ("st", 1): 6}
    finally:
        assert server.stop() == 0, server.output()
