"""DescribeAcls (key 29): the ACL bindings matching one filter.

Kafka removed v0 (no pattern type) in 4.0; Cohort speaks v1-3 like Kafka 4.
Pattern type 3 is LITERAL, the default before v1 existed.
"""
from cohort.protocol.schema import F, Array, Struct, message, INT8, INT16, INT32, STRING

DescribeAclsRequest = message("DescribeAclsRequest", 29, "1-3", "2+", [
    F("resource_type_filter", INT8),
    F("resource_name_filter", STRING, nullable="0+"),
    F("pattern_type_filter", INT8, "1+", default=3),
    F("principal_filter", STRING, nullable="0+"),
    F("host_filter", STRING, nullable="0+"),
    F("operation", INT8),
    F("permission_type", INT8),
])

DescribeAclsResponse = message("DescribeAclsResponse", 29, "1-3", "2+", [
    F("throttle_time_ms", INT32),
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+"),
    F("resources", Array(Struct("DescribeAclsResource", [
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("pattern_type", INT8, "1+", default=3),
        F("acls", Array(Struct("AclDescription", [
            F("principal", STRING),
            F("host", STRING),
            F("operation", INT8),
            F("permission_type", INT8),
        ]))),
    ]))),
])
