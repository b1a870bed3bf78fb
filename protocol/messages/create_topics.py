"""CreateTopics (key 19): create topics (Cohort answers for the topics it hosts)."""
from cohort.protocol.schema import F, Array, Struct, message, INT8, INT16, INT32, BOOL, STRING, UUID

CreateTopicsRequest = message("CreateTopicsRequest", 19, "0-7", "5+", [
    F("topics", Array(Struct("CreatableTopic", [
        F("name", STRING),
        F("num_partitions", INT32),  # -1 = broker default
        F("replication_factor", INT16),  # -1 = broker default
        F("assignments", Array(Struct("CreatableReplicaAssignment", [
            F("partition_index", INT32),
            F("broker_ids", Array(INT32)),
        ]))),
        F("configs", Array(Struct("CreatableTopicConfig", [
            F("name", STRING),
            F("value", STRING, nullable="0+"),
        ]))),
    ]))),
    F("timeout_ms", INT32, default=60000),
    F("validate_only", BOOL, "1+", default=False),
])

CreateTopicsResponse = message("CreateTopicsResponse", 19, "0-7", "5+", [
    F("throttle_time_ms", INT32, "2+"),
    F("topics", Array(Struct("CreatableTopicResult", [
        F("name", STRING),
        F("topic_id", UUID, "7+"),
        F("error_code", INT16),
        F("error_message", STRING, "1+", nullable="0+"),
        F("topic_config_error_code", INT16, "5+", tag=0),
        F("num_partitions", INT32, "5+", default=-1),
        F("replication_factor", INT16, "5+", default=-1),
        F("configs", Array(Struct("CreatableTopicConfigs", [
            F("name", STRING, "5+"),
            F("value", STRING, "5+", nullable="5+"),
            F("read_only", BOOL, "5+"),
            F("config_source", INT8, "5+", default=-1),
            F("is_sensitive", BOOL, "5+"),
        ])), "5+", nullable="5+"),
    ]))),
])
