"""/metrics with groups whose ids are long or private: bounded label values, a stable hash suffix, and a
setting that names no group at all. A real `cohort serve`, offsets committed over a real socket."""
from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cohort_process import CohortServer
from server_harness import RawClient

from cohort.coordinator.metrics import MAX_GROUP_LABEL_CHARS, CoordinatorMetrics, group_label
from cohort.protocol.messages import OffsetCommitRequest

pytestmark = pytest.mark.timeout(120)


def commit(port: int, group: str) -> None:
    client = RawClient(port)
    try:
        topic = OffsetCommitRequest.OffsetCommitRequestTopic
        partition = topic.OffsetCommitRequestPartition(partition_index=0, committed_offset=7, committed_metadata="")
        response = client.request(OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                                      topics=[topic(name="orders", partitions=[partition])]), 2)
        assert response.topics[0].partitions[0].error_code == 0
    finally:
        client.close()


def group_values(text: str) -> set[str]:
    return {sample.labels["group"] for family in text_string_to_metric_families(text) for sample in family.samples
            if "group" in sample.labels}


def test_long_group_ids_are_cut_to_a_bounded_label_with_a_stable_hash(tmp_path):
    server = CohortServer(tmp_path / "data").start()
    try:
        short, long_a, long_b = "billing", "x" * 20_000 + "a", "x" * 20_000 + "b"  # same start, different ids
        for group in (short, long_a, long_b):
            commit(server.port, group)
        first = server.scrape()
        labels = group_values(first)
        assert short in labels
        assert all(len(label) <= MAX_GROUP_LABEL_CHARS for label in labels)
        assert group_label(long_a) in labels and group_label(long_b) in labels and group_label(long_a) != group_label(long_b)
        assert "x" * MAX_GROUP_LABEL_CHARS not in first  # the ids themselves are not in the scrape
        assert group_values(server.scrape()) == labels  # stable from scrape to scrape
    finally:
        server.stop()


def test_group_ids_can_be_left_out_of_metrics_entirely(tmp_path):
    server = CohortServer(tmp_path / "data", "--metrics.group.id.labels.enable", "false").start()
    try:
        for group in ("tenant-a-payments", "tenant-b-secret-project"):
            commit(server.port, group)
        text = server.scrape()
        assert "tenant-" not in text and not group_values(text)
        counts = {sample.labels["status"]: sample.value for family in text_string_to_metric_families(text)
                  for sample in family.samples if sample.name == "cohort_group_health_groups"}
        assert sum(counts.values()) == 2
    finally:
        server.stop()


def test_the_same_id_always_gets_the_same_label_and_short_ids_are_kept_as_they_are():
    long_id = "g" * 500
    assert group_label(long_id) == group_label("g" * 500) and len(group_label(long_id)) == MAX_GROUP_LABEL_CHARS
    assert group_label("g" * MAX_GROUP_LABEL_CHARS) == "g" * MAX_GROUP_LABEL_CHARS


async def test_scrapes_during_a_build_share_it_and_a_later_one_sees_new_events():
    metrics = CoordinatorMetrics(process_metrics=False)
    reads = []
    metrics.watch_groups(lambda: reads.append(1) or {"Stable": 1}, lambda: 3)
    first, second = await asyncio.gather(metrics.scrape(), metrics.scrape())
    assert first == second and b"cohort_group_members 3.0" in first
    assert len(reads) == 1  # one collection served both scrapes
    metrics.member_expired()
    assert b"cohort_member_expirations_total 1.0" in await metrics.scrape() and len(reads) == 2
