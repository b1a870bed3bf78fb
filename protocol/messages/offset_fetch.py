"""OffsetFetch (key 9): read a group's committed positions.

v0-7 ask for one group; v8+ batch groups. A null topic list means "every
partition the group has committed" (v2-7 top level, v8+ per group).
"""
from cohort.protocol.schema import F, Array, Struct, message, INT16, INT32, INT64, BOOL, STRING

OffsetFetchRequest = message("OffsetFetchRequest", 9, "0-9", "6+", [
    F("group_id", STRING, "0-7"),
    F("topics", Array(Struct("OffsetFetchRequestTopic", [
        F("name", STRING, "0-7"),
        F("partition_indexes", Array(INT32), "0-7"),
    ])), "0-7", nullable="2-7"),
    F("groups", Array(Struct("OffsetFetchRequestGroup", [
        F("group_id", STRING, "8+"),
        F("member_id", STRING, "9+", nullable="9+", default=None),
        F("member_epoch", INT32, "9+", default=-1),
        F("topics", Array(Struct("OffsetFetchRequestTopics", [
            F("name", STRING, "8+"),
            F("partition_indexes", Array(INT32), "8+"),
        ])), "8+", nullable="8+"),
    ])), "8+"),
    F("require_stable", BOOL, "7+", default=False),
])

OffsetFetchResponse = message("OffsetFetchResponse", 9, "0-9", "6+", [
    F("throttle_time_ms", INT32, "3+"),
    F("topics", Array(Struct("OffsetFetchResponseTopic", [
        F("name", STRING, "0-7"),
        F("partitions", Array(Struct("OffsetFetchResponsePartition", [
            F("partition_index", INT32, "0-7"),
            F("committed_offset", INT64, "0-7"),
            F("committed_leader_epoch", INT32, "5-7", default=-1),
            F("metadata", STRING, "0-7", nullable="0-7"),
            F("error_code", INT16, "0-7"),
        ])), "0-7"),
    ])), "0-7"),
    # the group-level error: top level in v2-7, per group in v8+ (v0-1 copy it into every partition)
    F("error_code", INT16, "2-7", default=0),
    F("groups", Array(Struct("OffsetFetchResponseGroup", [
        F("group_id", STRING, "8+"),
        F("topics", Array(Struct("OffsetFetchResponseTopics", [
            F("name", STRING, "8+"),
            F("partitions", Array(Struct("OffsetFetchResponsePartitions", [
                F("partition_index", INT32, "8+"),
                F("committed_offset", INT64, "8+"),
                F("committed_leader_epoch", INT32, "8+", default=-1),
                F("metadata", STRING, "8+", nullable="8+"),
                F("error_code", INT16, "8+"),
            ])), "8+"),
        ])), "8+"),
        F("error_code", INT16, "8+", default=0),
    ])), "8+"),
])
