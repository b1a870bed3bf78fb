"""Cohort for PySpark 4: commit Structured Streaming progress to consumer groups, read the offsets log.

* ``df.writeStream.format("cohort")``: a sink that commits each micro-batch's
  ``max(offset)+1`` per (topic, partition) to a consumer group (`sink`).
* `CohortOffsetCommitter`: a StreamingQueryListener that commits Kafka-shaped
  sources' ``endOffset`` after each batch (`listener`).
* ``spark.read.format("cohort-log").load(DATA_DIR)``: the on-disk offsets log as
  a DataFrame (`log_source`).

Call `register(spark)` once per session.  The worker processes Spark starts
must be able to import this package (install Cohort in the interpreter that
``PYSPARK_PYTHON`` names).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register", "CohortOffsetCommitter", "check_sink_options"]


def register(spark: "SparkSession") -> None:
    """Register the ``cohort`` sink and the ``cohort-log`` reader with a session."""
    from cohort.client.spark.log_source import CohortLogSource
    from cohort.client.spark.sink import CohortSink

    spark.dataSource.register(CohortSink)
    spark.dataSource.register(CohortLogSource)


def __getattr__(name: str):
    # The listener imports pyspark; keep `import cohort.client.spark` cheap for code that only needs pure parts.
    if name == "CohortOffsetCommitter":
        from cohort.client.spark.listener import CohortOffsetCommitter

        return CohortOffsetCommitter
    if name == "check_sink_options":
        from cohort.client.spark.sink import check_sink_options

        return check_sink_options
    raise AttributeError(name)
