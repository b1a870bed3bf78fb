"""`cohort serve` as operators run it: configured from file + env + flags, scraped, signalled, restarted.

Every test runs the real console script in a subprocess and talks to it over
real sockets (kafka-python, or our own codec for raw pipelined load).
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import textwrap
import time
from collections import deque

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bounded_wait import wait_until
from cohort_process import CohortServer, clean_env, free_port, http_get, metric_value, run_cohort
from cohort.protocol.framing import FrameReader, decode_response, encode_request
from cohort.protocol.messages import MetadataRequest, OffsetCommitRequest, OffsetFetchRequest

pytestmark = pytest.mark.timeout(180)


async def roundtrip(port: int, message, version: int):
    """One request over a fresh connection; returns the decoded response."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
    try:
        writer.write(encode_request(message, version, correlation_id=1, client_id="daemon-test"))
        frames = FrameReader()
        while True:
            data = await asyncio.wait_for(reader.read(65536), 10)
            assert data, "server closed the connection"
            got = frames.feed(data)
            if got:
                correlation_id, response = decode_response(message.API_KEY, version, got[0])
                assert correlation_id == 1
                return response
    finally:
        writer.close()


async def committed_offset(port: int, group: str, topic: str, partition: int) -> int:
    request = OffsetFetchRequest(
        group_id=group, topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[partition])]
    )
    response = await roundtrip(port, request, 1)
    (part,) = response.topics[0].partitions
    assert part.error_code == 0
    return part.committed_offset


def simple_commit(group: str, topic: str, partition: int, offset: int, metadata: str = "") -> OffsetCommitRequest:
    Topic = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="",
        topics=[Topic(name=topic, partitions=[Topic.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_metadata=metadata)])],
    )


async def test_serve_runs_with_the_config_that_config_show_reports(tmp_path):
    """Given a config file, env vars and flags, the server and `config show` agree on every value."""
    config_file = tmp_path / "cohort.toml"
    config_file.write_text(textwrap.dedent("""
        node.id = 5
        num.partitions = 3
        offset.metadata.max.bytes = 10
    """))
    env = clean_env(COHORT_CONFIG=str(config_file), COHORT_NODE_ID="6", COHORT_NUM_PARTITIONS="4")
    advertised_port = free_port()
    server = CohortServer(tmp_path / "data", "--num.partitions", "2",
                          "--advertised", f"localhost:{advertised_port}", env=env)
    shown = run_cohort("config", "show", "--output", "json", *server.args[1:], env=env)
    assert shown.returncode == 0, shown.stderr
    effective = json.loads(shown.stdout)
    assert effective["node.id"] == {"value": 6, "source": "env", "from": "COHORT_NODE_ID"}
    assert effective["num.partitions"] == {"value": 2, "source": "flag", "from": "--num.partitions"}
    assert effective["offset.metadata.max.bytes"] == {"value": 10, "source": "file", "from": str(config_file)}
    assert effective["advertised.listeners"]["value"] == f"localhost:{advertised_port}"

    server.start()
    try:
        metadata = await roundtrip(server.port, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name="configured")], allow_auto_topic_creation=True), 4)
        (broker,) = metadata.brokers
        assert (broker.node_id, broker.host, broker.port) == (6, "localhost", advertised_port)
        (topic,) = metadata.topics
        assert len(topic.partitions) == 2  # the flag beat env and file

        # above the file's offset.metadata.max.bytes of 10
        response = await roundtrip(server.port, simple_commit("g", "configured", 0, 1, metadata="x" * 11), 2)
        assert response.topics[0].partitions[0].error_code == 12  # OFFSET_METADATA_TOO_LARGE
    finally:
        assert server.stop() == 0, server.stderr()


