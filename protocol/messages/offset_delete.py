"""OffsetDelete (key 47): drop committed offsets of partitions a group no longer reads. v0 only."""
from cohort.protocol.schema import F, Array, Struct, message, INT16, INT32, STRING

OffsetDeleteRequest = message("OffsetDeleteRequest", 47, "0", "none", [
    F("group_id", STRING),
    F("topics", Array(Struct("OffsetDeleteRequestTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("OffsetDeleteRequestPartition", [
            F("partition_index", INT32),
        ]))),
    ]))),
])

OffsetDeleteResponse = message("OffsetDeleteResponse", 47, "0", "none", [
    # unusual order: the error comes before the throttle time
    F("error_code", INT16),
    F("throttle_time_ms", INT32),
    F("topics", Array(Struct("OffsetDeleteResponseTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("OffsetDeleteResponsePartition", [
            F("partition_index", INT32),
            F("error_code", INT16),
        ]))),
    ]))),
])
