"""DeleteGroups (key 42): remove empty groups and their offsets."""
from cohort.protocol.schema import F, Array, Struct, message, INT16, INT32, STRING

DeleteGroupsRequest = message("DeleteGroupsRequest", 42, "0-2", "2+", [
    F("groups_names", Array(STRING)),
])

DeleteGroupsResponse = message("DeleteGroupsResponse", 42, "0-2", "2+", [
    F("throttle_time_ms", INT32),
    F("results", Array(Struct("DeletableGroupResult", [
        F("group_id", STRING),
        F("error_code", INT16),
    ]))),
])
