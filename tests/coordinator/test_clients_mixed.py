"""kafka-python and confluent-kafka members in one group agree on one range assignment."""
from __future__ import annotations

import pytest

from clients_scenario import ASSIGNMENT_TIMEOUT_S, ConsumerThread, LogCapture, assignments_are, wait_for

from test_clients_confluent import CLIENT_LOGGER, confluent_adapter
from test_clients_kafka_python import create_topic, kafka_python_adapter

pytestmark = pytest.mark.timeout(150)


def test_kafka_python_and_confluent_members_share_a_range_assignment(cohort_serve):
    topic, group = "mixed-topic", "mixed-group"
    with LogCapture("kafka", CLIENT_LOGGER) as logs:
        create_topic(cohort_serve.bootstrap, topic, 6)
        kp = kafka_python_adapter(cohort_serve.bootstrap, topic)
        ck = confluent_adapter(cohort_serve.bootstrap, topic, **{"partition.assignment.strategy": "range"})
        members = [ConsumerThread(kp, group), ConsumerThread(ck, group), ConsumerThread(kp, group)]
        try:
            # Range over 6 partitions and 3 members: contiguous pairs, every partition once.
            assigned = wait_for(assignments_are(members, topic, 6, 2), ASSIGNMENT_TIMEOUT_S, "3 x 2 partitions")
            pairs = sorted(sorted(p for _, p in a) for a in assigned)
            assert pairs == [[0, 1], [2, 3], [4, 5]]

            # When the confluent member leaves, the kafka-python members split the topic 3 + 3.
            members[1].close()
            survivors = [members[0], members[2]]
            assigned = wait_for(assignments_are(survivors, topic, 6, 3), ASSIGNMENT_TIMEOUT_S, "2 x 3 partitions")
            assert sorted(sorted(p for _, p in a) for a in assigned) == [[0, 1, 2], [3, 4, 5]]
        finally:
            for member in members:
                member.stop()
    logs.assert_no_repeated_errors()
