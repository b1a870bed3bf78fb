"""OffsetCommit (key 8): store a group's positions."""
from cohort.protocol.schema import F, Array, Struct, message, INT16, INT32, INT64, STRING

OffsetCommitRequest = message("OffsetCommitRequest", 8, "0-9", "8+", [
    F("group_id", STRING),
    F("generation_id_or_member_epoch", INT32, "1+", default=-1),
    F("member_id", STRING, "1+"),
    F("group_instance_id", STRING, "7+", nullable="7+", default=None),
    F("retention_time_ms", INT64, "2-4", default=-1),
    F("topics", Array(Struct("OffsetCommitRequestTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("OffsetCommitRequestPartition", [
            F("partition_index", INT32),
            F("committed_offset", INT64),
            F("committed_leader_epoch", INT32, "6+", default=-1),
            F("commit_timestamp", INT64, "1", default=-1),
            F("committed_metadata", STRING, nullable="0+"),
        ]))),
    ]))),
])

OffsetCommitResponse = message("OffsetCommitResponse", 8, "0-9", "8+", [
    F("throttle_time_ms", INT32, "3+"),
    F("topics", Array(Struct("OffsetCommitResponseTopic", [
        F("name", STRING),
        F("partitions", Array(Struct("OffsetCommitResponsePartition", [
            F("partition_index", INT32),
            F("error_code", INT16),
        ]))),
    ]))),
])
