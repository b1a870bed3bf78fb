"""CreateAcls (key 30): add ACL bindings; one result per creation, in order (v1-3, like Kafka 4)."""
from cohort.protocol.schema import F, Array, Struct, message, INT8, INT16, INT32, STRING

CreateAclsRequest = message("CreateAclsRequest", 30, "1-3", "2+", [
    F("creations", Array(Struct("AclCreation", [
        F("resource_type", INT8),
        F("resource_name", STRING),
        F("resource_pattern_type", INT8, "1+", default=3),
        F("principal", STRING),
        F("host", STRING),
        F("operation", INT8),
        F("permission_type", INT8),
    ]))),
])

CreateAclsResponse = message("CreateAclsResponse", 30, "1-3", "2+", [
    F("throttle_time_ms", INT32),
    F("results", Array(Struct("AclCreationResult", [
        F("error_code", INT16),
        F("error_message", STRING, nullable="0+"),
    ]))),
])