@pytest.fixture(scope="module")
def scrapes_around_kafka_python_traffic(tmp_path_factory):
    """/metrics scraped before and after one kafka-python consumer joins, commits, reads back and leaves."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    server = CohortServer(tmp_path_factory.mktemp("metrics") / "data").start()
    try:
        # Create the topic first: when it appears under a consumer that already joined, kafka-python
        # 3.0.12 sometimes never finishes the follow-up rebalance (it stops heartbeating after SyncGroup).
        asyncio.run(roundtrip(server.port, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name="metrics-topic")], allow_auto_topic_creation=True), 4))
        before = server.scrape()
        consumer = KafkaConsumer(
            bootstrap_servers=server.bootstrap, group_id="metrics-group", enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500,
            request_timeout_ms=10000,
        )
        try:
            # Know the topic's partitions before joining: a leader that joins without them assigns
            # nothing and rebalances again at once, the kafka-python 3.0.12 case described above.
            deadline = time.monotonic() + 30
            while not consumer.partitions_for_topic("metrics-topic"):
                assert time.monotonic() < deadline, "no metadata for metrics-topic"
                time.sleep(0.05)
            consumer.subscribe(["metrics-topic"])
            while not consumer.assignment():
                assert time.monotonic() < deadline, "no assignment"
                consumer.poll(timeout_ms=200)
            consumer.commit({TopicPartition("metrics-topic", 0): OffsetAndMetadata(42, "m", -1)})
            # kafka-python answers committed() from an OffsetFetch its poll may still have in flight
            # (sent before the commit), so read until the commit shows, within a bound.
            while consumer.committed(TopicPartition("metrics-topic", 0)) != 42:
                assert time.monotonic() < deadline, "commit never visible"
                time.sleep(0.05)
        finally:
            consumer.close()
        after = server.scrape()
    finally:
        assert server.stop() == 0, server.stderr()
    return before, after


def test_request_and_connection_series_move_with_client_traffic(scrapes_around_kafka_python_traffic):
    before, after = scrapes_around_kafka_python_traffic
    assert metric_value(before, "cohort_ready") == 1
    for api in ("ApiVersions", "Metadata", "FindCoordinator", "JoinGroup", "SyncGroup", "OffsetCommit", "OffsetFetch"):
        assert metric_value(after, "cohort_requests_total", api=api) > metric_value(before, "cohort_requests_total", api=api), api
    assert metric_value(after, "cohort_request_duration_seconds_count", api="OffsetCommit") >= 1
    assert metric_value(after, "cohort_connections_accepted_total") >= 1
    assert metric_value(after, "cohort_connections_closed_total", reason="client") >= 1


def test_group_and_offset_series_move_with_client_traffic(scrapes_around_kafka_python_traffic):
    before, after = scrapes_around_kafka_python_traffic
    assert metric_value(after, "cohort_offset_commits_total") > metric_value(before, "cohort_offset_commits_total")
    assert metric_value(after, "cohort_committed_offsets") >= 1
    assert sum(metric_value(after, "cohort_groups", state=s) for s in ("Empty", "Stable", "PreparingRebalance")) >= 1


def test_offsets_log_series_move_with_client_traffic(scrapes_around_kafka_python_traffic):
    before, after = scrapes_around_kafka_python_traffic
    assert metric_value(after, "cohort_log_size_bytes") > metric_value(before, "cohort_log_size_bytes")
    assert metric_value(after, "cohort_log_segments") >= 1
    assert metric_value(after, "cohort_log_fsync_duration_seconds_count") >= 1
    assert metric_value(after, "cohort_log_flush_batch_records_sum") >= 1


def test_rebalance_series_move_with_client_traffic(scrapes_around_kafka_python_traffic):
    before, after = scrapes_around_kafka_python_traffic
    assert metric_value(after, "cohort_rebalances_total") > metric_value(before, "cohort_rebalances_total")
    assert metric_value(after, "cohort_rebalance_duration_seconds_count") >= 1


async def test_per_group_offset_series_only_when_enabled(tmp_path):
    server = CohortServer(tmp_path / "data", "--metrics.group.offsets.enable", "true").start()
    try:
        response = await roundtrip(server.port, simple_commit("tracked", "orders", 3, 1234), 2)
        assert response.topics[0].partitions[0].error_code == 0
        scraped = server.scrape()
        assert metric_value(scraped, "cohort_group_committed_offset", group="tracked", topic="orders", partition="3") == 1234
        assert metric_value(scraped, "cohort_committed_offsets") == 1
    finally:
        assert server.stop() == 0, server.stderr()
    plain = CohortServer(tmp_path / "data").start()
    try:
        families = {family.name: family for family in text_string_to_metric_families(plain.scrape())}
        assert "cohort_group_committed_offset" not in families
        assert not any(name.startswith("cohort_consumergroup_") and name != "cohort_consumergroup_partition_series_dropped"
                       for name in families), sorted(families)
    finally:
        assert plain.stop() == 0, plain.stderr()


async def test_per_partition_series_stop_at_their_cap_and_count_what_was_left_out(tmp_path):
    server = CohortServer(tmp_path / "data", "--metrics.group.offsets.enable", "true",
                          "--metrics.group.offsets.max.partitions", "2").start()
    try:
        for partition in range(3):
            response = await roundtrip(server.port, simple_commit("wide", "orders", partition, 10 + partition), 2)
            assert response.topics[0].partitions[0].error_code == 0

        def scraped() -> tuple[list, float]:
            samples = [s for f in text_string_to_metric_families(server.scrape()) for s in f.samples]
            kept = [s for s in samples if s.name == "cohort_group_committed_offset"]
            dropped = [s.value for s in samples if s.name == "cohort_consumergroup_partition_series_dropped_total"]
            return kept, dropped[0]

        kept, dropped = scraped()
        assert len(kept) == 2 and {s.labels["group"] for s in kept} == {"wide"}, kept
        assert dropped >= 1
        kept, again = scraped()
        assert len(kept) == 2 and again > dropped  # counted at every scrape
    finally:
        assert server.stop() == 0, server.stderr()


async def commit_load(port: int, group: str, stop: asyncio.Event, acked: dict, sent: dict, window: int = 8) -> None:
    """Pipelined simple commits of increasing offsets for one group, until the server goes away."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
    except OSError:
        return
    frames, in_flight, offset = FrameReader(), deque(), 0
    try:
        while True:
            while len(in_flight) < window and not stop.is_set():
                offset += 1
                writer.write(encode_request(simple_commit(group, "load", 0, offset), 2, correlation_id=offset))
                in_flight.append(offset)
                sent[group] = offset
            if not in_flight:
                return
            data = await asyncio.wait_for(reader.read(65536), 15)
            if not data:
                return
            for frame in frames.feed(data):
                correlation_id, response = decode_response(8, 2, frame)
                assert correlation_id == in_flight.popleft(), "responses out of order"
                if response.topics[0].partitions[0].error_code == 0:
                    acked[group] = max(acked.get(group, 0), correlation_id)
    except (ConnectionError, asyncio.TimeoutError):
        return
    finally:
        writer.close()


