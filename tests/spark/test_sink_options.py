"""The sink's option and schema checks, without a SparkSession: one clear message per mistake."""
from __future__ import annotations

import json

import pytest
from pyspark.sql.types import IntegerType, LongType, ShortType, StringType, StructField, StructType

from cohort.client.spark.sink import CohortSinkError, SinkConfigError, SinkOptions

SCHEMA = StructType([
    StructField("value", StringType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
])
GOOD = {"bootstrap": "127.0.0.1:9092", "group": "g", "checkpointlocation": "/tmp/ckpt"}


def test_defaults_and_column_positions():
    options = SinkOptions.parse(GOOD, SCHEMA)
    assert (options.topic_index, options.partition_index, options.offset_index) == (1, 2, 3)
    assert (options.commit_timeout_ms, options.retries, options.allow_query_takeover) == (10000, 3, False)


def test_option_names_are_case_insensitive_and_columns_configurable():
    schema = StructType([StructField("t", StringType()), StructField("p", ShortType()), StructField("o", IntegerType())])
    options = SinkOptions.parse(
        {"BOOTSTRAP": "h1:1, h2:2", "Group": " g ", "topicColumn": "t", "PARTITIONCOLUMN": "p", "offsetcolumn": "o",
         "commitTimeoutMs": "250", "retries": "0", "allowQueryTakeover": "TRUE", "queryId": "q-1"},
        schema,
    )
    assert options.bootstrap == "h1:1,h2:2" and options.group == "g"
    assert (options.topic_index, options.partition_index, options.offset_index) == (0, 1, 2)
    assert (options.commit_timeout_ms, options.retries, options.allow_query_takeover) == (250, 0, True)
    assert options.resolve_query_id() == "q-1"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bootstrap": None}, "missing required option(s) bootstrap"),
        ({"bootstrap": None, "group": None}, "missing required option(s) bootstrap, group"),
        ({"group": "  "}, "missing required option(s) group"),
        ({"bootstrap": "localhost"}, "'localhost' is not host:port"),
        ({"bootstrap": "h:99999"}, "is not host:port"),
        ({"offsetColumn": "position"}, "no column 'position' (option offsetColumn); its columns are value, topic"),
        ({"topicColumn": "partition"}, "column 'partition' has type int, expected string"),
        ({"partitionColumn": "value"}, "column 'value' has type string, expected an integer type"),
        ({"commitTimeoutMs": "0"}, "commitTimeoutMs=0 must be >= 1"),
        ({"retries": "-1"}, "retries=-1 must be >= 0"),
        ({"retries": "many"}, "retries='many' must be an integer"),
        ({"allowQueryTakeover": "perhaps"}, "allowQueryTakeover='perhaps' must be true or false"),
        ({"checkpointlocation": None}, "set option checkpointLocation"),
        ({"checkpointlocation": "s3a://bucket/ckpt"}, "is not on the local filesystem"),
    ],
)
def test_each_mistake_has_one_clear_message(change, message):
    options = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(SinkConfigError) as failure:
        SinkOptions.parse(options, SCHEMA)
    assert message in str(failure.value)
    assert str(failure.value).startswith("cohort sink: ")


def test_query_id_comes_from_the_checkpoint_metadata(tmp_path):
    (tmp_path / "metadata").write_text(json.dumps({"id": "8c1b-query"}) + "\n")
    assert SinkOptions.parse({**GOOD, "checkpointLocation": f"file:{tmp_path}"}, SCHEMA).resolve_query_id() == "8c1b-query"
    assert SinkOptions.parse({**GOOD, "checkpointLocation": str(tmp_path)}, SCHEMA).resolve_query_id() == "8c1b-query"


def test_unreadable_checkpoint_metadata_is_a_clear_error(tmp_path):
    options = SinkOptions.parse({**GOOD, "checkpointLocation": str(tmp_path)}, SCHEMA)
    with pytest.raises(CohortSinkError, match="cannot read the query id from .*metadata.*set option queryId"):
        options.resolve_query_id()


def test_check_sink_options_fails_in_the_callers_process_with_one_line():
    """Spark checks a data source's options only after .start() returned (hardening, item 19)."""
    from cohort.client.spark import check_sink_options

    import socket

    with socket.create_server(("127.0.0.1", 0)) as listening:  # a coordinator's port that accepts
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        check_sink_options(SCHEMA, {"bootstrap": address, "group": "g", "checkpointLocation": "/tmp/c"})
    with pytest.raises(SinkConfigError) as gone:  # nobody listens there any more
        check_sink_options(SCHEMA, {"bootstrap": address, "group": "g", "checkpointLocation": "/tmp/c"})
    assert str(gone.value).startswith(f"cohort sink: no coordinator answers at {address} (")
    with pytest.raises(SinkConfigError) as failure:
        check_sink_options(SCHEMA, {"bootstrap": "127.0.0.1:9092", "checkpointLocation": "/tmp/c"})
    assert str(failure.value).splitlines() == [
        'cohort sink: missing required option(s) group (e.g. .option("bootstrap", "127.0.0.1:9092")'
        '.option("group", "my-query"))']


def test_an_abort_after_a_failed_commit_says_the_commit_failed_and_where(caplog):
    """Hardening, item 20: with the coordinator unreachable, abort() used to say "0 of 2 tasks failed"."""
    from cohort.client.spark.sink import CohortStreamWriter, TaskNextOffsets
    from cohort.client.topic_partition import TopicPartition

    options = SinkOptions.parse({**GOOD, "bootstrap": "127.0.0.1:1", "queryId": "q", "commitTimeoutMs": "300",
                                 "retries": "0"}, SCHEMA)
    writer = CohortStreamWriter(options)
    messages = [TaskNextOffsets({TopicPartition("t", 0): 5}, 5), TaskNextOffsets({TopicPartition("t", 1): 3}, 3)]
    with pytest.raises(CohortSinkError):
        writer.commit(messages, 7)
    with caplog.at_level("WARNING", logger="cohort.spark.sink"):
        writer.abort(messages, 7)
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("cohort sink: batch 7 aborted: its commit to group 'g' at 127.0.0.1:1 failed (")
    assert "tasks failed" not in line


def test_a_replayed_batch_is_one_warning_per_restart(cohort_server, caplog):
    from cohort.client.spark.sink import commit_batch
    from cohort.client.topic_partition import TopicPartition

    options = SinkOptions.parse({**GOOD, "bootstrap": cohort_server.bootstrap, "group": "replays", "queryId": "q"},
                                SCHEMA)
    tp = TopicPartition("t", 0)
    with caplog.at_level("INFO", logger="cohort.spark.sink"):
        commit_batch(options, 1, {tp: 10})
        commit_batch(options, 1, {tp: 10})  # the query restarted and re-ran batch 1
        commit_batch(options, 1, {tp: 10})
        commit_batch(options, 2, {tp: 20})
        commit_batch(options, 2, {tp: 20})  # another restart
    replays = [(r.levelname, r.getMessage()) for r in caplog.records if "a replay" in r.getMessage()]
    assert [level for level, _ in replays] == ["WARNING", "INFO", "WARNING"]
    assert replays[0][1] == ("cohort sink: batch 1 already committed to group 'replays' (stored batch 1): a replay "
                             "after a restart, skipped")
