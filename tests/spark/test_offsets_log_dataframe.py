"""`spark.read.format("cohort-log")` returns exactly the records a server run wrote."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cohort.client.admin import NewTopic
from cohort.client.blocking import BlockingAdmin
from kafka_python_members import join_kafka_python_consumer
from cohort.coordinator.log import list_segments


def dump_records(data_dir) -> list[tuple]:
    """`cohort log dump` (the storage owner's tool) as comparable tuples."""
    out = subprocess.run(
        [sys.executable, "-m", "cohort.coordinator.cli.main", "log", "dump", "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        row = json.loads(line)
        rec = row["record"]
        is_topic = row["type"] == "topic"
        rows.append((
            row["log_partition"], row["log_offset"], row["type"], row["tombstone"], rec.get("group"),
            rec.get("name") if is_topic else rec.get("topic"),
            None if is_topic else rec.get("partition"),
            rec.get("end_offset") if row["type"] == "end-offset" else rec.get("offset"), rec.get("metadata"),
            rec.get("epoch_after") if row["type"] == "journal" else rec.get("generation"),  # a journal entry's generation after
            rec.get("partitions") if is_topic and not row["tombstone"] else None,
        ))
    return sorted(rows, key=lambda r: (r[0], r[1]))


def dataframe_records(log) -> list[tuple]:
    return [
        (r.log_partition, r.log_offset, r.record_type, r.is_tombstone, r.group, r.topic, r.partition,
         r.committed_offset, r.metadata, r.generation, r.topic_partitions)
        for r in log.orderBy("log_partition", "log_offset").collect()
    ]


def test_log_reader_returns_exactly_the_records_of_a_server_run(spark, cohort_server):
    from offsets_log_report import commit_rate, last_commits, regressions

    # Given a server run with commits, a regression, deleted offsets, a deleted group and a real consumer group...
    with BlockingAdmin(cohort_server.bootstrap, api_timeout_ms=10000) as admin:
        admin.commit_offsets("log-g1", {("t", 0): (5, "first"), ("t", 1): 7})
        admin.commit_offsets("log-g1", {("t", 0): 9})
        admin.commit_offsets("log-g1", {("t", 0): 3})  # moved backwards (an operator reset)
        admin.commit_offsets("log-g2", {("u", 0): 1})
        admin.delete_offsets("log-g1", [("t", 1)])
        assert admin.delete_groups(["log-g2"]) == {"log-g2": None}
        admin.create_topics([NewTopic("log-ends", 1)])
        admin.report_end_offsets({("log-ends", 0): 12})  # a source's reported end offset
    join_kafka_python_consumer(cohort_server.bootstrap, "log-members", "members-topic").close()

    # ...when Spark reads the data dir while the server still runs...
    log = spark.read.format("cohort-log").load(str(cohort_server.data_dir)).cache()  # one read, several reports
    rows = dataframe_records(log)

    # ...then it holds exactly what `cohort log dump` shows, tombstones included, one partition per segment.
    assert rows == dump_records(cohort_server.data_dir)
    segments = [path for _, path in list_segments(cohort_server.data_dir) if path.stat().st_size > 0]
    assert log.rdd.getNumPartitions() == len(segments)
    offset_tombstones = {(r[4], r[5], r[6]) for r in rows if r[2] == "offset-commit" and r[3]}
    assert {("log-g1", "t", 1), ("log-g2", "u", 0)} <= offset_tombstones
    assert any(r[2] == "group-metadata" and r[4] == "log-members" and not r[3] for r in rows)
    assert [(r[5], r[6], r[7]) for r in rows if r[2] == "end-offset"] == [("log-ends", 0, 12)]
    assert [r[7] for r in rows if r[2] == "offset-commit" and r[4:7] == ("log-g1", "t", 0)] == [5, 9, 3]

    # The README's report finds the regression and counts the commits.
    found = [(r.group, r.topic, r.partition, r.previous_offset, r.new_offset) for r in regressions(log).collect()]
    assert found == [("log-g1", "t", 0, 9, 3)]
    rates: dict[str, int] = {}
    for r in commit_rate(log, "1 hour").collect():  # the run may straddle an hour boundary
        rates[r.group] = rates.get(r.group, 0) + r.commits
    assert rates["log-g1"] == 4 and rates["log-g2"] == 1
    assert {r.group for r in last_commits(log).collect()} >= {"log-g1", "log-g2"}


def test_log_reader_refuses_a_directory_that_is_not_a_data_dir(spark, tmp_path):
    with pytest.raises(Exception, match="holds no __consumer_offsets-N directories"):
        spark.read.format("cohort-log").load(str(tmp_path)).collect()


def test_log_reader_of_a_log_without_records_is_empty(spark, tmp_path):
    (tmp_path / "__consumer_offsets-0").mkdir()
    (tmp_path / "__consumer_offsets-0" / f"{0:020d}.log").write_bytes(b"")
    assert spark.read.format("cohort-log").load(str(tmp_path)).count() == 0
