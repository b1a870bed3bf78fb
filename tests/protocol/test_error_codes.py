"""Kafka's error codes: names, numbers and the retriable flag, cross-checked with
kafka-python's errors module.

Known, deliberate differences from kafka-python: we use the names of Kafka's
Java `Errors` enum where kafka-python keeps legacy ones, and CORRUPT_MESSAGE
is retriable (Java's CorruptRecordException is a RetriableException; kafka-python
says it is not).
"""
from __future__ import annotations

import inspect

import kafka.errors as kp_errors

from cohort.protocol.errors import ErrorCode, error_name

# ours -> kafka-python's legacy name
KAFKA_PYTHON_NAMES = {
    "UNKNOWN_SERVER_ERROR": "UNKNOWN", "NONE": "NO_ERROR", "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
    "MESSAGE_TOO_LARGE": "MESSAGE_SIZE_TOO_LARGE", "INVALID_TOPIC_EXCEPTION": "INVALID_TOPIC",
    "INVALID_REPLICA_ASSIGNMENT": "INVALID_REPLICATION_ASSIGNMENT",
}
RETRIABLE_IN_JAVA_NOT_IN_KAFKA_PYTHON = {"CORRUPT_MESSAGE"}


def _kafka_python_errors() -> dict[int, type]:
    return {cls.errno: cls for _, cls in inspect.getmembers(kp_errors, inspect.isclass)
            if issubclass(cls, kp_errors.BrokerResponseError) and isinstance(getattr(cls, "errno", None), int)}


def test_names_numbers_and_retriable_flags_agree_with_kafka_python():
    theirs = _kafka_python_errors()
    for code in ErrorCode:
        if code.name == "INVALID_REGULAR_EXPRESSION":  # 128: newer than kafka-python's table
            continue
        kp = theirs[int(code)]
        assert kp.message == KAFKA_PYTHON_NAMES.get(code.name, code.name), code
        if code.name not in RETRIABLE_IN_JAVA_NOT_IN_KAFKA_PYTHON:
            assert kp.retriable == code.retriable, code
    assert ErrorCode.CORRUPT_MESSAGE.retriable


def test_codes_the_coordinator_uses():
    assert ErrorCode.REBALANCE_IN_PROGRESS == 27 and not ErrorCode.REBALANCE_IN_PROGRESS.retriable
    assert ErrorCode.NOT_COORDINATOR == 16 and ErrorCode.NOT_COORDINATOR.retriable
    assert ErrorCode.COORDINATOR_LOAD_IN_PROGRESS.retriable and ErrorCode.COORDINATOR_NOT_AVAILABLE.retriable
    assert ErrorCode.UNSUPPORTED_VERSION == 35
    assert ErrorCode.UNSTABLE_OFFSET_COMMIT == 88 and ErrorCode.UNSTABLE_OFFSET_COMMIT.retriable
    assert [c.name for c in ErrorCode][:2] == ["UNKNOWN_SERVER_ERROR", "NONE"]


def test_codes_form_a_contiguous_table():
    assert sorted(int(c) for c in ErrorCode) == list(range(-1, 129))


def test_error_name_of_an_unknown_code_is_descriptive():
    assert error_name(25) == "UNKNOWN_MEMBER_ID"
    assert error_name(4000) == "UNKNOWN_ERROR_4000"
