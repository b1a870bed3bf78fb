"""Bad command lines get the sub-command's own usage and one clear line; Kafka errors read as one sentence."""
from __future__ import annotations

import subprocess
import sys

import pytest

from cohort.client.errors import KafkaError
from cohort.protocol.errors import ErrorCode


def cohort(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cohort.coordinator.cli", *args], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("argv, own_usage", [
    (["groups", "list", "--bogus"], "cohort groups list"),
    (["log", "verify", "--bogus"], "usage: cohort log verify"),
    (["topics", "create", "--topic", "t", "--bogus"], "cohort topics create"),
])
def test_an_unknown_option_is_reported_by_the_sub_command_that_was_chosen(argv, own_usage):
    done = cohort(*argv)
    assert done.returncode == 2
    assert own_usage in done.stderr + done.stdout
    assert "usage: cohort [-h] [--version] COMMAND" not in done.stderr + done.stdout
    assert "--bogus" in done.stderr + done.stdout and "Traceback" not in done.stderr


def test_a_kafka_error_with_the_servers_message_does_not_double_its_punctuation():
    error = KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'orders' already exists.")
    assert str(error) == "TOPIC_ALREADY_EXISTS: Topic 'orders' already exists."
    assert str(KafkaError(ErrorCode.GROUP_ID_NOT_FOUND)) == "GROUP_ID_NOT_FOUND"
