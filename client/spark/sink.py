"""The `cohort` streaming sink: every micro-batch commits its Kafka offsets to a consumer group.

Spark Structured Streaming keeps its progress in its checkpoint and never tells
Kafka tooling how far a query got.  With this sink a query whose rows carry
``topic``/``partition``/``offset`` columns commits, per micro-batch, ``max(offset)+1``
for each (topic, partition) to the consumer group named by the ``group`` option,
so lag tools see the query like any consumer.

Where the code runs (measured on PySpark 4.3):

* ``CohortSink.streamWriter`` runs when the query initialises (after ``.start()``
  has returned) and again, in a JVM-started Python process, before every
  commit/abort: it validates the options and the schema and checks that the
  coordinator accepts a connection (within 3 s), so a misconfigured query stops
  before batch 0 (Spark wraps the ``cohort sink: …`` line in its
  PYTHON_DATA_SOURCE_ERROR).  `check_sink_options` runs the same checks in the
  caller's process, before ``.start()``, to fail at once with that one line.
* ``CohortStreamWriter.write`` runs on executors, once per partition per batch, and
  returns that task's next offsets (``TaskNextOffsets``).
* ``commit``/``abort`` run in that JVM-started process.  ``commit`` merges the
  tasks' maps and commits them in ONE OffsetCommit (a simple commit, generation
  -1) after the checks of ``commit_plan.plan_batch_commit`` (exactly-once effect
  by batch id, never backwards, one query per group).  ``abort`` commits nothing.

Options: ``bootstrap`` (host:port, required), ``group`` (required),
``topicColumn``/``partitionColumn``/``offsetColumn`` (default topic/partition/offset),
``commitTimeoutMs`` (default 10000), ``retries`` (default 3),
``allowQueryTakeover`` (default false), ``queryId`` (default: the id Spark keeps
in the checkpoint's ``metadata`` file).
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlparse

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import ByteType, IntegerType, LongType, ShortType, StringType, StructType

from cohort.client.spark.commit_plan import (
    QueryConflict,
    merge_next_offsets,
    next_offsets,
    plan_batch_commit,
)
from cohort.client.spark.coordinator_link import CoordinatorError, GroupActive, link_for
from cohort.client.topic_partition import TopicPartition

__all__ = ["CohortSink", "CohortStreamWriter", "SinkOptions", "SinkConfigError", "CohortSinkError", "TaskNextOffsets",
           "check_sink_options"]

log = logging.getLogger("cohort.spark.sink")

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)


class SinkConfigError(ValueError):
    """The sink's options or the query's schema cannot work; raised at query start."""


class CohortSinkError(RuntimeError):
    """A batch could not be committed; the query fails with this message."""


def _parse_bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise SinkConfigError(f"cohort sink: option {name}={text!r} must be true or false")


def _parse_int(name: str, text: str, minimum: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise SinkConfigError(f"cohort sink: option {name}={text!r} must be an integer") from None
    if value < minimum:
        raise SinkConfigError(f"cohort sink: option {name}={value} must be >= {minimum}")
    return value


def _parse_bootstrap(text: str) -> str:
    servers = [s.strip() for s in text.split(",") if s.strip()]
    if not servers:
        raise SinkConfigError("cohort sink: option bootstrap is empty (expected host:port)")
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SinkConfigError(f"cohort sink: option bootstrap={text!r}: {server!r} is not host:port")
    return ",".join(servers)


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The validated options, plus the column positions in the query's schema."""

    bootstrap: str
    group: str
    topic_index: int
    partition_index: int
    offset_index: int
    commit_timeout_ms: int = 10_000
    retries: int = 3
    allow_query_takeover: bool = False
    query_id: str | None = None
    checkpoint_location: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType) -> "SinkOptions":
        """Validate everything that can be checked without the network; one clear message."""
        # Spark hands the options over with lower-cased keys (a case-insensitive map).
        opts = {k.lower(): v for k, v in options.items()}
        missing = [name for name in ("bootstrap", "group") if not (opts.get(name.lower()) or "").strip()]
        if missing:
            raise SinkConfigError(
                "cohort sink: missing required option(s) "
                + ", ".join(missing)
                + ' (e.g. .option("bootstrap", "127.0.0.1:9092").option("group", "my-query"))'
            )
        indexes = []
        names = schema.fieldNames()
        for option, default, wanted in (
            ("topicColumn", "topic", (StringType,)),
            ("partitionColumn", "partition", _INTEGRAL),
            ("offsetColumn", "offset", _INTEGRAL),
        ):
            column = opts.get(option.lower(), default)
            if column not in names:
                raise SinkConfigError(
                    f"cohort sink: the query has no column {column!r} (option {option}); "
                    f"its columns are {', '.join(names) or 'none'}"
                )
            dtype = schema[column].dataType
            if not isinstance(dtype, wanted):
                expected = "string" if wanted == (StringType,) else "an integer type (int or bigint)"
                raise SinkConfigError(
                    f"cohort sink: column {column!r} has type {dtype.simpleString()}, expected {expected}"
                )
            indexes.append(names.index(column))
        query_id = (opts.get("queryid") or "").strip() or None
        checkpoint = (opts.get("checkpointlocation") or "").strip() or None
        if query_id is None and checkpoint is not None and _local_path(checkpoint) is None:
            raise SinkConfigError(
                f"cohort sink: checkpointLocation {checkpoint!r} is not on the local filesystem, so the "
                "sink cannot read the query id from it; set option queryId to a stable id for this query"
            )
        if query_id is None and checkpoint is None:
            raise SinkConfigError(
                "cohort sink: set option checkpointLocation (the sink reads the query id from the "
                "checkpoint to make replayed batches idempotent), or set option queryId"
            )
        return cls(
            bootstrap=_parse_bootstrap(opts["bootstrap"]),
            group=opts["group"].strip(),
            topic_index=indexes[0],
            partition_index=indexes[1],
            offset_index=indexes[2],
            commit_timeout_ms=_parse_int("commitTimeoutMs", opts.get("committimeoutms", "10000"), 1),
            retries=_parse_int("retries", opts.get("retries", "3"), 0),
            allow_query_takeover=_parse_bool("allowQueryTakeover", opts.get("allowquerytakeover", "false")),
            query_id=query_id,
            checkpoint_location=checkpoint,
        )

    def resolve_query_id(self) -> str:
        """The query's stable id: the queryId option, else the id in <checkpoint>/metadata."""
        if self.query_id is not None:
            return self.query_id
        assert self.checkpoint_location is not None  # parse() guarantees one of the two
        path = os.path.join(_local_path(self.checkpoint_location) or "", "metadata")
        try:
            with open(path, encoding="utf-8") as f:
                first_line = f.readline()
            query_id = json.loads(first_line)["id"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CohortSinkError(
                f"cohort sink: cannot read the query id from {path} ({exc}); set option queryId"
            ) from exc
        if not isinstance(query_id, str) or not query_id:
            raise CohortSinkError(f"cohort sink: {path} holds no query id; set option queryId")
        return query_id


# How long the sink waits for a TCP connection to the coordinator when a query starts: an unreachable
# coordinator then fails the query in seconds, not after every commit attempt's timeout (about 70 s).
COORDINATOR_PROBE_TIMEOUT_S = 3.0


def probe_coordinator(bootstrap: str, timeout_s: float = COORDINATOR_PROBE_TIMEOUT_S) -> None:
    """Raise SinkConfigError (one line) unless some server of `bootstrap` accepts a TCP connection within
    `timeout_s` (tried again every 0.2 s meanwhile: a coordinator restarting between batches is waited for)."""
    import socket
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        reasons = []
        for server in bootstrap.split(","):
            host, _, port = server.rpartition(":")
            try:
                left = max(0.1, deadline - time.monotonic())
                with socket.create_connection((host.strip("[]"), int(port)), timeout=left):
                    return
            except OSError as exc:
                reasons.append(f"{server}: {exc.strerror or type(exc).__name__}")
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    raise SinkConfigError(f"cohort sink: no coordinator answers at {bootstrap} ({'; '.join(reasons)}); "
                          "start `cohort serve` there or fix option bootstrap")


def check_sink_options(df_or_schema, options: Mapping[str, str]) -> None:
    """Run the sink's checks now, in this process: raises SinkConfigError with one line.

    Spark validates a data source's options only when the query initialises, after
    ``.start()`` returned, and reports a failure wrapped in its own error text. Call this
    with the DataFrame (or its schema) and the options you pass to ``.options(...)``; it
    also checks that the coordinator answers.
    """
    schema = getattr(df_or_schema, "schema", df_or_schema)
    parsed = SinkOptions.parse({k: str(v) for k, v in options.items()}, schema)
    probe_coordinator(parsed.bootstrap)


# Best effort, per sink-runner process (Spark runs commit() and abort() of a session in one
# long-lived Python process): why the last commit of (group, batch) failed, for abort()'s line;
# and which queries have had a replay reported since their last commit (one WARNING per restart).
_commit_failures: dict[tuple[str, int], str] = {}
_replays_reported: set[tuple[str, str]] = set()


def _local_path(location: str) -> str | None:
    """The filesystem path of a local checkpoint location, None for a remote one (hdfs:, s3a:, ...)."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme == "file" else location
    if len(parsed.scheme) == 1:  # a Windows drive letter, not a scheme
        return location
    return None


@dataclass(slots=True)
class TaskNextOffsets(WriterCommitMessage):
    """One task's max(offset)+1 per (topic, partition), sent from an executor to the committer."""

    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    rows: int = 0


class CohortStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator) -> TaskNextOffsets:
        o = self.options
        rows = 0

        def triples():
            nonlocal rows
            for row in iterator:
                rows += 1
                yield row[o.topic_index], row[o.partition_index], row[o.offset_index]

        return TaskNextOffsets(next_offsets(triples()), rows)

    def commit(self, messages: list[TaskNextOffsets | None], batchId: int) -> None:
        with _one_line_errors():
            commit_batch(self.options, batchId, merge_next_offsets(m.offsets for m in messages if m is not None))

    def abort(self, messages: list[TaskNextOffsets | None], batchId: int) -> None:
        # A failed or stopped batch commits nothing; Spark re-runs it under the same id.
        o = self.options
        failed = sum(1 for m in messages if m is None)
        if failed:
            log.warning("cohort sink: batch %d aborted (%d of %d tasks failed); nothing committed to group %r",
                        batchId, failed, len(messages), o.group)
            return
        # Every task wrote its part: what failed is the commit to the coordinator.
        why = _commit_failures.pop((o.group, batchId), None)
        log.warning("cohort sink: batch %d aborted: its commit to group %r at %s failed%s; nothing committed "
                    "(Spark runs the batch again)", batchId, o.group, o.bootstrap, f" ({why})" if why else "")


