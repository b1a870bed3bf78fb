"""ListGroups (key 16): every group the coordinator knows, optionally filtered."""
from cohort.protocol.schema import F, Array, Struct, message, INT16, INT32, STRING

ListGroupsRequest = message("ListGroupsRequest", 16, "0-5", "3+", [
    F("states_filter", Array(STRING), "4+"),  # empty = no filter
    F("types_filter", Array(STRING), "5+"),
])

ListGroupsResponse = message("ListGroupsResponse", 16, "0-5", "3+", [
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16),
    F("groups", Array(Struct("ListedGroup", [
        F("group_id", STRING),
        F("protocol_type", STRING),
        F("group_state", STRING, "4+"),
        F("group_type", STRING, "5+"),
    ]))),
])
