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

