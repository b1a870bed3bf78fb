"""DescribeGroups (key 15): state, protocol and members of classic groups."""
from cohort.protocol.schema import F, Array, Struct, message, INT16, INT32, BOOL, STRING, BYTES

# v6 (KIP-1043): an unknown group is GROUP_ID_NOT_FOUND with a message, no longer a Dead group.
DescribeGroupsRequest = message("DescribeGroupsRequest", 15, "0-6", "5+", [
    F("groups", Array(STRING)),
    F("include_authorized_operations", BOOL, "3+"),
])

DescribeGroupsResponse = message("DescribeGroupsResponse", 15, "0-6", "5+", [
    F("throttle_time_ms", INT32, "1+"),
    F("groups", Array(Struct("DescribedGroup", [
        F("error_code", INT16),
        F("error_message", STRING, "6+", nullable="6+", default=None),
        F("group_id", STRING),
        F("group_state", STRING),
        F("protocol_type", STRING),
        # the chosen protocol's name, set only while Stable
        F("protocol_data", STRING),
        F("members", Array(Struct("DescribedGroupMember", [
            F("member_id", STRING),
            F("group_instance_id", STRING, "4+", nullable="4+", default=None),
            F("client_id", STRING),
            F("client_host", STRING),
            F("member_metadata", BYTES),
            F("member_assignment", BYTES),
        ]))),
        # INT32 min = "not requested"
        F("authorized_operations", INT32, "3+", default=-2147483648),
    ]))),
])
