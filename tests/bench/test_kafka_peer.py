"""Apache Kafka 4.x as a bench peer: the broker starts from Maven Central's jars, takes the generator's
load, and restarts on its own log with every committed offset back.

The jars are fetched by `bench.kafka_broker.kafka_libs()` (Maven, cached): a missing Maven, Java or jar
fails here, never skips.
"""
from __future__ import annotations

from result_checks import assert_well_formed

from bench.kafka_broker import KAFKA_VERSION, kafka_libs
from bench.targets import start_target
from bench.workloads import workload_function


def test_the_jars_hold_the_broker_and_its_storage_tool():
    libs = kafka_libs()
    assert (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists()
    assert (libs / f"kafka-clients-{KAFKA_VERSION}.jar").exists()


async def test_kafka_flush_fsyncs_every_append_and_takes_commits_and_fetches(smoke_profile):
    profile = smoke_profile.with_overrides(variants=("simple-1p", "member-1p", "fetch-1p"))
    target = start_target("kafka-flush")
    try:
        assert "log.flush.interval.messages=1\n" in (target.workdir / "server.properties").read_text()
        assert target.version.startswith(f"Apache Kafka {KAFKA_VERSION}")
        commits = await workload_function("commit")(target, profile)
        fetches = await workload_function("fetch")(target, profile)
    finally:
        target.close()
    assert [r.variant for r in commits + fetches] == ["simple-1p", "member-1p", "fetch-1p"]
    for r in commits + fetches:
        assert_well_formed(r)
        assert r.target == "kafka-flush"


async def test_kafka_restarts_on_its_log_and_serves_every_group_again(smoke_profile):
    target = start_target("kafka")
    try:
        results = await workload_function("restart")(target, smoke_profile.with_overrides(
            restart_records=(400,), restart_offsets=400))
    finally:
        target.close()
    [result] = results
    assert result.errors == {} and result.target == "kafka"
    assert result.params["distinct_offsets"] == 400 and result.params["groups"] == 1
    assert result.extra["time_to_serve_all_groups_s"] >= result.extra["time_to_listen_s"] > 0
    assert result.server["rss_end_bytes"] > result.server["rss_baseline_bytes"] > 0
