"""ApiVersions (key 18): which APIs and versions each side speaks."""
from cohort.protocol.schema import F, Array, Struct, message, INT16, INT32, INT64, BOOL, STRING

ApiVersionsRequest = message("ApiVersionsRequest", 18, "0-4", "3+", [
    F("client_software_name", STRING, "3+"),
    F("client_software_version", STRING, "3+"),
])

ApiVersionsResponse = message("ApiVersionsResponse", 18, "0-4", "3+", [
    F("error_code", INT16),
    F("api_keys", Array(Struct("ApiVersion", [
        F("api_key", INT16),
        F("min_version", INT16),
        F("max_version", INT16),
    ]))),
    F("throttle_time_ms", INT32, "1+"),
    F("supported_features", Array(Struct("SupportedFeatureKey", [
        F("name", STRING, "3+"),
        F("min_version", INT16, "3+"),
        F("max_version", INT16, "3+"),
    ])), "3+", tag=0),
    F("finalized_features_epoch", INT64, "3+", tag=1, default=-1),
    F("finalized_features", Array(Struct("FinalizedFeatureKey", [
        F("name", STRING, "3+"),
        F("max_version_level", INT16, "3+"),
        F("min_version_level", INT16, "3+"),
    ])), "3+", tag=2),
    F("zk_migration_ready", BOOL, "3+", tag=3, default=False),
])
