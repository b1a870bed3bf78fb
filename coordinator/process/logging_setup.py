"""Process logging: structured, quiet, one line per important event.

Code elsewhere logs with the standard library and passes structured fields as
``extra``, e.g. ``log.info("group rebalanced", extra={"group": g, "generation": 4})``;
it never needs to import this module. Here those fields are rendered either as
``key=value`` pairs after the message (``text``) or as one JSON object per line
(``json``). Any attribute that is not one of `logging.LogRecord`'s own counts as
a field.

Logs go to stderr, or to ``log.file``; `LogSetup.reopen` reopens that file so
logrotate can move it away and send SIGHUP.
"""
from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Attributes every LogRecord has; anything else on a record came from `extra`.
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
# Libraries that are chatty at INFO; they are heard from at WARNING unless debugging.
_QUIET_LIBRARIES = ("asyncio", "kafka", "aiokafka", "kazoo", "py4j")


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RECORD_ATTRS and not k.startswith("_")}


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    """``2026-01-01T00:00:00.000Z INFO cohort.coordinator.group group rebalanced group=g generation=4``"""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname, record.name, record.getMessage()]
        for key, value in record_fields(record).items():
            parts.append(f"{key}={_text_value(value)}")
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: Any) -> str:
    text = str(value)
    if not text or any(ch.isspace() or ch in "\"=" for ch in text):
        return json.dumps(text)
    return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, then the fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record_fields(record).items():
            doc.setdefault(key, value)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


class ReopenableFileHandler(logging.FileHandler):
    """A file handler whose file can be reopened (after logrotate moved it)."""

    def reopen(self) -> None:
        self.acquire()
        try:
            if self.stream is not None:
                self.stream.flush()
                self.stream.close()
            self.stream = self._open()
        finally:
            self.release()


@dataclass(slots=True)
class LogSetup:
    """The handler `configure_logging` installed, kept so it can be reopened/removed."""

    handler: logging.Handler

    def reopen(self) -> bool:
        """Reopen the log file (SIGHUP); returns False when logging to stderr."""
        if isinstance(self.handler, ReopenableFileHandler):
            self.handler.reopen()
            return True
        return False

    def close(self) -> None:
        logging.getLogger().removeHandler(self.handler)
        self.handler.close()


def configure_logging(log_format: str = "text", level: str = "INFO", log_file: Path | None = None) -> LogSetup:
    """Install Cohort's one root handler. Raises OSError if `log_file` can't be opened."""
    handler: logging.Handler
    if log_file is not None:
        handler = ReopenableFileHandler(log_file, encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_cohort", False):
            root.removeHandler(old)
            old.close()
    handler._cohort = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    library_level = logging.DEBUG if level == "DEBUG" else logging.WARNING
    for name in _QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(library_level)
    return LogSetup(handler)
