"""Per-micro-batch cost of the `cohort` sink versus a no-op Python sink, same Spark session.

    python bench/spark_sink_bench.py --runs 3 --batches 40 --rows 100

The bounded ``kafka-shaped`` example source (topic ``bench`` with 4 partitions,
``--rows`` rows per batch in total) runs ``--batches`` micro-batches back to back
(``trigger(availableNow=True)``, so every query ends by itself, never stopped in
the middle of a batch) into either

* ``noop-python``: a Python data source sink whose tasks consume the rows and
  whose commit does nothing (the floor for any Python sink), or
* ``cohort``: tasks compute max(offset)+1 per partition, the commit runs the
  membership check, reads the group's offsets and sends one OffsetCommit to a
  real ``cohort serve`` (fsync on every commit, the default flush policy).

Runs alternate (noop, cohort, noop, cohort, ...), each with its own checkpoint and
group, after one warm-up query of each kind.  Per run: the median over the
batches after the first ``--skip`` of Spark's ``triggerExecution`` and ``addBatch``
durations (from ``recentProgress``).  Reported: the median of the run medians per
sink, and the difference (target: <= 20 ms extra per batch).

On a busy machine Spark's own per-batch time swings by more than the sink adds,
so the script also times the sink's driver-side commit path alone
(`cohort.client.spark.sink.commit_batch`: membership check, offsets read-back, plan,
one OffsetCommit, on a cached connection, as in Spark's commit runner) over
``--commits`` batches of 4 partitions, and reports its median and p90.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(REPO / "examples"), str(REPO), os.environ.get("PYTHONPATH")])
)
sys.path[:0] = [str(REPO), str(REPO / "examples")]

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage  # noqa: E402

from bench.targets import free_port  # noqa: E402


class _NoopWriter(DataSourceStreamWriter):
    def write(self, iterator):
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages, batchId):
        pass

    def abort(self, messages, batchId):
        pass


class NoopPythonSink(DataSource):
    @classmethod
    def name(cls):
        return "noop-python"

    def streamWriter(self, schema, overwrite):
        return _NoopWriter()


def start_server(data_dir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "cohort.coordinator.cli.main", "serve", "--listen", bootstrap,
         "--metrics", f"127.0.0.1:{free_port()}", "--data-dir", str(data_dir),
         "--group.initial.rebalance.delay.ms", "0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process, bootstrap
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit("cohort serve did not start")


def one_run(spark, sink: str, bootstrap: str, workdir: Path, name: str, batches: int, rows: int, skip: int) -> dict:
    per_partition = max(1, rows // 4)
    df = (
        spark.readStream.format("kafka-shaped").option("topics", "bench:4").option("rowsPerBatch", per_partition)
        .option("endOffset", per_partition * batches).load()
        .select("topic", "partition", "offset")
    )
    writer = df.writeStream.format(sink).option("checkpointLocation", str(workdir / name))
    if sink == "cohort":
        writer = writer.option("bootstrap", bootstrap).option("group", f"bench-{name}")
    query = writer.trigger(availableNow=True).start()
    if not query.awaitTermination(900) or query.exception() is not None:
        raise SystemExit(f"{sink} query did not finish: {query.exception()}")
    progresses = [p for p in query.recentProgress if p["batchId"] >= skip and p["numInputRows"] > 0]
    trigger = [p["durationMs"]["triggerExecution"] for p in progresses]
    add_batch = [p["durationMs"].get("addBatch", 0) for p in progresses]
    return {"sink": sink, "batches": len(progresses), "trigger_ms": statistics.median(trigger),
            "add_batch_ms": statistics.median(add_batch)}


def commit_path_ms(bootstrap: str, commits: int) -> dict:
    """Latency of the sink's commit() work per batch, without Spark around it."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    from cohort.client.spark.sink import SinkOptions, commit_batch
    from cohort.client.topic_partition import TopicPartition

    schema = StructType([StructField("topic", StringType()), StructField("partition", IntegerType()),
                         StructField("offset", LongType())])
    options = SinkOptions.parse({"bootstrap": bootstrap, "group": "bench-commit-path", "queryId": "bench"}, schema)
    samples = []
    for batch in range(commits):
        offsets = {TopicPartition("bench", p): 100 * (batch + 1) for p in range(4)}
        start = time.perf_counter()
        commit_batch(options, batch, offsets)
        samples.append((time.perf_counter() - start) * 1000)
    samples = samples[5:]  # the first ones include connecting
    samples.sort()
    return {"median_ms": statistics.median(samples), "p90_ms": samples[int(len(samples) * 0.9)],
            "commits": len(samples)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per sink (default 3)")
    parser.add_argument("--batches", type=int, default=30, help="micro-batches per run (default 30)")
    parser.add_argument("--skip", type=int, default=5, help="first batches of a run left out (default 5)")
    parser.add_argument("--rows", type=int, default=100, help="rows per micro-batch (default 100)")
    parser.add_argument("--commits", type=int, default=200, help="batches for the commit-path timing (default 200)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from cohort.client.spark import register

    with tempfile.TemporaryDirectory(prefix="spark-sink-bench-") as tmp:
        workdir = Path(tmp)
        (workdir / "data").mkdir()
        server, bootstrap = start_server(workdir / "data")
        commit_path = commit_path_ms(bootstrap, args.commits)
        print(f"commit path alone: median {commit_path['median_ms']:.1f} ms, p90 {commit_path['p90_ms']:.1f} ms "
              f"over {commit_path['commits']} batches", flush=True)
        spark = (
            SparkSession.builder.master("local[2]").appName("cohort-spark-sink-bench")
            .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1").config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.adaptive.enabled", "false").getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            from kafka_shaped_source import KafkaShapedSource

            register(spark)
            spark.dataSource.register(NoopPythonSink)
            spark.dataSource.register(KafkaShapedSource)
            for sink in ("noop-python", "cohort"):  # warm the Python workers of both kinds
                one_run(spark, sink, bootstrap, workdir, f"warmup-{sink}", 8, args.rows, 2)
            runs = []
            for i in range(args.runs):
                for sink in ("noop-python", "cohort"):
                    result = one_run(spark, sink, bootstrap, workdir, f"run{i}-{sink}", args.batches, args.rows, args.skip)
                    runs.append(result)
                    print(f"run {i} {sink:12s} triggerExecution median {result['trigger_ms']:.0f} ms, "
                          f"addBatch median {result['add_batch_ms']:.0f} ms over {result['batches']} batches",
                          flush=True)
        finally:
            spark.stop()
            server.terminate()
            server.wait(30)

    summary = {}
    for sink in ("noop-python", "cohort"):
        mine = [r for r in runs if r["sink"] == sink]
        summary[sink] = {"trigger_ms": statistics.median(r["trigger_ms"] for r in mine),
                         "add_batch_ms": statistics.median(r["add_batch_ms"] for r in mine)}
    # Runs alternate, so run i of each sink saw about the same machine: compare them pairwise.
    pairs = list(zip([r for r in runs if r["sink"] == "noop-python"], [r for r in runs if r["sink"] == "cohort"]))
    extra_trigger = statistics.median(c["trigger_ms"] - n["trigger_ms"] for n, c in pairs)
    extra_add = statistics.median(c["add_batch_ms"] - n["add_batch_ms"] for n, c in pairs)
    print(f"\nper micro-batch, median of {args.runs} runs: noop-python {summary['noop-python']['trigger_ms']:.0f} ms "
          f"(addBatch {summary['noop-python']['add_batch_ms']:.0f}), cohort {summary['cohort']['trigger_ms']:.0f} ms "
          f"(addBatch {summary['cohort']['add_batch_ms']:.0f}); median paired extra: triggerExecution "
          f"{extra_trigger:+.0f} ms, addBatch {extra_add:+.0f} ms (target <= +20 ms); load average "
          + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "summary": summary, "extra_trigger_ms": extra_trigger,
                                         "extra_add_batch_ms": extra_add, "commit_path": commit_path, "load_avg": os.getloadavg()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
