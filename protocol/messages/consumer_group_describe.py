"""ConsumerGroupDescribe (key 69): epochs, assignor and each member's current and target assignment.

v1 adds each member's type (KIP-1099): 0 a classic member inside a consumer
group, 1 a consumer-protocol member, -1 unknown.
"""
from cohort.protocol.schema import F, Array, Struct, message, INT8, INT16, INT32, BOOL, STRING, UUID

_Assignment = Struct("DescribedAssignment", [
    F("topic_partitions", Array(Struct("DescribedTopicPartitions", [
        F("topic_id", UUID),
        F("topic_name", STRING),
        F("partitions", Array(INT32)),
    ]))),
])

ConsumerGroupDescribeRequest = message("ConsumerGroupDescribeRequest", 69, "0-1", "0+", [
    F("group_ids", Array(STRING)),
    F("include_authorized_operations", BOOL),
])

ConsumerGroupDescribeResponse = message("ConsumerGroupDescribeResponse", 69, "0-1", "0+", [
    F("throttle_time_ms", INT32),
    F("groups", Array(Struct("DescribedConsumerGroup", [
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+", default=None),
        F("group_id", STRING),
        F("group_state", STRING),
        F("group_epoch", INT32),
        F("assignment_epoch", INT32),
        F("assignor_name", STRING),
        F("members", Array(Struct("DescribedConsumerGroupMember", [
            F("member_id", STRING),
            F("instance_id", STRING, nullable="0+", default=None),
            F("rack_id", STRING, nullable="0+", default=None),
            F("member_epoch", INT32),
            F("client_id", STRING),
            F("client_host", STRING),
            F("subscribed_topic_names", Array(STRING)),
            F("subscribed_topic_regex", STRING, nullable="0+", default=None),
            F("assignment", _Assignment),
            F("target_assignment", _Assignment),
            F("member_type", INT8, "1+", default=-1),
        ]))),
        F("authorized_operations", INT32, default=-2147483648),
    ]))),
])
