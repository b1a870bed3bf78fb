"""SyncGroup (key 14): the leader hands out assignments; every member collects its own."""
from cohort.protocol.schema import F, Array, Struct, message, INT16, INT32, STRING, BYTES

SyncGroupRequest = message("SyncGroupRequest", 14, "0-5", "4+", [
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", STRING, "3+", nullable="3+", default=None),
    F("protocol_type", STRING, "5+", nullable="5+", default=None),
    F("protocol_name", STRING, "5+", nullable="5+", default=None),
    # filled by the leader only
    F("assignments", Array(Struct("SyncGroupRequestAssignment", [
        F("member_id", STRING),
        F("assignment", BYTES),
    ]))),
])

SyncGroupResponse = message("SyncGroupResponse", 14, "0-5", "4+", [
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("protocol_type", STRING, "5+", nullable="5+", default=None),
    F("protocol_name", STRING, "5+", nullable="5+", default=None),
    F("assignment", BYTES),
])
