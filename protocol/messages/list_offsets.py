"""ListOffsets (key 2): the offset for a timestamp (earliest/latest/...) per partition.

v0 answers with a list of old-style offsets; v1+ with one timestamp/offset pair.
"""
from cohort.protocol.schema import F, Array, Struct, message, INT8, INT16, INT32, INT64, STRING

ListOffsetsRequest = message("ListOffsetsRequest", 2, "0-9", "6+", [
    F("replica_id", INT32),
    F("isolation_level", INT8, "2+"),
    F("topics", Array(Struct("ListOffsetsTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("ListOffsetsPartition", [
            F("partition_index", INT32),
            F("current_leader_epoch", INT32, "4+", default=-1),
            F("timestamp", INT64),
            F("max_num_offsets", INT32, "0", default=1),
        ]))),
    ]))),
])

ListOffsetsResponse = message("ListOffsetsResponse", 2, "0-9", "6+", [
    F("throttle_time_ms", INT32, "2+"),
    F("topics", Array(Struct("ListOffsetsTopicResponse", [
        F("name", STRING),
        F("partitions", Array(Struct("ListOffsetsPartitionResponse", [
            F("partition_index", INT32),
            F("error_code", INT16),
            F("old_style_offsets", Array(INT64), "0"),
            F("timestamp", INT64, "1+", default=-1),
            F("offset", INT64, "1+", default=-1),
            F("leader_epoch", INT32, "4+", default=-1),
        ]))),
    ]))),
])
