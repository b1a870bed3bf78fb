"""The StreamingQueryListener committer: endOffset of Kafka-shaped sources, never backwards."""
from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from cohort.client.blocking import BlockingAdmin
from cohort.client.spark.commit_plan import CommitMarker
from cohort.client.spark.listener import CohortOffsetCommitter


def offsets_of(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, CommitMarker | None]]:
    with BlockingAdmin(bootstrap, api_timeout_ms=10000) as admin:
        return {(tp.topic, tp.partition): (om.offset, CommitMarker.decode(om.metadata))
                for tp, om in admin.fetch_offsets(group).items()}


def progress_event(query_id: str, batch_id: int, *end_offsets, name: str | None = None):
    """A QueryProgressEvent as the listener sees it (offsets are JSON strings, first start is "None")."""
    sources = [SimpleNamespace(startOffset="None", endOffset=end, description="source") for end in end_offsets]
    return SimpleNamespace(progress=SimpleNamespace(id=query_id, name=name, batchId=batch_id, sources=sources))


def run_kafka_shaped_query(spark, bootstrap: str, topics: str, group: str, tmp_path):
    """Run a Kafka-shaped query (three batches of four rows up to offset 10) to its end with the listener
    committer attached, wait until it handled the last batch's progress, and return the query."""
    listener = CohortOffsetCommitter(bootstrap)
    spark.streams.addListener(listener)
    try:
        query = (
            spark.readStream.format("kafka-shaped")
            .option("topics", topics).option("rowsPerBatch", 4).option("endOffset", 10)
            .option("cohort.group", group)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)
        assert listener.wait_for_batch(str(query.id), 2, timeout=60), "progress of batch 2 never arrived"
    finally:
        spark.streams.removeListener(listener)
    return query


@pytest.mark.usefixtures("stop_queries")
def test_listener_commits_end_offsets_of_a_kafka_shaped_query(spark, cohort_server, admin, tmp_path):
    # Given payments-0 already ahead of what the query will reach (someone committed 50)...
    with BlockingAdmin(cohort_server.bootstrap, api_timeout_ms=10000) as ours:
        ours.commit_offsets("listener-g", {("payments", 0): 50})
    # ...when a query over a Kafka-shaped source names its group in a source option...
    query = run_kafka_shaped_query(spark, cohort_server.bootstrap, "orders:2,payments:1", "listener-g", tmp_path)

    # ...then the group holds every partition's endOffset, but payments-0 did not move backwards.
    committed = {tp: offset for tp, (offset, _) in offsets_of(cohort_server.bootstrap, "listener-g").items()}
    assert committed == {("orders", 0): 10, ("orders", 1): 10, ("payments", 0): 50}
    # kafka-python sees the same, with the query's marker on what the listener committed.
    seen = admin.list_group_offsets("listener-g")["listener-g"]
    marked = {(tp.topic, tp.partition): CommitMarker.decode(om.metadata) for tp, om in seen.items()}
    assert marked[("orders", 0)] == CommitMarker(str(query.id), 2)


def test_listener_maps_query_names_and_ignores_other_sources(cohort_server, caplog):
    listener = CohortOffsetCommitter(cohort_server.bootstrap, {"orders-job": "mapped-g"})
    caplog.set_level(logging.INFO, logger="cohort.spark.listener")

    listener.onQueryProgress(progress_event("q1", 0, '{"orders": {"0": 4}}', "12345", name="orders-job"))
    listener.onQueryProgress(progress_event("q1", 1, '{"orders": {"0": 8}}', "12399", name="orders-job"))
    listener.onQueryProgress(progress_event("q2", 0, '{"orders": {"0": 99}}', name="unmapped-job"))

    assert offsets_of(cohort_server.bootstrap, "mapped-g") == {("orders", 0): (8, CommitMarker("q1", 1))}
    not_kafka = [r for r in caplog.records if "not Kafka-shaped" in r.getMessage()]
    assert len(not_kafka) == 1  # one line per source, not one per batch
    assert any("unmapped-job has no group" in r.getMessage() for r in caplog.records)


