"""CreatePartitions (key 37): grow a topic's partition count."""
from cohort.protocol.schema import F, Array, Struct, message, INT16, INT32, BOOL, STRING

CreatePartitionsRequest = message("CreatePartitionsRequest", 37, "0-3", "2+", [
    F("topics", Array(Struct("CreatePartitionsTopic", [
        F("name", STRING),
        F("count", INT32),
        F("assignments", Array(Struct("CreatePartitionsAssignment", [
            F("broker_ids", Array(INT32)),
        ])), nullable="0+"),
    ]))),
    F("timeout_ms", INT32),
    F("validate_only", BOOL),
])

CreatePartitionsResponse = message("CreatePartitionsResponse", 37, "0-3", "2+", [
    F("throttle_time_ms", INT32),
    F("results", Array(Struct("CreatePartitionsTopicResult", [
        F("name", STRING),
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
    ]))),
])
