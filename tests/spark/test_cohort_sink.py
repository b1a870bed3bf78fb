"""The `cohort` streaming sink against a real `cohort serve`, read back by kafka-python.

Every query is bounded (trigger availableNow over the bounded `kafka-shaped`
example source) and has its own checkpoint, group and coordinator; no sleeps.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from cohort.client.spark.commit_plan import CommitMarker
from bounded_wait import wait_until
from kafka_python_members import join_kafka_python_consumer

pytestmark = pytest.mark.usefixtures("stop_queries")

TOPICS = "orders:2,payments:1"
ALL_PARTITIONS = [("orders", 0), ("orders", 1), ("payments", 0)]


def start_query(spark, server, checkpoint: Path, group: str, *, end_offset=10, rows_per_batch=4,
                transform=None, **sink_options):
    df = (
        spark.readStream.format("kafka-shaped")
        .option("topics", TOPICS)
        .option("rowsPerBatch", rows_per_batch)
        .option("endOffset", end_offset)
        .load()
    )
    if transform is not None:
        df = transform(df)
    writer = (
        df.writeStream.format("cohort")
        .option("checkpointLocation", str(checkpoint))
        .option("bootstrap", server.bootstrap if server else "127.0.0.1:1")
        .option("group", group)
    )
    for key, value in sink_options.items():
        writer = writer.option(key, value)
    return writer.trigger(availableNow=True).start()


def run_to_end(spark, server, checkpoint, group, **kwargs):
    query = start_query(spark, server, checkpoint, group, **kwargs)
    assert query.awaitTermination(120), "query did not finish"
    assert query.exception() is None
    return query


def committed(admin, group) -> dict[tuple[str, int], tuple[int, CommitMarker | None]]:
    offsets = admin.list_group_offsets(group)[group]
    return {(tp.topic, tp.partition): (om.offset, CommitMarker.decode(om.metadata)) for tp, om in offsets.items()}


def commit_records(data_dir: Path, group: str) -> list[tuple[str, int, int, CommitMarker | None]]:
    """The group's offset-commit records in the server's log, in log order per log partition."""
    from cohort.coordinator.log.segments import list_segments, read_segment
    from cohort.coordinator.records.types import OffsetCommitRecord, decode_record

    out = []
    for _, segment in list_segments(data_dir):
        for _, key, value in read_segment(segment):
            record = decode_record(key, value)
            if isinstance(record, OffsetCommitRecord) and record.group == group:
                out.append((record.topic, record.partition, record.offset, CommitMarker.decode(record.metadata)))
    return out


def commit_records_through(data_dir: Path, group: str, batch_id: int) -> list[tuple[str, int, int, CommitMarker | None]]:
    """`commit_records` once the log shows batch `batch_id`'s commit of every partition (the server writes
    its segments behind the commit journal, at most 100 ms later; one group's records stay in order)."""
    def through():
        records = commit_records(data_dir, group)
        shown = {(t, p) for t, p, _, marker in records if marker is not None and marker.batch_id == batch_id}
        return records if shown == set(ALL_PARTITIONS) else None
    return wait_until(through, 10, f"the log showing batch {batch_id} of {group}")


def failure_of(spark, server, checkpoint, group, **kwargs) -> str:
    """The message a misconfigured or failing query ends with (at start or in a batch)."""
    try:
        query = start_query(spark, server, checkpoint, group, **kwargs)
        query.awaitTermination(120)
    except Exception as exc:  # refused at start()
        return str(exc)
    exc = query.exception()
    assert exc is not None, "the query was expected to fail"
    return str(exc)


