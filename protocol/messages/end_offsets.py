"""ReportEndOffsets (key 10001) and DescribeEndOffsets (key 10002), Cohort's own: how far topic partitions go.

Cohort holds no records, so the log end offset of a partition is whatever the system that owns the data
(a Spark source, a shard scanner, `cohort topics end-offsets set`) reports. Like GroupReport these keys sit
in the private range and are never advertised in ApiVersions; Cohort's thin client sends v0 to the
controller (the node keeping the topic registry). Errors are per partition, as Kafka codes:
UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED (a report needs topic WRITE or ALTER, a description
topic DESCRIBE), NOT_CONTROLLER (ask the node keeping the registry), INVALID_REQUEST (a negative offset).

v1 adds `force`: an operator's correction (`cohort topics end-offsets set --force`, `… delete`). A forced
report replaces the kept end even when lower, and a forced -1 removes it; it needs topic ALTER or CLUSTER
ALTER (WRITE is not enough: a source may only move ends forward).
"""
from cohort.protocol.schema import BOOL, INT16, INT32, INT64, STRING, Array, F, Struct, message

ReportEndOffsetsRequest = message("ReportEndOffsetsRequest", 10001, "0-1", "none", [
    F("force", BOOL, "1+", default=False),  # replace (or with -1 remove) the kept end, even moving it back
    F("topics", Array(Struct("ReportedTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("ReportedPartition", [
            F("partition_index", INT32),
            F("end_offset", INT64),
        ]))),
    ]))),
])

ReportEndOffsetsResponse = message("ReportEndOffsetsResponse", 10001, "0-1", "none", [
    F("topics", Array(Struct("ReportedTopicResult", [
        F("name", STRING),
        F("partitions", Array(Struct("ReportedPartitionResult", [
            F("partition_index", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+", default=None),
            F("end_offset", INT64, default=-1),  # the end now kept (a lower report leaves it as it was; -1: none)
        ]))),
    ]))),
])

DescribeEndOffsetsRequest = message("DescribeEndOffsetsRequest", 10002, "0", "none", [
    F("topics", Array(STRING)),  # every partition of each topic is described
])

DescribeEndOffsetsResponse = message("DescribeEndOffsetsResponse", 10002, "0", "none", [
    F("topics", Array(Struct("DescribedTopic", [
        F("name", STRING),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
        F("partitions", Array(Struct("DescribedPartition", [
            F("partition_index", INT32),
            F("end_offset", INT64),     # -1: never reported (the end is unknown)
            F("reported_ms", INT64),    # when it was reported (-1: never)
        ]))),
    ]))),
])