def commit_batch(options: SinkOptions, batch_id: int, offsets: dict[TopicPartition, int]) -> None:
    """Commit one batch's offsets to the group, or skip it when it already took effect.

    Runs on the driver side.  Every failure becomes one CohortSinkError whose message
    names the group and the coordinator.
    """
    link = link_for(options.bootstrap, options.commit_timeout_ms, options.retries)
    try:
        link.ensure_no_active_members(options.group)
        if not offsets:
            return  # an empty batch: the membership check above still reports a bad setup early
        committed = link.committed_offsets(options.group)
        plan = plan_batch_commit(
            options.group,
            options.resolve_query_id(),
            batch_id,
            offsets,
            committed,
            allow_query_takeover=options.allow_query_takeover,
        )
        if plan.skip:
            # A replay of a batch that already took effect: Spark re-runs the batch that was in
            # flight when a query stopped. Worth one WARNING per restart, INFO for the rest.
            replay = (plan.marker.query_id, options.group)
            level = logging.INFO if replay in _replays_reported else logging.WARNING
            _replays_reported.add(replay)
            log.log(level, "cohort sink: batch %d already committed to group %r (stored batch %d): a replay "
                    "after a restart, skipped", batch_id, options.group, plan.skipped_replay_of)
            return
        _replays_reported.discard((plan.marker.query_id, options.group))
        for tp, (wanted, kept) in plan.held_back.items():
            log.warning("cohort sink: group %r partition %s is already at %d; batch %d's %d would move it "
                        "backwards, keeping %d", options.group, tp, kept, batch_id, wanted, kept)
        if plan.taken_over_from:
            log.warning("cohort sink: query %s takes group %r over from %s",
                        plan.marker.query_id, options.group, ", ".join(sorted(plan.taken_over_from)))
        link.commit(options.group, plan.offsets, plan.marker.encode())
    except GroupActive as exc:
        raise CohortSinkError(f"cohort sink: {exc}") from None
    except QueryConflict as exc:
        raise CohortSinkError(f"cohort sink: {exc}") from None
    except CoordinatorError as exc:
        _commit_failures[(options.group, batch_id)] = str(exc)
        raise CohortSinkError(
            f"cohort sink: batch {batch_id} could not be committed to group {options.group!r} "
            f"at {options.bootstrap}: {exc}"
        ) from None


