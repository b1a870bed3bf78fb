"""The reset planner and CSV plan format on plain data (no server)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.client.cli.offset_reset import (
    LogRange,
    ResetInputError,
    Scenario,
    format_plan_csv,
    parse_datetime_ms,
    parse_duration,
    parse_plan_csv,
    plan_reset,
)
from cohort.client.topic_partition import TopicPartition

topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=12)
plans = st.dictionaries(
    st.builds(TopicPartition, topics, st.integers(0, 500)), st.integers(-2, 10**12), min_size=1, max_size=8
)


@settings(max_examples=60, deadline=None)
@given(groups=st.dictionaries(topics, plans, min_size=1, max_size=3))
def test_export_then_parse_is_the_identity(groups):
    parsed = parse_plan_csv(format_plan_csv(groups))
    if len(groups) == 1:
        assert parsed == {None: next(iter(groups.values()))}
    else:
        assert parsed == groups


@settings(max_examples=100, deadline=None)
@given(
    data=st.data(),
    kind=st.sampled_from(["to-earliest", "to-latest", "to-offset", "shift-by", "to-current", "to-datetime"]),
)
def test_every_new_offset_lies_in_the_log(data, kind):
    tps = data.draw(st.lists(st.builds(TopicPartition, topics, st.integers(0, 5)), min_size=1, unique=True))
    logs = {}
    for tp in tps:
        earliest = data.draw(st.integers(0, 1000))
        logs[tp] = LogRange(earliest, earliest + data.draw(st.integers(0, 1000)))
    committed = {tp: data.draw(st.integers(-5, 3000)) for tp in tps}
    found = {tp: data.draw(st.none() | st.integers(-1, 3000)) for tp in tps}
    value = data.draw(st.integers(-5000, 5000))
    plan, warnings = plan_reset(Scenario(kind, value), tps, committed, logs, found)
    assert set(plan) == set(tps)
    for tp, offset in plan.items():
        if kind == "to-current":
            assert offset == committed[tp]  # kept as is, even outside the log (Kafka does the same)
        else:
            assert logs[tp].earliest <= offset <= logs[tp].latest


def test_clamping_warns_like_kafka():
    tp = TopicPartition("t", 0)
    plan, warnings = plan_reset(Scenario("to-offset", 99), [tp], {}, {tp: LogRange(5, 50)})
    assert plan == {tp: 50}
    assert warnings == ["New offset (99) is higher than latest offset for t-0. Value will be set to 50"]
    plan, warnings = plan_reset(Scenario("shift-by", -10), [tp], {tp: 8}, {tp: LogRange(5, 50)})
    assert plan == {tp: 5} and "lower than earliest offset" in warnings[0]


def test_shift_needs_a_committed_offset_and_current_falls_back_to_latest():
    tp = TopicPartition("t", 0)
    with pytest.raises(ResetInputError, match="no committed offset"):
        plan_reset(Scenario("shift-by", 1), [tp], {}, {tp: LogRange(0, 9)})
    assert plan_reset(Scenario("to-current"), [tp], {}, {tp: LogRange(0, 9)})[0] == {tp: 9}


def test_durations_and_datetimes():
    assert parse_duration("P1DT2H30M") == timedelta(days=1, hours=2, minutes=30)
    assert parse_duration("PT0.5S") == timedelta(seconds=0.5)
    assert parse_duration("-PT1M") == -timedelta(minutes=1)
    for bad in ["P", "PT", "1D", "P1H", "P1DT", ""]:
        with pytest.raises(ResetInputError):
            parse_duration(bad)
    assert parse_datetime_ms("2024-05-01T12:00:00.000Z") == int(
        datetime(2024, 5, 1, 12, tzinfo=timezone.utc).timestamp() * 1000
    )
    assert parse_datetime_ms("2024-05-01T12:00:00+02:00") == int(
        datetime(2024, 5, 1, 10, tzinfo=timezone.utc).timestamp() * 1000
    )
    with pytest.raises(ResetInputError):
        parse_datetime_ms("May 1st")
