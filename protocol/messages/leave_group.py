"""LeaveGroup (key 13): members leave a group; v3+ batch several (KIP-345)."""
from cohort.protocol.schema import F, Array, Struct, message, INT16, INT32, STRING

LeaveGroupRequest = message("LeaveGroupRequest", 13, "0-5", "4+", [
    F("group_id", STRING),
    F("member_id", STRING, "0-2"),
    F("members", Array(Struct("MemberIdentity", [
        F("member_id", STRING, "3+"),
        F("group_instance_id", STRING, "3+", nullable="3+", default=None),
        F("reason", STRING, "5+", nullable="5+", default=None),
    ])), "3+"),
])

LeaveGroupResponse = message("LeaveGroupResponse", 13, "0-5", "4+", [
    F("throttle_time_ms", INT32, "1+"),
    # v0-2: the single member's error
    F("error_code", INT16),
    F("members", Array(Struct("MemberResponse", [
        F("member_id", STRING, "3+"),
        F("group_instance_id", STRING, "3+", nullable="3+"),
        F("error_code", INT16, "3+"),
    ])), "3+"),
])