class CohortSink(DataSource):
    """``df.writeStream.format("cohort")``: commit each micro-batch's offsets to a consumer group."""

    @classmethod
    def name(cls) -> str:
        return "cohort"

    def streamWriter(self, schema: StructType, overwrite: bool) -> CohortStreamWriter:
        with _one_line_errors():
            options = SinkOptions.parse(self.options, schema)
            probe_coordinator(options.bootstrap)  # a query against an unreachable coordinator stops before batch 0
            return CohortStreamWriter(options)


class _one_line_errors:
    """Let the sink's own errors reach the user as their one line, first.

    Spark formats an exception of its Python data source process with `traceback.format_exc()` and puts
    the result after its own prefix, so the user's first line was "Traceback (most recent call last):"
    and the reason came a dozen lines later. Cohort's errors (`SinkConfigError`, `CohortSinkError`) are
    complete in one line: while one propagates, the process formats tracebacks without frames
    (`sys.tracebacklimit = 0`); the next call into the sink restores the setting.
    """

    _saved: list = []

    def __enter__(self) -> None:
        import sys

        while self._saved:
            value = self._saved.pop()
            if value is _UNSET:
                sys.__dict__.pop("tracebacklimit", None)
            else:
                sys.tracebacklimit = value

    def __exit__(self, kind, exc, tb) -> None:
        import sys

        if kind is not None and issubclass(kind, (SinkConfigError, CohortSinkError)):
            self._saved.append(getattr(sys, "tracebacklimit", _UNSET))
            sys.tracebacklimit = 0


_UNSET = object()