def test_listener_never_moves_backwards_on_a_replayed_or_older_end_offset(cohort_server):
    listener = CohortOffsetCommitter(cohort_server.bootstrap, {"job": "forward-g"})
    listener.onQueryProgress(progress_event("q", 5, '{"t": {"0": 20, "1": 20}}', name="job"))
    listener.onQueryProgress(progress_event("q", 6, '{"t": {"0": 15, "1": 25}}', name="job"))

    offsets = offsets_of(cohort_server.bootstrap, "forward-g")
    assert offsets == {("t", 0): (20, CommitMarker("q", 5)), ("t", 1): (25, CommitMarker("q", 6))}


def test_listener_survives_the_coordinator_being_down_and_catches_up(cohort_server, caplog):
    listener = CohortOffsetCommitter(cohort_server.bootstrap, {"job": "outage-g"}, commit_timeout_ms=300, retries=1)
    listener.onQueryProgress(progress_event("q", 0, '{"t": {"0": 3}}', name="job"))

    cohort_server.stop()
    listener.onQueryProgress(progress_event("q", 1, '{"t": {"0": 6}}', name="job"))  # must not raise
    assert any("not committed to group 'outage-g'" in r.getMessage() for r in caplog.records)

    cohort_server.start()  # same port, same data dir
    listener.onQueryProgress(progress_event("q", 2, '{"t": {"0": 9}}', name="job"))
    assert offsets_of(cohort_server.bootstrap, "outage-g") == {("t", 0): (9, CommitMarker("q", 2))}


@pytest.mark.usefixtures("stop_queries")
def test_listener_reports_the_sources_end_offsets_so_lag_is_known(spark, cohort_server, tmp_path):
    from cohort.client.admin import NewTopic
    from cohort_process import run_cohort

    with BlockingAdmin(cohort_server.bootstrap, api_timeout_ms=10000) as ours:
        ours.create_topics([NewTopic("clicks", 2)])
    run_kafka_shaped_query(spark, cohort_server.bootstrap, "clicks:2,not-in-cohort:1", "ends-g", tmp_path)

    with BlockingAdmin(cohort_server.bootstrap, api_timeout_ms=10000) as ours:
        ends = ours.describe_end_offsets(["clicks"])["clicks"]
    assert {p: e.end_offset for p, e in ends.items()} == {0: 10, 1: 10}
    described = run_cohort("groups", "describe", "ends-g", "--offsets", "--output", "json",
                           "--bootstrap-server", cohort_server.bootstrap)
    import json
    rows = {(r["topic"], r["partition"]): (r["current_offset"], r["log_end_offset"], r["lag"])
            for r in json.loads(described.stdout)}
    assert rows[("clicks", 0)] == (10, 10, 0) and rows[("clicks", 1)] == (10, 10, 0)
    assert rows[("not-in-cohort", 0)] == (10, None, None)  # Cohort has no such topic: the end stays unknown


def test_listener_reports_latest_offset_ahead_of_what_the_batch_read(cohort_server, caplog):
    from cohort.client.admin import NewTopic

    with BlockingAdmin(cohort_server.bootstrap, api_timeout_ms=10000) as ours:
        ours.create_topics([NewTopic("behind", 1)])
    listener = CohortOffsetCommitter(cohort_server.bootstrap, {"job": "behind-g"})
    event = progress_event("q", 0, '{"behind": {"0": 20}}', name="job")
    event.progress.sources[0].latestOffset = '{"behind": {"0": 30}}'  # Spark's Kafka source fills this in
    listener.onQueryProgress(event)
    with BlockingAdmin(cohort_server.bootstrap, api_timeout_ms=10000) as ours:
        assert ours.describe_end_offsets(["behind"])["behind"][0].end_offset == 30
        assert ours.fetch_offsets("behind-g")[("behind", 0)].offset == 20
    caplog.set_level(logging.WARNING, logger="cohort.spark.listener")
    for batch in (1, 2):  # a topic Cohort does not know: one log line, not one per batch
        listener.onQueryProgress(progress_event("q", batch, '{"elsewhere": {"0": 5}}', name="job"))
    assert len([r for r in caplog.records if "refused the end offsets of topic elsewhere" in r.getMessage()]) == 1
