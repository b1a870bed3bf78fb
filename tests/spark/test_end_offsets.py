"""The listener's reading of source offsets, without Spark."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.client.spark.end_offsets import NotKafkaShaped, forward_only, parse_kafka_offsets
from cohort.client.topic_partition import TopicPartition


def test_kafka_end_offset_json_becomes_topic_partitions():
    text = '{"t1": {"0": 5, "1": 7}, "t2": {"3": 0}}'
    assert parse_kafka_offsets(text) == {
        TopicPartition("t1", 0): 5, TopicPartition("t1", 1): 7, TopicPartition("t2", 3): 0,
    }


@pytest.mark.parametrize("start", [None, "None", "null", "", "  "])
def test_first_batch_start_offset_means_no_offset(start):
    assert parse_kafka_offsets(start) is None


def test_already_parsed_offsets_are_accepted():
    assert parse_kafka_offsets({"t": {"2": 9}}) == {TopicPartition("t", 2): 9}


def test_kafka_sentinels_are_not_committed():
    assert parse_kafka_offsets('{"t": {"0": -1, "1": -2, "2": 4}}') == {TopicPartition("t", 2): 4}


@pytest.mark.parametrize("offset", ['{"logOffset": 3}', "17", '"abc"', "{not json", "[]", "{}",
                                    '{"t": {"x": 1}}', '{"t": {"0": "1"}}', '{"t": {"0": 1.5}}',
                                    '{"t": {"-1": 1}}', '{"t": {"0": true}}'])
def test_other_sources_are_not_kafka_shaped(offset):
    with pytest.raises(NotKafkaShaped):
        parse_kafka_offsets(offset)


@given(st.dictionaries(st.text(min_size=1, max_size=5),
                       st.dictionaries(st.integers(0, 99).map(str), st.integers(0, 2**62), min_size=1),
                       min_size=1))
@settings(max_examples=60, deadline=None)
def test_parse_round_trips_spark_json(offsets):
    parsed = parse_kafka_offsets(json.dumps(offsets))
    assert parsed == {TopicPartition(t, int(p)): o for t, ps in offsets.items() for p, o in ps.items()}


def test_forward_only_keeps_partitions_that_move_forward():
    a, b, c = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
    assert forward_only({a: 5, b: 5, c: 5}, {a: 4, b: 5, c: 9}) == {a: 5}