def test_each_batch_commits_max_plus_one_per_partition(spark, cohort_server, admin, tmp_path):
    # Given rows spread over three tasks per batch (so tasks see the same partitions),
    # when a query writes 3 batches (offsets [0,4), [4,8), [8,10) per partition)...
    query = run_to_end(spark, cohort_server, tmp_path / "ckpt", "sink-g1",
                       transform=lambda df: df.repartition(3))

    # ...then kafka-python reads max(offset)+1 for every partition, stamped with the last batch,
    expected_marker = CommitMarker(str(query.id), 2)
    assert committed(admin, "sink-g1") == {tp: (10, expected_marker) for tp in ALL_PARTITIONS}
    # and the log shows one commit per partition per batch, each exactly that batch's max+1.
    records = commit_records_through(cohort_server.data_dir, "sink-g1", 2)
    by_partition = {tp: [(offset, marker.batch_id) for t, p, offset, marker in records if (t, p) == tp]
                    for tp in ALL_PARTITIONS}
    assert by_partition == {tp: [(4, 0), (8, 1), (10, 2)] for tp in ALL_PARTITIONS}


def test_replayed_batch_changes_nothing_and_restart_continues(spark, cohort_server, admin, tmp_path):
    checkpoint = tmp_path / "ckpt"
    first = run_to_end(spark, cohort_server, checkpoint, "sink-g2")
    before = committed(admin, "sink-g2")
    records_before = commit_records_through(cohort_server.data_dir, "sink-g2", 2)

    # Crash window: the sink committed batch 2 but Spark never wrote commits/2, so the
    # restarted query replays batch 2 under the same id.
    (checkpoint / "commits" / "2").unlink()
    (checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)  # Hadoop's checksum file beside it
    replay = run_to_end(spark, cohort_server, checkpoint, "sink-g2")
    assert [p["batchId"] for p in replay.recentProgress] == [2]  # Spark did re-run batch 2
    assert committed(admin, "sink-g2") == before

    # A restart with more input continues from the checkpoint: batches 3, 4 (offsets 14, 18).
    run_to_end(spark, cohort_server, checkpoint, "sink-g2", end_offset=18)
    assert committed(admin, "sink-g2") == {tp: (18, CommitMarker(str(first.id), 4)) for tp in ALL_PARTITIONS}
    # In the log, batches 3 and 4 follow batch 2 directly: the replayed batch was not even re-written.
    records = commit_records_through(cohort_server.data_dir, "sink-g2", 4)
    assert records[:len(records_before)] == records_before
    assert sorted((t, p, offset, marker.batch_id) for t, p, offset, marker in records[len(records_before):]) == \
        sorted((t, p, offset, batch) for t, p in ALL_PARTITIONS for offset, batch in [(14, 3), (18, 4)])


def test_failing_task_aborts_the_batch_and_commits_nothing(spark, cohort_server, admin, tmp_path):
    checkpoint = tmp_path / "ckpt"
    # Batch 1 holds offset 6 of orders-1, which this transform nulls: that task fails.
    poison = lambda df: df.withColumn(  # noqa: E731
        "offset",
        F.when((F.col("topic") == "orders") & (F.col("partition") == 1) & (F.col("offset") == 6), F.lit(None))
        .otherwise(F.col("offset")),
    )
    message = failure_of(spark, cohort_server, checkpoint, "sink-g3", transform=poison)
    assert "null" in message

    # Batch 0 stays the last commit, for every partition (the other tasks of batch 1 succeeded).
    after_failure = committed(admin, "sink-g3")
    assert {tp: offset for tp, (offset, _) in after_failure.items()} == {tp: 4 for tp in ALL_PARTITIONS}
    assert {marker.batch_id for _, marker in after_failure.values()} == {0}

    # Without the fault, the restarted query re-runs batch 1 and finishes.
    query = run_to_end(spark, cohort_server, checkpoint, "sink-g3")
    assert committed(admin, "sink-g3") == {tp: (10, CommitMarker(str(query.id), 2)) for tp in ALL_PARTITIONS}


def test_group_with_active_members_is_refused(spark, cohort_server, tmp_path):
    consumer = join_kafka_python_consumer(cohort_server.bootstrap, "busy-group", "orders")
    try:
        message = failure_of(spark, cohort_server, tmp_path / "ckpt", "busy-group")
    finally:
        consumer.close()
    assert "'busy-group'" in message and "active member" in message