async def test_sigterm_under_commit_load_exits_zero_and_keeps_every_acknowledged_commit(tmp_path):
    data_dir = tmp_path / "data"
    server = CohortServer(data_dir).start()
    groups = [f"load-{i}" for i in range(4)]
    acked: dict[str, int] = {}
    sent: dict[str, int] = {}
    stop = asyncio.Event()
    load = [asyncio.create_task(commit_load(server.port, g, stop, acked, sent)) for g in groups]
    try:
        deadline = time.monotonic() + 30
        while sum(acked.values()) < 400:
            assert time.monotonic() < deadline, f"load too slow: {acked}"
            assert not all(t.done() for t in load), "every load connection ended early"
            await asyncio.sleep(0.02)
        server.signal(signal.SIGTERM)  # mid-load: commits are still being sent
        code = await asyncio.to_thread(server.wait, 30)
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*load), 30)
    assert code == 0, server.stderr()
    assert "Traceback" not in server.stderr()

    restarted = CohortServer(data_dir).start()
    try:
        for group in groups:
            committed = await committed_offset(restarted.port, group, "load", 0)
            assert acked.get(group, 0) <= committed <= sent[group], (group, acked, sent, committed)
    finally:
        assert restarted.stop() == 0, restarted.stderr()


async def test_second_server_on_the_same_data_dir_is_refused(tmp_path):
    first = CohortServer(tmp_path / "data").start()
    try:
        second = CohortServer(tmp_path / "data")
        result = run_cohort(*second.args)
        assert result.returncode != 0
        assert result.stderr.strip().splitlines() == [
            f"cohort: error: data dir {tmp_path / 'data'} is in use by another cohort server (pid {first.process.pid})"
        ]
        assert http_get(f"http://127.0.0.1:{first.metrics_port}/health")[0] == 200  # the first one is unharmed
    finally:
        assert first.stop() == 0, first.stderr()


def test_kafka_port_in_use_is_refused_with_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cohort("serve", "--listen", f"127.0.0.1:{port}", "--metrics", f"127.0.0.1:{free_port()}",
                            "--data-dir", str(tmp_path / "data"))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    # The port is bound before the data dir is touched: one line, naming the flag, and no data dir left behind.
    assert result.stderr.strip().splitlines() == [
        f"cohort: error: cannot listen for clients on 127.0.0.1:{port}: address already in use "
        "(choose another address with --listen)"]
    assert not (tmp_path / "data").exists()


