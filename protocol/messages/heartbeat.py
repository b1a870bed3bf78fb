"""Heartbeat (key 12): a member tells the coordinator it is alive."""
from cohort.protocol.schema import F, message, INT16, INT32, STRING

HeartbeatRequest = message("HeartbeatRequest", 12, "0-4", "4+", [
    F("group_id", STRING),
    F("generation_id", INT32),
    F("member_id", STRING),
    F("group_instance_id", STRING, "3+", nullable="3+", default=None),
])

HeartbeatResponse = message("HeartbeatResponse", 12, "0-4", "4+", [
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
])
