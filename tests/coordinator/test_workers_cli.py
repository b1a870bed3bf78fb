"""The admin CLI against `cohort serve --workers 3`: commands that span groups reach every worker.

Groups live on different workers; the CLI bootstraps from a worker that keeps neither the topic
registry nor most of the groups. Log-end offsets (what reset-offsets clamps to) come from commits
held by other workers than the one leading the topic partitions.
"""
from __future__ import annotations

import json

import pytest
from bounded_wait import wait_until
from cohort_process import run_cohort
from workers_harness import WorkersServer, group_on_worker, worker_of

from cohort.client.blocking import BlockingAdmin

pytestmark = pytest.mark.timeout(240)
WORKERS = 3


def cli(bootstrap: str, *args: str):
    result = run_cohort(*args, "--bootstrap-server", bootstrap, "--timeout", "20000")
    return result


def test_groups_list_describe_reset_and_delete_span_every_worker(tmp_path):
    server = WorkersServer(tmp_path / "data", WORKERS).start()
    try:
        bootstrap = server.bootstrap_of(2)
        groups = {k: group_on_worker("cli-wk", k, WORKERS) for k in range(WORKERS)}
        high = group_on_worker("cli-wk-high", 1, WORKERS)  # sets the log end of topic wk-t to 50

        created = cli(bootstrap, "topics", "create", "--topic", "wk-t", "--partitions", "2")
        assert created.returncode == 0, created.stderr
        for k in range(WORKERS):  # every worker tells the same topic list
            listed = cli(server.bootstrap_of(k), "topics", "list")
            assert listed.returncode == 0 and listed.stdout.split() == ["wk-t"], listed

        with BlockingAdmin(server.bootstrap_of(1)) as admin:
            admin.commit_offsets(high, {("wk-t", 0): 50, ("wk-t", 1): 50})
            for k, group in groups.items():
                admin.commit_offsets(group, {("wk-t", 0): 10 + k, ("wk-t", 1): 20 + k})

        listed = cli(bootstrap, "groups", "list", "--output", "json")
        assert listed.returncode == 0, listed.stderr
        assert {g["group"] for g in json.loads(listed.stdout)} == {*groups.values(), high}

        described = cli(bootstrap, "groups", "describe", "--all-groups", "--state", "--output", "json")
        assert described.returncode == 0, described.stderr
        rows = {row["group"]: row for row in json.loads(described.stdout)}
        assert set(rows) == {*groups.values(), high}
        for group, row in rows.items():  # each one described by its own worker
            owner = worker_of(group, WORKERS)
            assert row["coordinator"] == f"127.0.0.1:{server.ports[owner]} ({owner})", row
            assert row["state"] == "Empty"

        # LOG-END-OFFSET is the source's reported end (kept by the registry's worker), unknown without one
        reported = cli(bootstrap, "topics", "end-offsets", "set", "--topic", "wk-t", "--partition", "0", "--offset", "60")
        assert reported.returncode == 0, reported.stderr
        offsets = cli(bootstrap, "groups", "describe", "--group", groups[2], "--offsets", "--output", "json")
        assert offsets.returncode == 0, offsets.stderr
        assert sorted((r["partition"], r["current_offset"], r["log_end_offset"], r["lag"])
                      for r in json.loads(offsets.stdout)) == [(0, 12, 60, 48), (1, 22, None, None)]

        def lag_known_on_every_worker():  # each group's worker mirrors the registry's reported ends
            for k, group in groups.items():
                health = cli(bootstrap, "groups", "describe", "--group", group, "--health", "--output", "json")
                [report] = json.loads(health.stdout)
                if [(p["partition"], p["lag"]) for p in report["partitions"]] != [(0, 48 - k + 2), (1, None)]:
                    return False
            return True
        wait_until(lag_known_on_every_worker, 30, "every worker's groups to see the reported end offset")

        reset = cli(bootstrap, "groups", "reset-offsets", "--all-groups", "--topic", "wk-t", "--to-latest", "--execute")
        assert reset.returncode == 0, reset.stderr
        with BlockingAdmin(server.bootstrap_of(0)) as admin:
            for group in groups.values():
                assert {tp: om.offset for tp, om in admin.fetch_offsets(group).items()} == {
                    ("wk-t", 0): 60, ("wk-t", 1): 50}, group  # latest: the reported end, else the highest commit

        deleted = cli(bootstrap, "groups", "delete", "--all-groups")
        assert deleted.returncode == 0, deleted.stderr
        after = cli(server.bootstrap_of(0), "groups", "list", "--output", "json")
        assert after.returncode == 0 and json.loads(after.stdout) == [], after
    finally:
        assert server.stop() == 0, server.output()


def test_a_topic_deleted_and_created_again_starts_from_offset_0_on_every_worker(tmp_path):
    import asyncio

    from cohort.client.admin import Admin, NewTopic

    server = WorkersServer(tmp_path / "data", WORKERS).start()
    group = group_on_worker("hw", 2, WORKERS)

    async def scenario() -> tuple[int, int]:
        async with Admin(server.bootstrap_of(1)) as admin:
            await admin.create_topics([NewTopic("again", 1)])
            await admin.alter_offsets(group, {("again", 0): 70})
            before = (await admin.list_partition_offsets({("again", 0): -1}))[("again", 0)].offset
            await admin.delete_topics(["again"])
            await admin.create_topics([NewTopic("again", 1)])
            after = (await admin.list_partition_offsets({("again", 0): -1}))[("again", 0)].offset
            return before, after

    try:
        # The log end of a topic is the highest commit any worker holds, until the topic is deleted.
        assert asyncio.run(scenario()) == (70, 0)
    finally:
        assert server.stop() == 0, server.output()


def test_fetch_reports_the_log_end_committed_on_another_worker(tmp_path):
    import time

    from kafka import KafkaConsumer, TopicPartition

    server = WorkersServer(tmp_path / "data", WORKERS).start()
    tp = TopicPartition("fetched", 0)
    try:
        assert cli(server.bootstrap_of(2), "topics", "create", "--topic", "fetched").returncode == 0
        with BlockingAdmin(server.bootstrap_of(2)) as admin:
            admin.commit_offsets(group_on_worker("fetch", 2, WORKERS), {("fetched", 0): 33})
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap_of(1), enable_auto_commit=False,
                                 fetch_max_wait_ms=100, client_id="fetcher")
        try:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            deadline = time.monotonic() + 20
            while consumer.highwater(tp) != 33 and time.monotonic() < deadline:
                consumer.poll(timeout_ms=200)
            # The leader of the topic (worker 0) reports the commit worker 2 holds as the log end.
            assert consumer.highwater(tp) == 33
        finally:
            consumer.close()
    finally:
        assert server.stop() == 0, server.output()
