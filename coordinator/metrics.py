"""Prometheus metrics for one Cohort server, and the HTTP endpoint serving them.

Two kinds of series:

* **Events** (requests, connections, rebalances, commits, fsyncs, compactions)
  are counted where they happen. The recording methods of `CoordinatorMetrics`
  are built for hot paths: series are plain Python numbers (see `Family`),
  label children are created once and cached under the caller's own key, so a
  request costs one dict lookup and a few attribute updates; everything is
  turned into Prometheus families only when scraped. Call recorders from the
  event-loop thread (the one that serves /metrics): they take no locks.
* **State** (groups by state, members, committed offsets, log size) is *not*
  mirrored on every change: the owner registers a callback with one of the
  ``watch_*`` methods and it is read only when Prometheus scrapes.

Label values are bounded by construction: API names come from a fixed table,
error names from Kafka's error codes, rebalance and close reasons from small
fixed vocabularies (anything else is counted as ``other``), partitions from
the offsets-topic partition count. Per-group offsets are exported only when
``metrics.group.offsets.enable`` is set. Group ids (up to 32 KB each, chosen by
clients) are label values only up to `MAX_GROUP_LABEL_CHARS`: a longer one is cut
and ends with a hash of the whole id (`group_label`, stable across scrapes and
restarts); with ``metrics.group.id.labels.enable=false`` no series names a group
at all (health is counted per status instead), for nodes shared by tenants who
must not learn each other's group ids.

A scrape collects the series on the event loop (the owners' state lives there)
and renders the text on a worker thread; scrapes that come while one is being
built share it (a scraper in a loop costs the event loop one collection per
build, however many scrapers there are).

`cohort.coordinator.metrics_http` serves ``/metrics`` and a readiness probe on the same
port (``/health`` and ``/ready``: 200 ``ready``, 503 ``loading``/``stopping``). It runs
on the server's own event loop so scrape callbacks read state from the thread
that owns it.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
from bisect import bisect_left
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.utils import floatToGoString

from cohort.coordinator import __version__
from cohort.coordinator.groups.reports.lag import LAG_MAX
from cohort.protocol.messages import API_SCHEMAS

log = logging.getLogger(__name__)

# Kafka's names for the API keys Cohort may see, used only as label values: every API the codec
# declares, and two that clients send before learning that Cohort does not serve them.
API_NAMES: dict[int, str] = {0: "Produce", 32: "DescribeConfigs", **{key: api.name for key, api in API_SCHEMAS.items()}}
# classic groups' states, then the two only KIP-848 consumer groups have (Empty, Stable, Dead are shared)
GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Assigning", "Reconciling")
GROUP_TYPES = ("classic", "consumer")
REBALANCE_REASONS = (
    "initial",          # first rebalance of an empty group
    "member_joined",    # a new member, or a known one rejoining with changed metadata
    "member_left",      # LeaveGroup
    "member_expired",   # session or join/sync timeout
    "static_replaced",  # a static member came back with a different protocol
    "group_deleted",
    "other",
)
CLOSE_REASONS = (
    "client",           # the peer closed
    "idle",             # connections.max.idle.ms
    "protocol_error",   # malformed frame, unknown API key, unsupported version
    "oversized",        # frame above socket.request.max.bytes
    "request_read_timeout",  # a request did not arrive whole within socket.request.read.timeout.ms
    "limit",            # refused at accept: max.connections or max.connections.per.ip reached
    "shutdown",         # the server is stopping
    "authentication",   # SASL authentication failed, or a request came before it completed
    "authentication_timeout",  # not signed in within connections.authentication.timeout.ms
    "error",            # socket error
    "other",
)

# Longest group id used as a label value as it is; longer ones are cut and end with "~" and a hash of the whole.
MAX_GROUP_LABEL_CHARS = 128
_GROUP_HASH_HEX = 16


def group_label(group: str) -> str:
    """`group` as a label value: itself up to MAX_GROUP_LABEL_CHARS, else its start, "~" and a hash of it all."""
    if len(group) <= MAX_GROUP_LABEL_CHARS:
        return group
    digest = hashlib.blake2b(group.encode("utf-8", "surrogatepass"), digest_size=_GROUP_HASH_HEX // 2).hexdigest()
    return f"{group[:MAX_GROUP_LABEL_CHARS - _GROUP_HASH_HEX - 1]}~{digest}"


class _Collected:
    """Families collected on the event loop, handed to the text renderer on a worker thread."""

    def __init__(self, families: list) -> None:
        self._families = families

    def collect(self):
        return self._families


_LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0,
)
_FSYNC_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384)
_REBALANCE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)
_COMPACTION_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0)


@dataclass(frozen=True, slots=True)
class LogPartitionStats:
    """What the offsets log reports per partition at scrape time."""

    partition: int
    size_bytes: int
    segments: int


@dataclass(frozen=True, slots=True)
class GroupOffset:
    """One committed offset, for the optional per-group series."""

    group: str
    topic: str
    partition: int
    offset: int


class CounterChild:
    """One counter series: a plain number (see the module docstring on threads)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class GaugeChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = value

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def dec(self, amount: float = 1) -> None:
        self.value -= amount