def test_another_query_is_refused_unless_take_over_is_allowed(spark, cohort_server, admin, tmp_path):
    # Another query's sink committed to the group up to its batch 9 (orders-0 ahead at 12).
    from cohort.client.blocking import BlockingAdmin

    other = CommitMarker("another-query-id", 9).encode()
    with BlockingAdmin(cohort_server.bootstrap, api_timeout_ms=10000) as ours:
        ours.commit_offsets("shared-group", {("orders", 0): (12, other), ("orders", 1): (3, other)})

    message = failure_of(spark, cohort_server, tmp_path / "b", "shared-group")
    assert "'shared-group'" in message and "another Spark query (another-query-id, up to batch 9)" in message
    assert committed(admin, "shared-group")[("orders", 0)] == (12, CommitMarker("another-query-id", 9))

    # With take-over allowed the new query owns every partition; orders-0 stays ahead (never backwards).
    second = run_to_end(spark, cohort_server, tmp_path / "c", "shared-group", allowQueryTakeover="true")
    mine = CommitMarker(str(second.id), 2)
    assert committed(admin, "shared-group") == {("orders", 0): (12, mine), ("orders", 1): (10, mine),
                                                ("payments", 0): (10, mine)}


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"group": ""}, "missing required option(s) group"),
        ({"transform": lambda df: df.withColumn("partition", F.col("partition").cast("string"))},
         "column 'partition' has type string"),
    ],
    ids=["missing-option", "wrong-type"],
)
def test_misconfiguration_fails_the_query_with_one_clear_message(spark, tmp_path, options, expected):
    # No coordinator at all: these are refused before the sink touches the network
    # (the full list of checks is in test_sink_options.py, without Spark).
    options = dict(options)
    group = options.pop("group", "config-group")
    message = failure_of(spark, None, tmp_path / "ckpt", group, **options)
    assert expected in message


def test_unreachable_coordinator_fails_the_query_in_seconds_with_one_clear_line(spark, cohort_server, tmp_path):
    started = time.monotonic()
    run_to_end(spark, cohort_server, tmp_path / "baseline", "reachable-group")  # what Spark itself costs here
    baseline = time.monotonic() - started
    started = time.monotonic()
    message = failure_of(spark, None, tmp_path / "ckpt", "lonely-group")  # default timeouts and retries
    took = time.monotonic() - started
    line = "cohort sink: no coordinator answers at 127.0.0.1:1 (127.0.0.1:1: Connection refused)"
    assert line in message.splitlines()[0], message[:2000]  # the reason first, not after a Python traceback
    # within seconds of what a whole successful query costs on this machine, not after ~40-70 s of commit
    # attempts (4 attempts of commitTimeoutMs=10 s each, plus connecting)
    assert took < baseline + 10, (took, baseline)


def test_check_sink_options_refuses_a_misconfigured_query_before_it_starts(spark, tmp_path):
    from cohort.client.spark import check_sink_options
    from cohort.client.spark.sink import SinkConfigError

    df = spark.readStream.format("kafka-shaped").option("topics", TOPICS).load()
    bad = df.withColumn("partition", F.col("partition").cast("string"))
    with pytest.raises(SinkConfigError) as failure:
        check_sink_options(bad, {"bootstrap": "127.0.0.1:1", "group": "g", "checkpointLocation": str(tmp_path)})
    assert str(failure.value) == "cohort sink: column 'partition' has type string, expected an integer type (int or bigint)"
    with pytest.raises(SinkConfigError) as unreachable:
        check_sink_options(df, {"bootstrap": "127.0.0.1:1", "group": "g", "checkpointLocation": str(tmp_path)})
    assert str(unreachable.value).startswith("cohort sink: no coordinator answers at 127.0.0.1:1")
    assert not spark.streams.active
