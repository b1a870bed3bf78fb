"""DeleteAcls (key 31): remove every ACL binding matching each filter, and say which (v1-3, like Kafka 4)."""
from cohort.protocol.schema import F, Array, Struct, message, INT8, INT16, INT32, STRING

DeleteAclsRequest = message("DeleteAclsRequest", 31, "1-3", "2+", [
    F("filters", Array(Struct("DeleteAclsFilter", [
        F("resource_type_filter", INT8),
        F("resource_name_filter", STRING, nullable="0+"),
        F("pattern_type_filter", INT8, "1+", default=3),
        F("principal_filter", STRING, nullable="0+"),
        F("host_filter", STRING, nullable="0+"),
        F("operation", INT8),
        F("permission_type", INT8),
    ]))),
])

DeleteAclsResponse = message("DeleteAclsResponse", 31, "1-3", "2+", [
    F("throttle_time_ms", INT32),
    F("filter_results", Array(Struct("DeleteAclsFilterResult", [
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
        F("matching_acls", Array(Struct("DeleteAclsMatchingAcl", [
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F("resource_type", INT8),
            F("resource_name", STRING),
            F("pattern_type", INT8, "1+", default=3),
            F("principal", STRING),
            F("host", STRING),
            F("operation", INT8),
            F("permission_type", INT8),
        ]))),
    ]))),
])
