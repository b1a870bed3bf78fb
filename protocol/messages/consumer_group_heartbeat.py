"""ConsumerGroupHeartbeat (key 68): one call to join, stay in and leave a KIP-848 consumer group.

The member sends only what changed since its last heartbeat (null = unchanged);
the coordinator answers with the member epoch and, when it changed, the
partitions the member may use now. v1 adds the regex subscription and has the
client generate its member id (KIP-1082).
"""
from cohort.protocol.schema import F, Array, Struct, message, INT16, INT32, STRING, UUID

ConsumerGroupHeartbeatRequest = message("ConsumerGroupHeartbeatRequest", 68, "0-1", "0+", [
    F("group_id", STRING),
    F("member_id", STRING),
    F("member_epoch", INT32),  # 0 join, -1 leave, -2 static member leaving for a while
    F("instance_id", STRING, nullable="0+", default=None),
    F("rack_id", STRING, nullable="0+", default=None),
    F("rebalance_timeout_ms", INT32, default=-1),
    F("subscribed_topic_names", Array(STRING), nullable="0+", default=None),
    F("subscribed_topic_regex", STRING, "1+", nullable="1+", default=None),
    F("server_assignor", STRING, nullable="0+", default=None),
    F("topic_partitions", Array(Struct("HeartbeatOwnedTopicPartitions", [
        F("topic_id", UUID),
        F("partitions", Array(INT32)),
    ])), nullable="0+", default=None),
])

ConsumerGroupHeartbeatResponse = message("ConsumerGroupHeartbeatResponse", 68, "0-1", "0+", [
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F("member_id", STRING, nullable="0+", default=None),
    F("member_epoch", INT32),
    F("heartbeat_interval_ms", INT32),
    F("assignment", Struct("HeartbeatAssignment", [
        F("topic_partitions", Array(Struct("HeartbeatAssignedTopicPartitions", [
            F("topic_id", UUID),
            F("partitions", Array(INT32)),
        ]))),
    ]), nullable="0+", default=None),
])
