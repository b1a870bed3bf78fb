"""The console's group list with many groups: one bounded, paginated answer, built from a few bounded
GroupOverview pages per broker instead of two coordinator requests per group (security issue, item 4)."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from cohort.client.admin import Admin
from cohort.client.topic_partition import TopicPartition
from bounded_wait import wait_until
from cohort_process import metric_value
from console_http import ConsoleServer, create_topic, report_ends

pytestmark = pytest.mark.timeout(240)

GROUPS = 1200


def make_groups(bootstrap: str, count: int) -> None:
    """`count` groups team-0000… each with offsets on `orders` (group i commits 10 * i on orders-0, 5 on orders-1)."""
    async def run() -> None:
        admin = Admin([bootstrap])
        try:
            for first in range(0, count, 100):
                await asyncio.gather(*(admin.alter_offsets(f"team-{i:04d}", {
                    TopicPartition("orders", 0): (10 * i, ""), TopicPartition("orders", 1): (5, "")})
                    for i in range(first, min(count, first + 100))))
        finally:
            await admin.close()

    asyncio.run(run())


def requests_by_api(server: ConsoleServer) -> dict[str, float]:
    exposition = server.scrape()
    return {api: metric_value(exposition, "cohort_requests_total", api=api)
            for api in ("GroupOverview", "DescribeGroups", "ConsumerGroupDescribe", "GroupReport", "ListGroups",
                        "FindCoordinator")}


def test_a_list_of_many_groups_is_one_bounded_page_from_a_few_coordinator_requests(tmp_path):
    server = ConsoleServer(tmp_path / "data").start()
    try:
        create_topic(server.bootstrap, "orders", 2)
        make_groups(server.bootstrap, GROUPS)

        before = requests_by_api(server)
        status, page, headers = server.api("/api/groups?limit=50")
        after = requests_by_api(server)
        assert status == 200
        assert page["total"] == GROUPS and page["groups_known"] == GROUPS
        assert [g["group_id"] for g in page["groups"]] == [f"team-{i:04d}" for i in range(50)]
        assert int(headers["Content-Length"]) < 20_000  # 50 rows, not 1 200
        spent = {api: after[api] - before[api] for api in after}
        # GroupOverview pages of at most 500 groups (fewer when a page runs out of its time budget) ...
        assert 3 <= spent["GroupOverview"] <= 40, spent
        # ... and never a request per group
        assert spent["DescribeGroups"] == spent["ConsumerGroupDescribe"] == spent["GroupReport"] == 0, spent

        status, page, _ = server.api("/api/groups?limit=50&offset=1150")
        assert [g["group_id"] for g in page["groups"]] == [f"team-{i:04d}" for i in range(1150, 1200)]
        status, page, _ = server.api("/api/groups?limit=100000")
        assert len(page["groups"]) == 500  # a page is bounded whatever is asked

        status, page, _ = server.api("/api/groups?search=TEAM-011&sort=lag&order=desc")
        # no source reported where orders ends: every lag is unknown (never 0)
        assert [g["group_id"] for g in page["groups"]] == [f"team-{i:04d}" for i in range(110, 120)]
        assert [g["lag"] for g in page["groups"]] == [None] * 10
        # the lag column, against the reported ends: group i is 10 * (GROUPS - 1 - i) behind on orders-0,
        # all are even on orders-1
        reported_ms = int(time.time() * 1000)
        report_ends(server.bootstrap, {("orders", 0): 10 * (GROUPS - 1), ("orders", 1): 5})
        # the list is a snapshot shared for up to 5 s: the next one sees the reported ends
        page = wait_until(lambda: (lambda p: p["taken_ms"] > reported_ms and p)(
            server.api("/api/groups?search=TEAM-011&sort=lag&order=desc")[1]), 15, "a snapshot taken after the report")
        assert [g["group_id"] for g in page["groups"]] == [f"team-{i:04d}" for i in range(110, 120)]
        assert [g["lag"] for g in page["groups"]] == [10 * (GROUPS - 1 - i) for i in range(110, 120)]
        status, page, _ = server.api("/api/groups?sort=nonsense")
        assert status == 400 and "sort must be one of" in page["message"]
    finally:
        assert server.stop() == 0


def test_group_overview_pages_cover_every_group_once_and_each_is_bounded(tmp_path):
    server = ConsoleServer(tmp_path / "data").start()
    try:
        make_groups(server.bootstrap, 700)

        async def pages() -> list[dict]:
            admin = Admin([server.bootstrap])
            try:
                return [page async for page in admin.group_overview_pages(None, page_size=100)]
            finally:
                await admin.close()

        answered = asyncio.run(pages())
        assert all(len(p["groups"]) <= 100 for p in answered)
        assert len(json.dumps(answered[0])) < 100 * 1000
        ids = [g["group_id"] for p in answered for g in p["groups"]]
        assert len(ids) == len(set(ids)) == 700
        assert answered[-1]["more"] is False and all(p["more"] for p in answered[:-1])
        row = next(g for p in answered for g in p["groups"] if g["group_id"] == "team-0003")
        # `orders` is not in the topic registry: its end is unknown, and so is the lag (never 0)
        assert row["topics"] == [{"topic": "orders", "partitions": 2, "lag": None}] and row["lag"] is None
        assert row["state"] == "Empty" and row["members"] == 0
    finally:
        assert server.stop() == 0


def test_a_groups_lag_over_time_is_sampled_by_its_coordinator(tmp_path):
    # health (and with it lag) is sampled every group.health.window.min.distance.ms: every 500 ms here
    server = ConsoleServer(tmp_path / "data", "--group.health.window.min.distance.ms", "500").start()
    try:
        create_topic(server.bootstrap, "orders", 1)
        tp = TopicPartition("orders", 0)

        async def commit(group: str, offset: int) -> None:
            admin = Admin([server.bootstrap])
            try:
                await admin.alter_offsets(group, {tp: (offset, "")})
            finally:
                await admin.close()

        asyncio.run(commit("laggard", 100))
        status, report, _ = server.api("/api/groups/laggard/lag")  # no end reported yet: the lag is unknown
        assert status == 200 and report["total_lag"] is None and report["partitions_without_end"] == 1
        assert [(p["committed"], p["end_offset"], p["lag"]) for p in report["partitions"]] == [(100, None, None)]
        reported_from = int(time.time() * 1000)
        report_ends(server.bootstrap, {("orders", 0): 900})
        reported_to = int(time.time() * 1000)
        wait_until(lambda: 800 in [lag for _, lag in server.api("/api/groups/laggard/lag")[1]["samples"]], 30,
                   "a sample of the laggard's lag (900 - 100)")
        asyncio.run(commit("laggard", 850))
        wait_until(lambda: server.api("/api/groups/laggard/lag")[1]["samples"][-1][1] == 50, 30,
                   "a later sample after it caught up")
        status, report, _ = server.api("/api/groups/laggard/lag")
        lags = [lag for _, lag in report["samples"]]
        assert lags.index(800) < lags.index(50)
        assert report["group"] == "laggard" and report["total_lag"] == 50 and report["partitions_without_end"] == 0
        [partition] = report["partitions"]
        assert reported_from <= partition.pop("end_reported_ms") <= reported_to
        assert partition == {"topic": "orders", "partition": 0, "committed": 850, "end_offset": 900, "lag": 50}
        status, detail, _ = server.api("/api/groups/laggard")
        assert detail["lag"] == 50 and detail["offsets"][0]["log_end_offset"] == 900
        times = [ms for ms, _ in report["samples"]]
        assert times == sorted(times)
        status, later, _ = server.api(f"/api/groups/laggard/lag?since_ms={times[-1]}")
        assert [ms for ms, _ in later["samples"]][0] >= times[-1]
    finally:
        assert server.stop() == 0