def test_an_unresolvable_listen_host_is_refused_before_the_data_dir_is_created(tmp_path):
    result = run_cohort("serve", "--listen", "nosuchhost.invalid:19092", "--metrics", f"127.0.0.1:{free_port()}",
                        "--data-dir", str(tmp_path / "data"))
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("cohort: error: cannot listen for clients on nosuchhost.invalid:19092: ")
    assert line.endswith("(choose another address with --listen)")
    assert not (tmp_path / "data").exists()


async def test_sighup_reopens_the_log_file_and_logs_are_structured(tmp_path):
    log_file = tmp_path / "cohort.log"
    server = CohortServer(tmp_path / "data", "--log-file", str(log_file), "--log-format", "json").start()
    try:
        def started_lines() -> list[dict]:  # written once serving (a loaded machine may be a moment behind)
            complete = log_file.read_text().split("\n")[:-1]  # (a line being written is not one yet)
            return [line for line in map(json.loads, complete) if line["msg"] == "cohort started"]
        (started,) = wait_until(started_lines, 30, "'cohort started' in the log file")
        assert started["data_dir"] == str(tmp_path / "data") and started["version"]
        log_file.rename(tmp_path / "cohort.log.1")
        server.signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while not (log_file.exists() and "log file reopened" in log_file.read_text()):
            assert time.monotonic() < deadline, "log file was not reopened"
            time.sleep(0.05)
    finally:
        assert server.stop() == 0, server.stderr()
    assert any(json.loads(line)["msg"] == "cohort stopped" for line in log_file.read_text().splitlines())


def test_sigint_stops_gracefully_too(tmp_path):
    server = CohortServer(tmp_path / "data").start()
    server.signal(signal.SIGINT)
    assert server.wait(30) == 0, server.stderr()
    assert "Traceback" not in server.stderr()


async def test_a_second_signal_exits_at_once_and_the_log_still_loads(tmp_path):
    data_dir = tmp_path / "data"
    server = CohortServer(data_dir).start()
    response = await roundtrip(server.port, simple_commit("before-exit", "t", 0, 77), 2)
    assert response.topics[0].partitions[0].error_code == 0
    # Two different signals pending together are handled in one loop pass:
    # the first starts the graceful stop, the second must cut it short.
    pid = server.process.pid
    os.kill(pid, signal.SIGSTOP)
    os.kill(pid, signal.SIGTERM)
    os.kill(pid, signal.SIGINT)
    os.kill(pid, signal.SIGCONT)
    code = await asyncio.to_thread(server.wait, 30)
    assert code in (128 + signal.SIGINT, 128 + signal.SIGTERM), server.stderr()
    assert "second signal" in server.stderr()
    assert "Traceback" not in server.stderr()

    restarted = CohortServer(data_dir).start()
    try:
        assert await committed_offset(restarted.port, "before-exit", "t", 0) == 77
    finally:
        assert restarted.stop() == 0, restarted.stderr()


async def test_health_is_degraded_and_names_a_partition_that_failed_to_load(tmp_path):
    """A damaged partition is refused at load: /health must not say "ready" while its groups answer NOT_COORDINATOR."""
    from cohort.coordinator.log import list_segments
    from cohort.protocol.partitioning import partition_for

    server = CohortServer(tmp_path / "data").start()
    try:
        assert (await roundtrip(server.port, simple_commit("victim", "t", 0, 7), 2)).topics[0].partitions[0].error_code == 0
    finally:
        assert server.stop() == 0, server.stderr()
    damaged = partition_for("victim")
    [segment] = [path for p, path in list_segments(tmp_path / "data") if p == damaged]
    segment.write_bytes(segment.read_bytes()[:-4])  # bytes the clean shutdown's checkpoint vouches for

    server.launch()  # it will not become "ready": poll /health here
    try:
        deadline = time.monotonic() + 30
        status, body = None, ""
        while time.monotonic() < deadline and "degraded" not in body:
            try:
                status, body = http_get(f"http://127.0.0.1:{server.metrics_port}/health", timeout=1)
            except OSError:
                pass
            time.sleep(0.05)
        assert status == 503 and body.startswith("degraded: 1 offsets partition(s) failed to load")
        assert f"partition {damaged}: {segment}" in body
        assert metric_value(server.scrape(), "cohort_offsets_partitions_failed") == 1
        assert metric_value(server.scrape(), "cohort_ready") == 1  # serving: the other partitions work
        response = await roundtrip(server.port, simple_commit("victim", "t", 0, 8), 2)
        assert response.topics[0].partitions[0].error_code == 16  # NOT_COORDINATOR
    finally:
        assert server.stop() == 0, server.stderr()
