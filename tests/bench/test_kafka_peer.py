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


def test_the_peer_table_gives_each_row_both_sides_durability_cpu_and_rss():
    from bench.peer_table import markdown

    def result(target: str, throughput: float, cpu: float, rss: int) -> dict:
        return {"workload": "commit", "variant": "simple-1p", "target": target, "operations": 1000,
                "throughput_per_s": throughput, "server": {"cpu_seconds": cpu, "rss_peak_bytes": rss},
                "extra": {"comparison": "durable"}}
    data = {"results": [result("cohort", 30000, 0.04, 50 * 2**20), result("kafka-flush", 3000, 0.4, 600 * 2**20)],
            "comparisons": [{"label": "durable", "workload": "commit", "variant": "simple-1p",
                             "metric": "throughput (ops/s)", "a": "cohort", "b": "kafka-flush", "a_median": 30000,
                             "b_median": 3000, "median_ratio": 10.0, "ratios": [10.0], "a_errors": 0, "b_errors": 0}]}
    row = markdown(data).splitlines()[-1]
    assert "offsets.flush.policy=always" in row and "log.flush.interval.messages=1" in row
    assert "30 000/s" in row and "3 000/s" in row and "**10.00×**" in row
    assert "| 40.0 / 400 |" in row and "| 50.0 / 600 |" in row


def test_thread_cpu_names_the_threads_of_a_process_and_its_children():
    import os
    import subprocess
    import sys
    import time

    from bench.thread_cpu import delta, thread_cpu

    child = subprocess.Popen([sys.executable, "-c", "import sys, time\nt = time.time()\n"
                              "while time.time() - t < 0.2: pass\nsys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not any(k.endswith("(child process)") and v > 0 for k, v in thread_cpu(os.getpid()).items()):
            assert time.monotonic() < deadline, "the child's busy loop never showed"
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait(timeout=10)
    assert delta({"a": 1.0}, {"a": 1.5, "b": 0.0}) == {"a": 0.5}
