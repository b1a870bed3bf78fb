"""Commit history as Spark analytics: a per-group commit-rate and regression report.

Reads a Cohort data directory (the server's ``--data-dir``; read-only, safe
while the server runs) through the ``cohort-log`` data source and prints:

1. commits per group per time window (how busy each group is, and when);
2. regressions: every commit that moved a partition's offset backwards
   (a reset, a replay, a misbehaving consumer), with the before/after offsets;
3. the last commit of each group, oldest first, which shows idle groups.

    python examples/offsets_log_report.py ./data --window "1 minute"
"""
from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F


def offset_commits(log: DataFrame) -> DataFrame:
    return log.where((F.col("record_type") == "offset-commit") & ~F.col("is_tombstone"))


def commit_rate(log: DataFrame, window: str = "1 minute") -> DataFrame:
    """group, window start/end, commits, distinct partitions committed."""
    return (
        offset_commits(log)
        .groupBy("group", F.window("commit_timestamp", window).alias("window"))
        .agg(F.count("*").alias("commits"), F.countDistinct("topic", "partition").alias("partitions"))
        .select("group", F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                "commits", "partitions")
        .orderBy("group", "window_start")
    )


def regressions(log: DataFrame) -> DataFrame:
    """Commits whose offset is lower than the previous commit of the same partition.

    A group's records all live in one log partition (the FindCoordinator hash), so
    log order is commit order.  A tombstone (deleted offset) ends the sequence: the
    next commit after it is not compared with what came before.
    """
    partition_history = Window.partitionBy("group", "topic", "partition").orderBy("log_partition", "log_offset")
    commits = log.where(F.col("record_type") == "offset-commit")
    return (
        commits.withColumn("previous_offset", F.lag("committed_offset").over(partition_history))
        .where(F.col("committed_offset") < F.col("previous_offset"))
        .select("group", "topic", "partition", "previous_offset", F.col("committed_offset").alias("new_offset"),
                "commit_timestamp", "log_partition", "log_offset")
        .orderBy("group", "topic", "partition", "log_offset")
    )


def last_commits(log: DataFrame) -> DataFrame:
    """Each group's commit count and last commit time, least recently active first."""
    return (
        offset_commits(log)
        .groupBy("group")
        .agg(F.count("*").alias("commits"), F.max("commit_timestamp").alias("last_commit"))
        .orderBy("last_commit")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", help="the Cohort server's --data-dir")
    parser.add_argument("--window", default="1 minute", help='commit-rate window (Spark interval, default "1 minute")')
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local session binds to this machine (docs/spark.md)
    spark = (
        SparkSession.builder.master("local[2]").appName("cohort-offsets-log-report")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from cohort.client.spark import register

    register(spark)
    log = spark.read.format("cohort-log").load(args.data_dir).cache()
    print(f"{log.count()} records in {log.rdd.getNumPartitions()} segments\n")
    print("Commit rate per group:")
    commit_rate(log, args.window).show(50, truncate=False)
    print("Offsets that went backwards:")
    regressions(log).show(50, truncate=False)
    print("Last commit per group (idle groups first):")
    last_commits(log).show(50, truncate=False)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
