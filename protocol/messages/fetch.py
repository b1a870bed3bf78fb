"""Fetch (key 1): read records. Cohort hosts no records, so its answers carry
empty (or null) record sets; requests are decoded in full so any client's
fetch is understood.
"""
from cohort.protocol.schema import F, Array, Struct, message, INT8, INT16, INT32, INT64, STRING, UUID, RECORDS

FetchRequest = message("FetchRequest", 1, "0-16", "12+", [
    F("cluster_id", STRING, "12+", nullable="12+", default=None, tag=0),
    F("replica_id", INT32, "0-14", default=-1),  # v15+ moved into ReplicaState
    F("replica_state", Struct("ReplicaState", [
        F("replica_id", INT32, "15+", default=-1),
        F("replica_epoch", INT64, "15+", default=-1),
    ]), "15+", tag=1),
    F("max_wait_ms", INT32),
    F("min_bytes", INT32),
    F("max_bytes", INT32, "3+", default=0x7FFFFFFF),
    F("isolation_level", INT8, "4+", default=0),
    F("session_id", INT32, "7+", default=0),
    F("session_epoch", INT32, "7+", default=-1),
    F("topics", Array(Struct("FetchTopic", [
        F("topic", STRING, "0-12"),
        F("topic_id", UUID, "13+"),
        F("partitions", Array(Struct("FetchPartition", [
            F("partition", INT32),
            F("current_leader_epoch", INT32, "9+", default=-1),
            F("fetch_offset", INT64),
            F("last_fetched_epoch", INT32, "12+", default=-1),
            F("log_start_offset", INT64, "5+", default=-1),
            F("partition_max_bytes", INT32),
        ]))),
    ]))),
    F("forgotten_topics_data", Array(Struct("ForgottenTopic", [
        F("topic", STRING, "7-12"),
        F("topic_id", UUID, "13+"),
        F("partitions", Array(INT32), "7+"),
    ])), "7+"),
    F("rack_id", STRING, "11+", default=""),
])

FetchResponse = message("FetchResponse", 1, "0-16", "12+", [
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16, "7+"),
    F("session_id", INT32, "7+", default=0),
    F("responses", Array(Struct("FetchableTopicResponse", [
        F("topic", STRING, "0-12"),
        F("topic_id", UUID, "13+"),
        F("partitions", Array(Struct("PartitionData", [
            F("partition_index", INT32),
            F("error_code", INT16),
            F("high_watermark", INT64),
            F("last_stable_offset", INT64, "4+", default=-1),
            F("log_start_offset", INT64, "5+", default=-1),
            F("diverging_epoch", Struct("EpochEndOffset", [
                F("epoch", INT32, "12+", default=-1),
                F("end_offset", INT64, "12+", default=-1),
            ]), "12+", tag=0),
            F("current_leader", Struct("LeaderIdAndEpoch", [
                F("leader_id", INT32, "12+", default=-1),
                F("leader_epoch", INT32, "12+", default=-1),
            ]), "12+", tag=1),
            F("snapshot_id", Struct("SnapshotId", [
                F("end_offset", INT64, default=-1),
                F("epoch", INT32, default=-1),
            ]), "12+", tag=2),
            F("aborted_transactions", Array(Struct("AbortedTransaction", [
                F("producer_id", INT64, "4+"),
                F("first_offset", INT64, "4+"),
            ])), "4+", nullable="4+"),
            F("preferred_read_replica", INT32, "11+", default=-1),
            F("records", RECORDS, nullable="0+"),
        ]))),
    ]))),
    F("node_endpoints", Array(Struct("NodeEndpoint", [
        F("node_id", INT32, "16+"),
        F("host", STRING, "16+"),
        F("port", INT32, "16+"),
        F("rack", STRING, "16+", nullable="16+", default=None),
    ])), "16+", tag=0),
])
