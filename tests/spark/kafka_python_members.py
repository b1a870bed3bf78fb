"""A real third-party member for the membership scenarios of the Spark suite."""
from __future__ import annotations

import time


def join_kafka_python_consumer(bootstrap: str, group: str, topic: str, timeout: float = 30):
    """A kafka-python consumer that is an active member of `group` (Stable), for membership scenarios.

    Waits on the coordinator's view (DescribeGroups) rather than on the consumer's
    assignment: a member is active even when the range assignor gives it nothing.  The
    long session timeout keeps it a member while a cold Spark query starts on a busy
    machine (its heartbeat thread may be starved for many seconds).
    """
    from kafka import KafkaConsumer

    from cohort.client.admin import NewTopic
    from cohort.client.blocking import BlockingAdmin

    with BlockingAdmin(bootstrap, api_timeout_ms=10000) as admin:
        admin.create_topics([NewTopic(topic, 2)])
        consumer = KafkaConsumer(topic, group_id=group, bootstrap_servers=bootstrap, session_timeout_ms=60000,
                                 heartbeat_interval_ms=2000, enable_auto_commit=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            consumer.poll(timeout_ms=100)
            description = admin.describe_group(group)
            if description.state == "Stable" and description.members:
                return consumer
        consumer.close()
    raise AssertionError(f"kafka-python consumer did not become a Stable member of {group!r} in {timeout}s")
