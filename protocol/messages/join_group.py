"""JoinGroup (key 11): a member asks to join (or rejoin) a classic group's rebalance."""
from cohort.protocol.schema import F, Array, Struct, message, INT16, INT32, BOOL, STRING, BYTES

JoinGroupRequest = message("JoinGroupRequest", 11, "0-9", "6+", [
    F("group_id", STRING),
    F("session_timeout_ms", INT32),
    # v0 has no rebalance timeout: the coordinator uses the session timeout
    F("rebalance_timeout_ms", INT32, "1+", default=-1),
    F("member_id", STRING),
    F("group_instance_id", STRING, "5+", nullable="5+", default=None),
    F("protocol_type", STRING),
    # in the member's order of preference
    F("protocols", Array(Struct("JoinGroupRequestProtocol", [
        F("name", STRING),
        F("metadata", BYTES),
    ]))),
    F("reason", STRING, "8+", nullable="8+", default=None),
])

JoinGroupResponse = message("JoinGroupResponse", 11, "0-9", "6+", [
    F("throttle_time_ms", INT32, "2+"),
    F("error_code", INT16),
    F("generation_id", INT32, default=-1),
    F("protocol_type", STRING, "7+", nullable="7+", default=None),
    # v0-6 carry "" where v7+ carry null
    F("protocol_name", STRING, nullable="7+"),
    F("leader", STRING),
    F("skip_assignment", BOOL, "9+", default=False),
    F("member_id", STRING),
    # only the leader gets the member list
    F("members", Array(Struct("JoinGroupResponseMember", [
        F("member_id", STRING),
        F("group_instance_id", STRING, "5+", nullable="5+", default=None),
        F("metadata", BYTES),
    ]))),
])
