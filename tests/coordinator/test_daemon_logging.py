"""Logging: structured fields in text and JSON, quiet libraries, a log file that can be rotated."""
from __future__ import annotations

import json
import logging

import pytest

from cohort.coordinator.process.logging_setup import configure_logging


@pytest.fixture
def restore_root_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    logging.getLogger("asyncio").setLevel(logging.NOTSET)


def test_json_lines_carry_the_structured_fields(tmp_path, restore_root_logging):
    path = tmp_path / "cohort.log"
    setup = configure_logging("json", "INFO", path)
    log = logging.getLogger("cohort.coordinator.group")
    log.info("group rebalanced", extra={"group": "g1", "generation": 4, "members": 3, "reason": "member joined"})
    log.debug("not shown at INFO")
    setup.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert doc["msg"] == "group rebalanced"
    assert doc["level"] == "INFO" and doc["logger"] == "cohort.coordinator.group"
    assert (doc["group"], doc["generation"], doc["members"], doc["reason"]) == ("g1", 4, 3, "member joined")
    assert doc["ts"].endswith("Z")


def test_text_lines_are_one_line_with_key_value_fields(tmp_path, restore_root_logging):
    path = tmp_path / "cohort.log"
    setup = configure_logging("text", "INFO", path)
    logging.getLogger("cohort.coordinator.group").info("member expired", extra={"group": "g 1", "member": "m-1"})
    setup.close()
    (line,) = path.read_text().splitlines()
    assert " INFO cohort.coordinator.group member expired " in line
    assert line.endswith('group="g 1" member=m-1')


def test_chatty_libraries_are_quiet_unless_debugging(tmp_path, restore_root_logging):
    path = tmp_path / "cohort.log"
    setup = configure_logging("text", "INFO", path)
    logging.getLogger("asyncio").info("selector noise")
    logging.getLogger("asyncio").warning("real asyncio problem")
    setup.close()
    text = path.read_text()
    assert "selector noise" not in text and "real asyncio problem" in text


def test_reopen_follows_a_rotated_log_file(tmp_path, restore_root_logging):
    path = tmp_path / "cohort.log"
    setup = configure_logging("text", "INFO", path)
    log = logging.getLogger("cohort.coordinator.process.daemon")
    log.info("before rotation")
    path.rename(tmp_path / "cohort.log.1")  # what logrotate does before SIGHUP
    assert setup.reopen() is True
    log.info("after rotation")
    setup.close()
    assert "before rotation" in (tmp_path / "cohort.log.1").read_text()
    assert "after rotation" in path.read_text()
    assert "before rotation" not in path.read_text()


def test_reopen_is_a_no_op_on_stderr(restore_root_logging):
    setup = configure_logging("text", "WARNING", None)
    assert setup.reopen() is False
    setup.close()


def test_exceptions_stay_inside_one_json_line(tmp_path, restore_root_logging):
    path = tmp_path / "cohort.log"
    setup = configure_logging("json", "INFO", path)
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("cohort.coordinator.server.connection").exception("handler failed", extra={"api": "OffsetCommit"})
    setup.close()
    (line,) = path.read_text().splitlines()
    doc = json.loads(line)
    assert "ValueError: boom" in doc["exc"] and doc["api"] == "OffsetCommit"
