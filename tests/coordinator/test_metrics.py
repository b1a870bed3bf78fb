"""Metrics: recorders move the right series, scrape-time gauges read their owners, HTTP serves both."""
from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from cohort.coordinator.metrics import CoordinatorMetrics, GroupOffset, LogPartitionStats
from cohort.coordinator.metrics_http import MetricsHttpServer


def samples(metrics: CoordinatorMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse the exposition text exactly as Prometheus would."""
    out = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_request_recorders_update_counts_errors_and_latency():
    metrics = CoordinatorMetrics(process_metrics=False)
    for _ in range(3):
        metrics.observe_request(8, 2, 0.002)
    metrics.observe_request(9, 5, 0.5)
    metrics.count_request_error(8, 22, count=2)

    s = samples(metrics)
    assert s[("cohort_requests_total", (("api", "OffsetCommit"), ("version", "2")))] == 3
    assert s[("cohort_requests_total", (("api", "OffsetFetch"), ("version", "5")))] == 1
    assert s[("cohort_request_duration_seconds_count", (("api", "OffsetCommit"),))] == 3
    assert s[("cohort_request_duration_seconds_bucket", (("api", "OffsetCommit"), ("le", "0.0025")))] == 3
    assert s[("cohort_request_duration_seconds_bucket", (("api", "OffsetFetch"), ("le", "0.25")))] == 0
    errors = [v for (name, labels), v in s.items() if name == "cohort_request_errors_total"]
    assert errors == [2]


def test_unknown_api_keys_share_one_bounded_label():
    metrics = CoordinatorMetrics(process_metrics=False)
    for key in range(1000, 1100):
        metrics.observe_request(key, 0, 0.001)
    s = samples(metrics)
    unknown = [labels for (name, labels) in s if name == "cohort_requests_total"]
    assert unknown == [(("api", "unknown"), ("version", "unknown"))]
    assert s[("cohort_requests_total", (("api", "unknown"), ("version", "unknown")))] == 100


def test_histogram_buckets_are_cumulative_with_le_semantics():
    metrics = CoordinatorMetrics(process_metrics=False)
    for seconds in (0.001, 0.001, 0.0025, 0.003, 400.0):  # 0.0025 sits exactly on a bound
        metrics.observe_request(9, 1, seconds)
    s = samples(metrics)
    bucket = lambda le: s[("cohort_request_duration_seconds_bucket", (("api", "OffsetFetch"), ("le", le)))]  # noqa: E731
    assert bucket("0.0005") == 0
    assert bucket("0.001") == 2
    assert bucket("0.0025") == 3
    assert bucket("0.005") == 4
    assert bucket("300.0") == 4
    assert bucket("+Inf") == 5
    assert s[("cohort_request_duration_seconds_count", (("api", "OffsetFetch"),))] == 5
    assert s[("cohort_request_duration_seconds_sum", (("api", "OffsetFetch"),))] == pytest.approx(400.0075)


def test_connections_open_accepted_and_closed_by_reason():
    metrics = CoordinatorMetrics(process_metrics=False)
    for _ in range(3):
        metrics.connection_accepted()
    metrics.connection_closed("idle")
    metrics.connection_closed("made-up reason")
    metrics.connection_closed("limit")  # refused: never counted as open
    s = samples(metrics)
    assert s[("cohort_connections_open", ())] == 1
    assert s[("cohort_connections_accepted_total", ())] == 3
    assert s[("cohort_connections_closed_total", (("reason", "idle"),))] == 1
    assert s[("cohort_connections_closed_total", (("reason", "other"),))] == 1
    assert s[("cohort_connections_closed_total", (("reason", "limit"),))] == 1


def test_rebalances_commits_flushes_compactions_and_loads():
    metrics = CoordinatorMetrics(process_metrics=False)
    metrics.rebalance_completed("member_joined", 1.5)
    metrics.rebalance_completed("some client string", 0.1)
    metrics.member_expired()
    metrics.offsets_committed(6)
    metrics.offsets_expired(4)
    metrics.log_flushed(records=40, fsync_seconds=0.002)
    metrics.log_compacted(bytes_reclaimed=4096, seconds=0.2)
    metrics.partition_loaded(7, seconds=0.03, records=120)
    s = samples(metrics)
    assert s[("cohort_rebalances_total", (("reason", "member_joined"),))] == 1
    assert s[("cohort_rebalances_total", (("reason", "other"),))] == 1
    assert s[("cohort_rebalance_duration_seconds_count", ())] == 2
    assert s[("cohort_member_expirations_total", ())] == 1
    assert s[("cohort_offset_commits_total", ())] == 6
    assert s[("cohort_offsets_expired_total", ())] == 4
    assert s[("cohort_log_flush_batch_records_sum", ())] == 40
    assert s[("cohort_log_fsync_duration_seconds_count", ())] == 1
    assert s[("cohort_log_compactions_total", ())] == 1
    assert s[("cohort_log_compaction_reclaimed_bytes_total", ())] == 4096
    assert s[("cohort_partition_load_duration_seconds", (("partition", "7"),))] == 0.03
    assert s[("cohort_partition_load_records", (("partition", "7"),))] == 120


def test_state_gauges_are_read_from_their_owners_at_scrape_time():
    metrics = CoordinatorMetrics(process_metrics=False)
    groups = {"Stable": 2, "Empty": 1}
    metrics.watch_groups(lambda: groups, lambda: 5)
    metrics.watch_offsets(lambda: 12)
    metrics.watch_log(lambda: [LogPartitionStats(partition=3, size_bytes=1000, segments=2)])
    s = samples(metrics)
    assert s[("cohort_groups", (("state", "Stable"),))] == 2
    assert s[("cohort_groups", (("state", "Dead"),))] == 0
    assert s[("cohort_group_members", ())] == 5
    assert s[("cohort_committed_offsets", ())] == 12
    assert s[("cohort_log_size_bytes", (("partition", "3"),))] == 1000
    assert s[("cohort_log_segments", (("partition", "3"),))] == 2

    groups["Stable"] = 3  # no recorder call: the next scrape sees the owner's state
    assert samples(metrics)[("cohort_groups", (("state", "Stable"),))] == 3


def test_per_group_offsets_only_when_enabled():
    offsets = lambda: [GroupOffset("g", "t", 0, 42)]  # noqa: E731
    off = CoordinatorMetrics(process_metrics=False)
    off.watch_offsets(lambda: 1, offsets)
    assert not [k for k in samples(off) if k[0] == "cohort_group_committed_offset"]

    on = CoordinatorMetrics(process_metrics=False, group_offsets_enabled=True)
    on.watch_offsets(lambda: 1, offsets)
    assert samples(on)[("cohort_group_committed_offset", (("group", "g"), ("partition", "0"), ("topic", "t")))] == 42


def test_a_failing_provider_drops_its_series_but_not_the_scrape():
    metrics = CoordinatorMetrics(process_metrics=False)
    metrics.watch_groups(lambda: 1 / 0, lambda: 4)
    s = samples(metrics)
    assert s[("cohort_group_members", ())] == 4
    assert s[("cohort_groups", (("state", "Stable"),))] == 0


async def http_get(port: int, path: str, method: str = "GET") -> tuple[int, bytes]:
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def test_http_serves_metrics_and_readiness():
    metrics = CoordinatorMetrics()
    state = {"now": "loading"}
    metrics.watch_readiness(lambda: state["now"])
    server = MetricsHttpServer(metrics, "127.0.0.1", 0)
    await server.start()
    try:
        assert server.port != 0
        assert await http_get(server.port, "/health") == (503, b"loading\n")
        state["now"] = "ready"
        assert await http_get(server.port, "/ready") == (200, b"ready\n")
        status, body = await http_get(server.port, "/metrics")
        assert status == 200
        assert b"cohort_ready 1.0" in body
        assert b"process_resident_memory_bytes" in body
        assert (await http_get(server.port, "/nope"))[0] == 404
        assert (await http_get(server.port, "/metrics", method="POST"))[0] == 405
        assert await http_get(server.port, "/health", method="HEAD") == (200, b"")
    finally:
        await server.stop()


async def test_http_survives_garbage_and_half_requests():
    metrics = CoordinatorMetrics(process_metrics=False)
    metrics.watch_readiness(lambda: "ready")
    server = MetricsHttpServer(metrics, "127.0.0.1", 0)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"\x00" * 20000)  # not HTTP (a Kafka client's frame starts so): said at once, then closed
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 5)
        assert answer.startswith(b"HTTP/1.1 400 ") and answer.endswith(b"Kafka clients use its listener\n")
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /he")
        writer.close()
        assert await http_get(server.port, "/health") == (200, b"ready\n")
    finally:
        await server.stop()


async def test_http_port_in_use_raises_oserror():
    metrics = CoordinatorMetrics(process_metrics=False)
    first = MetricsHttpServer(metrics, "127.0.0.1", 0)
    await first.start()
    try:
        with pytest.raises(OSError):
            await MetricsHttpServer(metrics, "127.0.0.1", first.port).start()
    finally:
        await first.stop()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), max_size=60))
def test_histogram_agrees_with_counting_by_hand(values):
    from cohort.coordinator.metrics import HistogramChild

    bounds = (0.001, 0.01, 0.1, 1.0, 10.0)
    child = HistogramChild(bounds)
    for v in values:
        child.observe(v)
    for i, bound in enumerate(bounds):
        assert sum(child.counts[: i + 1]) == sum(1 for v in values if v <= bound)
    assert sum(child.counts) == len(values)
    assert child.sum == pytest.approx(sum(values))


async def test_per_partition_series_are_capped_and_what_is_left_out_is_counted():
    from prometheus_client.parser import text_string_to_metric_families

    from cohort.coordinator.groups.reports.health import GroupHealth, PartitionHealth

    def report(group: str, partitions: int) -> GroupHealth:
        return GroupHealth(group, "OK", 0, 10, 1000, tuple(PartitionHealth("t", p, "OK", 10 * p, 0, 0, 100, 100 - 10 * p)
                                                             for p in range(partitions)), ())

    metrics = CoordinatorMetrics(process_metrics=False, group_offsets_enabled=True, partition_series_max=3)
    metrics.watch_group_health(lambda: [report("a", 2), report("b", 2)])
    for scrape in (1, 2):
        samples = [s for f in text_string_to_metric_families((await metrics.scrape()).decode()) for s in f.samples]
        lags = [(s.labels["consumergroup"], s.labels["partition"], s.value) for s in samples
                if s.name == "cohort_consumergroup_lag"]
        assert lags == [("a", "0", 100.0), ("a", "1", 90.0), ("b", "0", 100.0)]  # 3 of the 4 partitions
        assert [s.value for s in samples if s.name == "cohort_consumergroup_lag_sum"] == [190.0, 190.0]
        dropped = [s.value for s in samples if s.name == "cohort_consumergroup_partition_series_dropped_total"]
        assert dropped == [float(scrape)]  # one more left out at every scrape
    off = CoordinatorMetrics(process_metrics=False)  # off by default: no per-partition series at all
    off.watch_group_health(lambda: [report("a", 2)])
    assert b"cohort_consumergroup_lag{" not in await off.scrape()
