"""End to end: a Structured Streaming job writes its results to files and commits its progress to Cohort.

The job reads Kafka-shaped rows (topic, partition, offset, value) from the small
``kafka-shaped`` example source, enriches them, and starts two streaming writes of
the same stream:

* the results, as JSON files under ``OUT/results``;
* the progress, through the ``cohort`` sink: each micro-batch commits
  ``max(offset)+1`` per (topic, partition) to the consumer group ``--group``.

Afterwards ``cohort groups describe GROUP --offsets`` shows how far the job got,
exactly as it would for any Kafka consumer.  Run it against a running server:

    cohort serve --data-dir ./data &
    python examples/spark_commit_progress.py --bootstrap 127.0.0.1:9092 --group orders-enricher --out /tmp/orders
    cohort groups describe orders-enricher --offsets

Run it again with a larger ``--end-offset`` and it continues from its checkpoints.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(spark, bootstrap: str, group: str, out: Path, end_offset: int, topics: str = "orders:3") -> list:
    """Start both writes, run them to the end of the input (availableNow) and return the finished queries."""
    from pyspark.sql import functions as F

    orders = (
        spark.readStream.format("kafka-shaped")
        .option("topics", topics)
        .option("rowsPerBatch", 50)
        .option("endOffset", end_offset)
        .load()
    )
    enriched = orders.select(
        "topic", "partition", "offset",
        F.col("value").cast("string").alias("order"),
        (F.col("offset") % 7 == 0).alias("flagged"),
    )
    results = (
        enriched.writeStream.format("json")
        .option("path", str(out / "results"))
        .option("checkpointLocation", str(out / "checkpoints" / "results"))
        .queryName(f"{group}-results")
        .trigger(availableNow=True)
        .start()
    )
    progress = (
        enriched.writeStream.format("cohort")
        .option("bootstrap", bootstrap)
        .option("group", group)
        .option("checkpointLocation", str(out / "checkpoints" / "progress"))
        .queryName(f"{group}-progress")
        .trigger(availableNow=True)
        .start()
    )
    for query in (results, progress):
        query.awaitTermination()
    return [results, progress]


def local_spark_environment() -> None:
    """What a local session needs before it starts (docs/spark.md): Spark's Python workers run this
    interpreter and import the example source by name, and Spark binds to 127.0.0.1 (without
    SPARK_LOCAL_IP it binds to the address the host name resolves to, and warns, or fails where that
    address is not this machine's)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, str(HERE))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="the Cohort server (host:port)")
    parser.add_argument("--group", default="orders-enricher", help="consumer group to commit the job's progress to")
    parser.add_argument("--out", type=Path, default=Path("spark-example-out"), help="results and checkpoints")
    parser.add_argument("--end-offset", type=int, default=200, help="rows per partition to process in total")
    args = parser.parse_args(argv)

    local_spark_environment()

    from pyspark.sql import SparkSession

    from cohort.client.spark import register
    from kafka_shaped_source import KafkaShapedSource

    spark = (
        SparkSession.builder.master("local[2]").appName("cohort-spark-example")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    spark.dataSource.register(KafkaShapedSource)

    queries = run(spark, args.bootstrap, args.group, args.out, args.end_offset)
    rows = spark.read.json(str(args.out / "results")).count()
    spark.stop()
    for query in queries:
        if query.exception() is not None:
            print(f"query {query.name} failed: {query.exception()}", file=sys.stderr)
            return 1
    print(f"{rows} result rows in {args.out / 'results'}; progress committed to group {args.group!r}:\n")
    return subprocess.call(
        [sys.executable, "-m", "cohort.coordinator.cli.main", "groups", "describe", args.group, "--offsets",
         "--bootstrap-server", args.bootstrap]
    )


if __name__ == "__main__":
    sys.exit(main())