class HistogramChild:
    """One histogram series: per-bucket counts (not cumulative) and a sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: the first bound >= value, i.e. Prometheus' "le" bucket.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value


class Family:
    """A metric family held as plain Python numbers and rendered only at scrape.

    prometheus-client's own Counter/Histogram take a lock per update and scan
    the buckets linearly (~7 us per request for a count + a latency); these
    are a few attribute updates (~1 us), which matters at tens of thousands of
    requests per second on one event loop.
    """

    __slots__ = ("name", "doc", "kind", "labelnames", "bounds", "children")

    def __init__(self, name: str, doc: str, kind: str, labelnames: tuple[str, ...] = (),
                 bounds: tuple[float, ...] = ()) -> None:
        self.name, self.doc, self.kind, self.labelnames, self.bounds = name, doc, kind, labelnames, bounds
        self.children: dict[tuple[str, ...], CounterChild | GaugeChild | HistogramChild] = {}

    def labels(self, *values: str):
        child = self.children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
            if self.kind == "histogram":
                child = HistogramChild(self.bounds)
            elif self.kind == "counter":
                child = CounterChild()
            else:
                child = GaugeChild()
            self.children[values] = child
        return child

    def render(self):
        names = list(self.labelnames)
        if self.kind == "counter":
            family = CounterMetricFamily(self.name, self.doc, labels=names)
            for values, child in self.children.items():
                family.add_metric(list(values), child.value)
        elif self.kind == "gauge":
            family = GaugeMetricFamily(self.name, self.doc, labels=names)
            for values, child in self.children.items():
                family.add_metric(list(values), child.value)
        else:
            family = HistogramMetricFamily(self.name, self.doc, labels=names)
            les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
            for values, child in self.children.items():
                cumulative, buckets = 0, []
                for le, count in zip(les, child.counts):
                    cumulative += count
                    buckets.append((le, cumulative))
                family.add_metric(list(values), buckets, child.sum)
        return family


class CoordinatorMetrics:
    """Every Cohort metric, in its own registry (so tests can run many servers)."""

    # Slots: see GroupCoordinator (an instance dict past 30 attributes slows every self.x on the request path).
    __slots__ = (
        "registry", "group_offsets_enabled", "families", "_requests", "_request_errors", "_request_duration",
        "_connections_open", "_connections_accepted", "_connections_closed", "_rebalances",
        "_rebalance_duration", "_group_heartbeats", "_group_epoch_bumps", "_group_reconciliation",
        "_by_group_type", "_member_expirations", "_commits", "_offsets_expired", "_flush_batch",
        "_fsync_duration", "_compactions", "_compaction_reclaimed", "_compaction_duration", "_partition_load",
        "_authentications", "_authorization_denials", "_partition_load_records", "_request_children",
        "_error_children", "_close_children", "_rebalance_children", "_groups_by_state", "_members",
        "_committed_offsets", "_group_offsets", "_log_partitions", "_readiness", "_failed_partitions",
        "_group_health", "_failed_providers", "group_labels", "_scrape", "partition_series_max",
        "_partition_series_dropped",
    )

    def __init__(self, *, group_offsets_enabled: bool = False, process_metrics: bool = True,
                 group_labels: bool = True, partition_series_max: int = 10_000) -> None:
        """`group_labels`: False leaves group ids out of every series (metrics.group.id.labels.enable);
        `group_offsets_enabled` turns the per-partition series on (metrics.group.offsets.enable), at most
        `partition_series_max` partitions of them (metrics.group.offsets.max.partitions)."""
        self.registry = CollectorRegistry()
        self.group_offsets_enabled = group_offsets_enabled and group_labels
        self.partition_series_max = partition_series_max
        self._partition_series_dropped = 0
        self.group_labels = group_labels
        self._scrape: asyncio.Future | None = None
        if process_metrics:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        self.families: list[Family] = []
        f = self._family
        f("cohort_build_info", "Cohort version running.", "gauge", ("version",)).labels(__version__).set(1)

        self._requests = f("cohort_requests", "Requests handled, by API and version.", "counter", ("api", "version"))
        self._request_errors = f(
            "cohort_request_errors", "Responses (or partitions) answered with a Kafka error, by API and error.",
            "counter", ("api", "error"),
        )
        self._request_duration = f(
            "cohort_request_duration_seconds", "Time from a request's arrival to its response being queued.",
            "histogram", ("api",), _LATENCY_BUCKETS,
        )
        self._connections_open = f("cohort_connections_open", "Client connections open now.", "gauge").labels()
        self._connections_accepted = f("cohort_connections_accepted", "Client connections accepted.", "counter").labels()
        self._connections_closed = f("cohort_connections_closed", "Client connections closed, by reason.", "counter", ("reason",))
        self._rebalances = f("cohort_rebalances", "Completed rebalances, by reason.", "counter", ("reason",))
        self._rebalance_duration = f(
            "cohort_rebalance_duration_seconds", "Time from a rebalance starting to its group becoming stable.",
            "histogram", (), _REBALANCE_BUCKETS,
        ).labels()
        # Per group type (classic, consumer = KIP-848): classic epochs are generations, reconciliation its rebalance.
        self._group_heartbeats = f("cohort_group_heartbeats", "Heartbeats answered (Heartbeat, ConsumerGroupHeartbeat), "
                                   "by group type.", "counter", ("type",))
        self._group_epoch_bumps = f("cohort_group_epoch_bumps", "Group epoch bumps (classic: new generations), by group "
                                    "type.", "counter", ("type",))
        self._group_reconciliation = f(
            "cohort_group_reconciliation_seconds", "Time from a group epoch bump until every member is stable at the "
            "new assignment, by group type.", "histogram", ("type",), _REBALANCE_BUCKETS)
        self._by_group_type = {t: (self._group_heartbeats.labels(t), self._group_epoch_bumps.labels(t),
                                   self._group_reconciliation.labels(t)) for t in GROUP_TYPES}
        self._member_expirations = f(
            "cohort_member_expirations", "Members removed because their session or rebalance timed out.", "counter",
        ).labels()
        self._commits = f("cohort_offset_commits", "Partition offsets committed.", "counter").labels()
        self._offsets_expired = f(
            "cohort_offsets_expired", "Committed offsets removed by offsets.retention.minutes.", "counter",
        ).labels()
        self._flush_batch = f(
            "cohort_log_flush_batch_records", "Records made durable by one fsync (group commit).",
            "histogram", (), _BATCH_BUCKETS,
        ).labels()
        self._fsync_duration = f(
            "cohort_log_fsync_duration_seconds", "Duration of one offsets-log fsync.", "histogram", (), _FSYNC_BUCKETS,
        ).labels()
        self._compactions = f("cohort_log_compactions", "Offsets-log compaction runs.", "counter").labels()
        self._compaction_reclaimed = f(
            "cohort_log_compaction_reclaimed_bytes", "Bytes freed by offsets-log compaction.", "counter",
        ).labels()
        self._compaction_duration = f(
            "cohort_log_compaction_duration_seconds", "Duration of one compaction run.",
            "histogram", (), _COMPACTION_BUCKETS,
        ).labels()
        self._partition_load = f(
            "cohort_partition_load_duration_seconds", "Time the last load (replay) of each offsets partition took.",
            "gauge", ("partition",),
        )
        self._authentications = f(
            "cohort_authentications", "SASL authentications, by mechanism and result (success, failure).",
            "counter", ("mechanism", "result"),
        )
        self._authorization_denials = f(
            "cohort_authorization_denials", "Requests (or parts) refused by the ACL authorizer, by resource type "
            "and operation.", "counter", ("resource_type", "operation"),
        )
        self._partition_load_records = f(
            "cohort_partition_load_records", "Records replayed by the last load of each offsets partition.",
            "gauge", ("partition",),
        )

        # Label children cached by the caller's own key: hot paths build no label tuples.
        self._request_children: dict[tuple[int, int], tuple[CounterChild, HistogramChild]] = {}
        self._error_children: dict[tuple[int, int], CounterChild] = {}
        self._close_children = {reason: self._connections_closed.labels(reason) for reason in CLOSE_REASONS}
        self._rebalance_children = {reason: self._rebalances.labels(reason) for reason in REBALANCE_REASONS}

        # Scrape-time state providers, set by the owners of that state.
        self._groups_by_state: Callable[[], Mapping[str, int]] | None = None
        self._members: Callable[[], int] | None = None
        self._committed_offsets: Callable[[], int] | None = None
        self._group_offsets: Callable[[], Iterable[GroupOffset]] | None = None
        self._log_partitions: Callable[[], Iterable[LogPartitionStats]] | None = None
        self._readiness: Callable[[], str] | None = None
        self._failed_partitions: Callable[[], Mapping[int, str]] | None = None
        self._group_health: Callable[[], Iterable] | None = None
        self._failed_providers: set[str] = set()
        self.registry.register(_ScrapeTimeCollector(self))

    def _family(self, name: str, doc: str, kind: str, labelnames: tuple[str, ...] = (),
                bounds: tuple[float, ...] = ()) -> Family:
        family = Family(name, doc, kind, labelnames, bounds)
        self.families.append(family)
        return family

    # -- hot-path recorders ------------------------------------------------------
    def observe_request(self, api_key: int, api_version: int, seconds: float) -> None:
        children = self._request_children.get((api_key, api_version))
        if children is None:
            children = self._request_series(api_key, api_version)
        children[0].value += 1
        duration = children[1]  # (`HistogramChild.observe`, inline: one call less on every request)
        duration.counts[bisect_left(duration.bounds, seconds)] += 1
        duration.sum += seconds

    def _request_series(self, api_key: int, api_version: int) -> tuple[CounterChild, HistogramChild]:
        api = API_NAMES.get(api_key, "unknown")
        version = str(api_version) if api_key in API_NAMES and 0 <= api_version < 64 else "unknown"
        children = (self._requests.labels(api, version), self._request_duration.labels(api))
        if api_key in API_NAMES and 0 <= api_version < 64:  # keep the cache bounded
            self._request_children[(api_key, api_version)] = children
        return children

    def count_request_error(self, api_key: int, error_code: int, count: int = 1) -> None:
        child = self._error_children.get((api_key, error_code))
        if child is None:
            child = self._request_errors.labels(API_NAMES.get(api_key, "unknown"), _error_name(error_code))
            if api_key in API_NAMES:
                self._error_children[(api_key, error_code)] = child
        child.value += count

    def connection_accepted(self) -> None:
        self._connections_accepted.value += 1
        self._connections_open.value += 1

    def connection_closed(self, reason: str) -> None:
        """A connection ended; `reason` is one of `CLOSE_REASONS` (else "other").

        Refused connections (reason "limit") were never counted as open.
        """
        (self._close_children.get(reason) or self._close_children["other"]).value += 1
        if reason != "limit":
            self._connections_open.value -= 1

    def count_authentication(self, mechanism: str, result: str) -> None:
        """`mechanism` is one the server offers (or "unknown"): clients cannot grow the label set."""
        self._authentications.labels(mechanism, result).value += 1

    def count_authorization_denial(self, resource_type: str, operation: str) -> None:
        self._authorization_denials.labels(resource_type, operation).value += 1

    def rebalance_completed(self, reason: str, seconds: float) -> None:
        (self._rebalance_children.get(reason) or self._rebalance_children["other"]).value += 1
        self._rebalance_duration.observe(seconds)

    def group_heartbeats(self, group_type: str) -> CounterChild:
        """The heartbeat counter of one group type: the caller keeps it and `inc()`s it (a hot path)."""
        return self._by_group_type[group_type][0]

    def group_epoch_bumped(self, group_type: str) -> None:
        self._by_group_type[group_type][1].value += 1

    def group_reconciled(self, group_type: str, seconds: float) -> None:
        self._by_group_type[group_type][2].observe(seconds)

    def member_expired(self) -> None:
        self._member_expirations.value += 1

    def offsets_committed(self, partitions: int = 1) -> None:
        self._commits.value += partitions

    def offsets_expired(self, count: int) -> None:
        self._offsets_expired.value += count

    def log_flushed(self, records: int, fsync_seconds: float) -> None:
        """One fsync made `records` records durable."""
        self._flush_batch.observe(records)
        self._fsync_duration.observe(fsync_seconds)

    def log_compacted(self, bytes_reclaimed: int, seconds: float) -> None:
        self._compactions.value += 1
        self._compaction_reclaimed.value += bytes_reclaimed
        self._compaction_duration.observe(seconds)

    def partition_loaded(self, partition: int, seconds: float, records: int) -> None:
        self._partition_load.labels(str(partition)).value = seconds
        self._partition_load_records.labels(str(partition)).value = records

    # -- scrape-time providers ------------------------------------------------
    def watch_groups(self, groups_by_state: Callable[[], Mapping[str, int]], members: Callable[[], int]) -> None:
        """Register how to count groups per state and members when scraped."""
        self._groups_by_state = groups_by_state
        self._members = members

    def watch_offsets(
        self, committed_offsets: Callable[[], int], group_offsets: Callable[[], Iterable[GroupOffset]] | None = None
    ) -> None:
        """Register the committed-offset count (and, if enabled, every offset)."""
        self._committed_offsets = committed_offsets
        self._group_offsets = group_offsets

    def watch_log(self, partitions: Callable[[], Iterable[LogPartitionStats]]) -> None:
        self._log_partitions = partitions

    @property
    def watching_log(self) -> bool:
        return self._log_partitions is not None

    @property
    def watching_group_offsets(self) -> bool:
        return self._group_offsets is not None

    def watch_group_health(self, health: Callable[[], Iterable]) -> None:
        """Register how to evaluate groups' health (`group_health.GroupHealth` items) when scraped."""
        self._group_health = health

    def watch_readiness(self, state: Callable[[], str]) -> None:
        """Register the server state ("loading", "ready", "stopping") for /health."""
        self._readiness = state

    def watch_failed_partitions(self, failed: Callable[[], Mapping[int, str]]) -> None:
        """Register the offsets partitions that failed to load (partition -> reason), for /health and a gauge."""
        self._failed_partitions = failed

    def failed_partitions(self) -> Mapping[int, str]:
        failed = self._provide("failed_partitions", self._failed_partitions)
        return failed if isinstance(failed, Mapping) else {}

    def health(self) -> tuple[bool, str]:
        """(healthy, body) for /health: ready with every partition loaded, else what is wrong."""
        state = self.readiness()
        failed = self.failed_partitions() if state == "ready" else {}
        if failed:
            lines = [f"degraded: {len(failed)} offsets partition(s) failed to load; their groups answer "
                     "NOT_COORDINATOR until repaired"]
            lines += [f"partition {p}: {reason}" for p, reason in sorted(failed.items())]
            return False, "\n".join(lines) + "\n"
        return state == "ready", f"{state}\n"

    def readiness(self) -> str:
        if self._readiness is None:
            return "loading"
        try:
            return self._readiness()
        except Exception:  # a probe must answer, whatever the server is doing
            log.exception("readiness callback failed")
            return "unknown"

    def state_summary(self) -> dict[str, int]:
        """Groups, members and offsets held now (for the start log line)."""
        summary: dict[str, int] = {}
        groups = self._provide("groups", self._groups_by_state)
        if isinstance(groups, Mapping):
            summary["groups"] = sum(groups.values())
        for name, provider in (("members", self._members), ("offsets", self._committed_offsets)):
            value = self._provide(name, provider)
            if isinstance(value, int):
                summary[name] = value
        return summary

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes (built here, on the caller's thread)."""
        return generate_latest(self.registry)

    async def scrape(self) -> bytes:
        """`exposition` for /metrics: collected on the loop, rendered on a worker thread; shared while it is built."""
        scrape = self._scrape
        if scrape is None or scrape.done():
            collected = _Collected(list(self.registry.collect()))
            scrape = self._scrape = asyncio.get_running_loop().run_in_executor(None, generate_latest, collected)
        return await asyncio.shield(scrape)

    def _provide(self, name: str, provider: Callable[[], object] | None) -> object | None:
        if provider is None:
            return None
        try:
            return provider()
        except Exception:
            if name not in self._failed_providers:  # log once, not every scrape
                self._failed_providers.add(name)
                log.exception("metrics provider %s failed; its series are omitted", name)
            return None


def _error_name(code: int) -> str:
    try:
        from cohort.protocol.errors import ErrorCode

        return ErrorCode(code).name
    except Exception:  # an unknown code still gets a bounded, readable label
        return f"code_{code}" if -1 <= code <= 200 else "unknown"


class _ScrapeTimeCollector:
    """Gauges computed from the owners' callbacks, only when scraped."""

    def __init__(self, metrics: CoordinatorMetrics) -> None:
        self._m = metrics

    def describe(self):
        return [family.render() for family in self._m.families] + [
            GaugeMetricFamily("cohort_groups", "Groups, by state.", labels=["state"]),
            GaugeMetricFamily("cohort_group_members", "Members of all groups."),
            GaugeMetricFamily("cohort_committed_offsets", "Committed offsets held (group, topic, partition)."),
            GaugeMetricFamily("cohort_log_size_bytes", "Offsets-log bytes on disk, by partition.", labels=["partition"]),
            GaugeMetricFamily("cohort_log_segments", "Offsets-log segments, by partition.", labels=["partition"]),
            GaugeMetricFamily("cohort_ready", "1 when the server is ready, 0 while loading or stopping."),
            *_health_families(group_labels=self._m.group_labels),
            *(_partition_families((), self._m) if self._m.group_offsets_enabled else ()),
            CounterMetricFamily("cohort_consumergroup_partition_series_dropped", "Group partitions left out of the "
                                "per-partition series.", value=0),
            GaugeMetricFamily("cohort_offsets_partitions_failed",
                              "Offsets partitions that failed to load (their groups are unavailable)."),
        ]

    def collect(self):
        m = self._m
        for family in m.families:
            yield family.render()
        by_state = m._provide("groups", m._groups_by_state)
        groups = GaugeMetricFamily("cohort_groups", "Groups, by state.", labels=["state"])
        counts = dict(by_state) if isinstance(by_state, Mapping) else {}
        for state in GROUP_STATES:
            groups.add_metric([state], counts.get(state, 0))
        yield groups

        members = m._provide("members", m._members)
        yield GaugeMetricFamily("cohort_group_members", "Members of all groups.", value=members or 0)

        committed = m._provide("committed_offsets", m._committed_offsets)
        yield GaugeMetricFamily(
            "cohort_committed_offsets", "Committed offsets held (group, topic, partition).", value=committed or 0
        )

        if m.group_offsets_enabled:
            per_group = GaugeMetricFamily(
                "cohort_group_committed_offset", "Committed offset per group, topic and partition "
                f"(at most metrics.group.offsets.max.partitions series).", labels=["group", "topic", "partition"],
            )
            budget = m.partition_series_max
            for item in m._provide("group_offsets", m._group_offsets) or ():
                if budget <= 0:
                    m._partition_series_dropped += 1
                    continue
                budget -= 1
                per_group.add_metric([group_label(item.group), item.topic, str(item.partition)], item.offset)
            yield per_group

        size = GaugeMetricFamily("cohort_log_size_bytes", "Offsets-log bytes on disk, by partition.", labels=["partition"])
        segments = GaugeMetricFamily("cohort_log_segments", "Offsets-log segments, by partition.", labels=["partition"])
        for stats in m._provide("log", m._log_partitions) or ():
            size.add_metric([str(stats.partition)], stats.size_bytes)
            segments.add_metric([str(stats.partition)], stats.segments)
        yield size
        yield segments

        reports = list(m._provide("group_health", m._group_health) or ())
        yield from _health_families(reports, group_labels=m.group_labels)
        if m.group_offsets_enabled:
            yield from _partition_families(reports, m)
        yield CounterMetricFamily(
            "cohort_consumergroup_partition_series_dropped",
            "Group partitions left out of the per-partition series (cohort_consumergroup_*, cohort_group_committed_"
            "offset) because metrics.group.offsets.max.partitions was reached, counted at every scrape.",
            value=m._partition_series_dropped)

        yield GaugeMetricFamily(
            "cohort_ready", "1 when the server is ready, 0 while loading or stopping.",
            value=1 if m.readiness() == "ready" else 0,
        )
        yield GaugeMetricFamily(
            "cohort_offsets_partitions_failed", "Offsets partitions that failed to load (their groups are unavailable).",
            value=len(m.failed_partitions()),
        )


# Per-partition health series are exported only for unhealthy partitions, and at most this many.
MAX_PARTITION_HEALTH_SERIES = 1000
# Burrow's status numbers (its exporters' gauge values): group OK 1, WARN 2, ERR 3; partition STOP 4, STALL 5,
# REWIND 6 (see groups/reports/health.py).
HEALTH_VALUES = {"OK": 1, "WARN": 2, "ERR": 3, "STOP": 4, "STALL": 5, "REWIND": 6}
_GROUP_HEALTH = ("OK", "WARN", "ERR")
_PARTITION_HEALTH = ("OK", "WARN", "STOP", "STALL", "REWIND")


def _health_families(reports=(), group_labels: bool = True):
    """Group health gauges: one series per group, per unhealthy partition (bounded), member ages, and lag
    (per group, against reported end offsets; partitions without one are counted, not guessed); without
    group labels, the number of groups and of unhealthy partitions per status, and the oldest age."""
    if not group_labels:
        return _aggregated_health_families(reports)
    status = GaugeMetricFamily("cohort_group_health", "Group health by Burrow's rules: 1 OK, 2 WARN, 3 ERR.",
                               labels=["group", "type"])
    partitions = GaugeMetricFamily(
        "cohort_group_partition_health",
        f"Health of unhealthy partitions only (2 WARN, 4 STOP, 5 STALL, 6 REWIND; at most "
        f"{MAX_PARTITION_HEALTH_SERIES} series).", labels=["group", "topic", "partition"])
    heartbeat = GaugeMetricFamily("cohort_group_heartbeat_age_max_seconds",
                                  "Longest time since a member of the group last heartbeated.", labels=["group"])
    lag = GaugeMetricFamily("cohort_group_lag",
                            "Records the group has yet to consume: reported end offset minus committed offset, "
                            "summed over its partitions with a reported end (absent when none has one).",
                            labels=["group"])
    unknown = GaugeMetricFamily("cohort_group_lag_unknown_partitions",
                                "Partitions of the group whose lag is unknown: no source reported their end offset.",
                                labels=["group"])
    budget = MAX_PARTITION_HEALTH_SERIES
    for report in reports:
        label = group_label(report.group)
        status.add_metric([label, report.group_type], HEALTH_VALUES[report.status])
        if report.total_lag is not None:
            lag.add_metric([label], report.total_lag)
        unknown.add_metric([label], report.partitions_without_end)
        for p in report.partitions:
            if p.status != "OK" and budget > 0:
                budget -= 1
                partitions.add_metric([label, p.topic, str(p.partition)], HEALTH_VALUES[p.status])
        ages = [mh.heartbeat_age_ms for mh in report.members if mh.heartbeat_age_ms is not None]
        if ages:
            heartbeat.add_metric([label], max(ages) / 1000)
    return [status, partitions, heartbeat, lag, unknown]


def _partition_families(reports, m: "CoordinatorMetrics"):
    """kafka-exporter's per-partition shape ({consumergroup, topic, partition}), from the health reports: the
    committed offset and lag of every partition (lag only where an end was reported), the lag summed per
    topic, and the members per group; at most `partition_series_max` partitions, the rest counted."""
    current = GaugeMetricFamily("cohort_consumergroup_current_offset", "Committed offset of a group's partition.",
                                labels=["consumergroup", "topic", "partition"])
    lag = GaugeMetricFamily("cohort_consumergroup_lag", "Lag of a group's partition: reported end offset minus "
                            "committed offset (absent while no end is reported).",
                            labels=["consumergroup", "topic", "partition"])
    lag_sum = GaugeMetricFamily("cohort_consumergroup_lag_sum", "A group's lag summed over a topic's partitions "
                                "with a reported end.", labels=["consumergroup", "topic"])
    members = GaugeMetricFamily("cohort_consumergroup_members", "Members of a group.", labels=["consumergroup"])
    budget = m.partition_series_max
    for report in reports:
        label = group_label(report.group)
        members.add_metric([label], len(report.members))
        sums: dict[str, int] = {}
        for p in report.partitions:
            if p.lag is not None:
                sums[p.topic] = min(LAG_MAX, sums.get(p.topic, 0) + p.lag)
            if budget <= 0:
                m._partition_series_dropped += 1
                continue
            budget -= 1
            current.add_metric([label, p.topic, str(p.partition)], p.offset)
            if p.lag is not None:
                lag.add_metric([label, p.topic, str(p.partition)], p.lag)
        for topic, total in sorted(sums.items()):
            lag_sum.add_metric([label, topic], total)
    return [current, lag, lag_sum, members]


def _aggregated_health_families(reports=()):
    groups = GaugeMetricFamily("cohort_group_health_groups", "Groups per health status (no group ids: "
                               "metrics.group.id.labels.enable=false).", labels=["status"])
    partitions = GaugeMetricFamily("cohort_group_partition_health_partitions", "Unhealthy partitions of all groups, "
                                   "per status (no group ids).", labels=["status"])
    heartbeat = GaugeMetricFamily("cohort_group_heartbeat_age_max_seconds",
                                  "Longest time since a member of any group last heartbeated (no group ids).")
    by_status = dict.fromkeys(_GROUP_HEALTH, 0)
    unhealthy = {status: 0 for status in _PARTITION_HEALTH if status != "OK"}
    oldest = 0.0
    for report in reports:
        by_status[report.status] += 1
        for p in report.partitions:
            if p.status in unhealthy:
                unhealthy[p.status] += 1
        ages = [mh.heartbeat_age_ms for mh in report.members if mh.heartbeat_age_ms is not None]
        if ages:
            oldest = max(oldest, max(ages) / 1000)
    for status, count in by_status.items():
        groups.add_metric([status], count)
    for status, count in unhealthy.items():
        partitions.add_metric([status], count)
    heartbeat.add_metric([], oldest)
    return [groups, partitions, heartbeat]
