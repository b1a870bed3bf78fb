"""A Kafka topic to JSON files with Spark's own Kafka source, its progress committed to a Cohort group.

Spark keeps a query's progress in its checkpoint, where lag tools cannot see it. `CohortOffsetCommitter`
commits each micro-batch's end offsets to the consumer group ``--group`` and reports the source's latest
offsets as the topic's end offsets, so `cohort groups describe GROUP` and Kafka's `kafka-consumer-groups
--describe --group GROUP` show the job like any consumer, with its real lag.

    cohort serve --data-dir ./data &
    cohort topics create --topic orders --partitions 2        # Cohort records ends of topics it knows
    python examples/spark_kafka_to_files.py --kafka broker:9092 --topic orders \\
        --cohort 127.0.0.1:9092 --group orders-to-files --out /tmp/orders-job
    cohort groups describe orders-to-files

Spark's Kafka source is the `org.apache.spark:spark-sql-kafka-0-10_2.13` package of your PySpark's version:
``--packages`` fetches it (spark.jars.packages), or ``--jars`` names jars already downloaded. Run it again
and the query continues from its checkpoint; the group's offsets never move backwards.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


def start_query(spark, kafka: str, topic: str, out: Path, max_offsets_per_trigger: int | None):
    """The pipeline: records from the topic, as JSON files under OUT/results, checkpointed under OUT/checkpoint."""
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", kafka)
              .option("subscribe", topic)
              .option("startingOffsets", "earliest"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets_per_trigger)
    records = reader.load().selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
    return (records.writeStream.format("json")
            .queryName("orders-to-files")
            .option("path", str(out / "results"))
            .option("checkpointLocation", str(out / "checkpoint"))
            .trigger(availableNow=True)
            .start())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka", required=True, help="the Kafka-protocol broker that holds the records")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--cohort", default="127.0.0.1:9092", help="Cohort's bootstrap address")
    parser.add_argument("--group", required=True, help="the consumer group the job's progress is committed to")
    parser.add_argument("--out", type=Path, required=True, help="results and checkpoint")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--packages", help="e.g. org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0")
    source.add_argument("--jars", help="comma-separated jars of Spark's Kafka source")
    args = parser.parse_args(argv)

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from cohort.client.spark import CohortOffsetCommitter

    builder = (SparkSession.builder.master("local[2]").appName("orders-to-files")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2"))
    if args.packages:
        builder = builder.config("spark.jars.packages", args.packages)
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    committer = CohortOffsetCommitter(args.cohort, {"orders-to-files": args.group})
    spark.streams.addListener(committer)
    query = start_query(spark, args.kafka, args.topic, args.out, args.max_offsets_per_trigger)
    query.awaitTermination()
    last = query.lastProgress
    if last is not None and not committer.wait_for_batch(str(query.id), last["batchId"], timeout=60):
        print("the last batch's progress was not handled in 60 s", file=sys.stderr)
        return 1
    spark.stop()
    print(f"progress of '{args.topic}' committed to group '{args.group}':", flush=True)
    cohort = Path(sys.executable).with_name("cohort")
    command = [str(cohort)] if cohort.exists() else [sys.executable, "-m", "cohort.coordinator.cli.main"]
    return subprocess.run([*command, "groups", "describe", args.group, "--bootstrap-server", args.cohort]).returncode


if __name__ == "__main__":
    sys.exit(main())
