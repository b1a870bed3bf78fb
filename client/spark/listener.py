"""A StreamingQueryListener that commits Kafka-shaped sources' progress to a consumer group, and reports
how far their data goes (the source's latest offsets) as Cohort's end offsets.

For queries that read Kafka (or any source whose offsets look like Kafka's
``{"topic": {"0": 123}}``) and write somewhere else, the sink cannot see the
offsets, but the query's progress events can: after each micro-batch Spark
reports every source's ``endOffset``, the next offset to read, which is what a
consumer group commits.  This is the Python, Spark 4 successor of the Scala
listener committers for Spark <= 3.0.

The commit is a simple commit (generation -1) sent from the driver, stamped with
the query id and batch id (the sink's `CommitMarker`), and never moves a
partition backwards: the group's committed offsets are read first and only
partitions that move forward are committed.  A coordinator that is briefly down
costs a few retries and then one log line; the next batch's commit catches up
(its offsets include everything before it).  The listener never raises into
Spark's listener bus.

After each micro-batch it also reports every Kafka-shaped source's latest offsets to Cohort (`Admin.
report_end_offsets`): the progress' ``latestOffset`` (Spark's Kafka source fills it in: the newest offset
each partition had when the batch was planned), and at least its ``endOffset`` (data the query has read
exists). Cohort measures LOG-END-OFFSET, LAG and health against these ends; a topic Cohort does not know,
or a principal without topic WRITE or ALTER, gets one log line per query and topic, not an error.

Which group a query commits to: the ``groups`` mapping (query name -> group)
given to the listener, else a ``cohort.group`` option set on the query's source
(``spark.readStream.format("kafka").option("cohort.group", "g")``).  Queries with
neither are ignored, with one log line.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from pyspark.sql.streaming import StreamingQueryListener

from cohort.client.spark.commit_plan import CommitMarker
from cohort.client.spark.coordinator_link import CoordinatorError, GroupActive, link_for
from cohort.client.spark.end_offsets import NotKafkaShaped, forward_only, parse_kafka_offsets
from cohort.client.topic_partition import TopicPartition

__all__ = ["CohortOffsetCommitter", "GROUP_OPTION"]

log = logging.getLogger("cohort.spark.listener")

GROUP_OPTION = "cohort.group"
_NO_GROUP = ""


class CohortOffsetCommitter(StreamingQueryListener):
    """Commit each progress event's source ``endOffset`` to the query's consumer group."""

    def __init__(
        self,
        bootstrap: str,
        groups: Mapping[str, str] | None = None,
        *,
        commit_timeout_ms: int = 5000,
        retries: int = 3,
        report_end_offsets: bool = True,
    ) -> None:
        """`report_end_offsets`: report each batch's source latest offsets to Cohort (see above)."""
        self.bootstrap = bootstrap
        self.report_end_offsets = report_end_offsets
        self.groups = dict(groups or {})
        self.commit_timeout_ms = commit_timeout_ms
        self.retries = retries
        self._group_by_query: dict[str, str] = {}
        self._warned: set[tuple[str, int]] = set()
        self._refused_ends: set[tuple[str, str]] = set()  # (query, topic) whose end report was refused, logged once
        self._done = threading.Condition()
        self._handled: dict[str, int] = {}  # query id -> last batch id handled (committed or nothing to do)

    # -- Spark callbacks (driver Python process, py4j callback thread) -----------------------
    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        progress = event.progress
        query_id = str(progress.id)
        try:
            self._commit_progress(query_id, progress.name, progress.batchId, progress.sources)
        except Exception:  # the listener bus must never see our failures
            log.exception("cohort listener: commit for query %s batch %d failed", query_id, progress.batchId)
        finally:
            with self._done:
                self._handled[query_id] = max(self._handled.get(query_id, -1), progress.batchId)
                self._done.notify_all()

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        self._group_by_query.pop(str(event.id), None)

    # -- for scripts and tests ---------------------------------------------------------------
    def wait_for_batch(self, query_id: str, batch_id: int, timeout: float) -> bool:
        """Block until the progress of `batch_id` (or a later one) of `query_id` was handled.

        Progress events are asynchronous: `awaitTermination()` can return before the
        last one arrives.  True when handled, False on timeout.
        """
        with self._done:
            return self._done.wait_for(lambda: self._handled.get(str(query_id), -1) >= batch_id, timeout)

    # -- the work ----------------------------------------------------------------------------
    def _commit_progress(self, query_id: str, name: str | None, batch_id: int, sources) -> None:
        group = self._group_for(query_id, name)  # first: the source options are read while the query runs
        wanted: dict[TopicPartition, int] = {}
        latest: dict[TopicPartition, int] = {}
        for index, source in enumerate(sources):
            try:
                offsets = parse_kafka_offsets(source.endOffset)
                available = parse_kafka_offsets(getattr(source, "latestOffset", None))
            except NotKafkaShaped as exc:
                if (query_id, index) not in self._warned:
                    self._warned.add((query_id, index))
                    log.info("cohort listener: query %s source %d is not Kafka-shaped (%s); ignored",
                             name or query_id, index, exc)
                continue
            for tp, offset in (offsets or {}).items():
                wanted[tp] = max(offset, wanted.get(tp, -1))
            for tp, offset in [*(offsets or {}).items(), *(available or {}).items()]:
                latest[tp] = max(offset, latest.get(tp, -1))
        if latest and self.report_end_offsets:
            self._report_ends(query_id, name, latest)
        if not group or not wanted:
            return
        link = link_for(self.bootstrap, self.commit_timeout_ms, self.retries)
        try:
            committed = {tp: c.offset for tp, c in link.committed_offsets(group).items()}
            forward = forward_only(wanted, committed)
            if forward:
                link.commit(group, forward, CommitMarker(query_id, batch_id).encode())
        except (CoordinatorError, GroupActive) as exc:
            log.error("cohort listener: query %s batch %d: offsets not committed to group %r at %s: %s",
                      name or query_id, batch_id, group, self.bootstrap, exc)

    def _report_ends(self, query_id: str, name: str | None, latest: dict[TopicPartition, int]) -> None:
        link = link_for(self.bootstrap, self.commit_timeout_ms, self.retries)
        try:
            results = link.report_end_offsets(latest)
        except CoordinatorError as exc:
            log.error("cohort listener: query %s: end offsets not reported to %s: %s", name or query_id,
                      self.bootstrap, exc)
            return
        for tp, result in sorted(results.items()):
            if isinstance(result, int) or (query_id, tp.topic) in self._refused_ends:
                continue
            self._refused_ends.add((query_id, tp.topic))
            log.warning("cohort listener: query %s: Cohort refused the end offsets of topic %s (%s); its lag "
                        "stays unknown", name or query_id, tp.topic, result)

    def _group_for(self, query_id: str, name: str | None) -> str:
        group = self._group_by_query.get(query_id)
        if group is None:
            group = self.groups.get(name or "") or self._group_from_source_options(query_id) or _NO_GROUP
            if not group:
                log.info("cohort listener: query %s has no group (no mapping for its name and no %s "
                         "source option); not committing its progress", name or query_id, GROUP_OPTION)
            self._group_by_query[query_id] = group
        return group

    def _group_from_source_options(self, query_id: str) -> str | None:
        """The ``cohort.group`` option of one of the query's sources, read from the JVM plan."""
        try:
            spark = self.spark
            if spark is None:
                from pyspark.sql import SparkSession

                spark = SparkSession.getActiveSession()
            query = spark.streams.get(query_id) if spark is not None else None
            if query is None:
                return None
            leaves = query._jsq.streamingQuery().logicalPlan().collectLeaves()
            for i in range(leaves.size()):
                leaf = leaves.apply(i)
                for options in _leaf_options(leaf):
                    value = options.get(GROUP_OPTION)
                    if value:
                        return str(value)
        except Exception as exc:  # a JVM without these classes (e.g. Spark Connect): fall back to the mapping
            log.debug("cohort listener: cannot read source options of query %s: %s", query_id, exc)
        return None


def _leaf_options(leaf) -> list:
    """The option maps a streaming leaf node carries (V2 scan relation, or a V2 relation)."""
    found = []
    for path in (("relation", "options"), ("options",), ("extraOptions",)):
        node = leaf
        try:
            for attr in path:
                node = getattr(node, attr)()
        except Exception:
            continue
        found.append(node)
    return found
