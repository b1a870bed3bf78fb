"""Apache Kafka's Java consumer (kafka-clients 4.4) asks Cohort for offsets by time: `offsetsForTimes`
(ListOffsets by timestamp) answers the earliest end a source reported at or after the time, with when it
was reported, and nothing for a time after the last report — what kafka-python and confluent-kafka get
in tests/client/test_offsets_by_time.py."""
from __future__ import annotations

import time

import pytest
from java_groups import create_topics

from cohort.client.blocking import BlockingAdmin

pytestmark = pytest.mark.timeout(180)


def reported(bootstrap: str, topic: str, end: int) -> int:
    """A source reports partition 0's end; returns a time (ms) just before the report."""
    before = int(time.time() * 1000)
    while int(time.time() * 1000) <= before:  # the report is stamped strictly after `before`
        pass
    with BlockingAdmin(bootstrap) as admin:
        admin.report_end_offsets({(topic, 0): end})
    while int(time.time() * 1000) <= before + 1:  # and the next one strictly after this one
        pass
    return before


def test_the_java_consumers_offsets_for_times_are_the_ends_reported_at_or_after_each_time(java, java_admin, cohort,
                                                                                        names):
    topic = f"{names}-clicks"
    create_topics(java_admin, **{topic: 1})
    t100 = reported(cohort.bootstrap, topic, 100)
    t250 = reported(cohort.bootstrap, topic, 250)
    t400 = reported(cohort.bootstrap, topic, 400)
    after = int(time.time() * 1000) + 10
    consumer = java.consumer(f"{names}-times", {"bootstrap.servers": cohort.bootstrap, "client.id": f"{names}-times"},
                             assign=[f"{topic}:0"])
    try:
        def at(ms: int):
            return consumer.call("offsetsForTimes", times={f"{topic}:0": ms})[f"{topic}:0"]

        found = at(t250)
        assert found["offset"] == 250 and t250 < found["timestamp"] < t400, found
        assert at(t100)["offset"] == 100
        assert at(t100 - 3_600_000)["offset"] == 100  # before the first report: the first one
        assert at(t400)["offset"] == 400
        assert at(after) is None  # nothing reported since: Kafka's "no such offset"
    finally:
        consumer.close()
