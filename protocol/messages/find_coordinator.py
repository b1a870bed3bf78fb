"""FindCoordinator (key 10): which broker coordinates a group (or transaction).

v0-3 look up one key and answer with flat fields; v4+ batch keys (KIP-699)
and answer with one `Coordinator` entry per key.
"""
from cohort.protocol.schema import F, Array, Struct, message, INT8, INT16, INT32, STRING

FindCoordinatorRequest = message("FindCoordinatorRequest", 10, "0-6", "3+", [
    F("key", STRING, "0-3"),
    F("key_type", INT8, "1+", default=0),  # 0 group, 1 transaction, 2 share (v6+)
    F("coordinator_keys", Array(STRING), "4+"),
])

FindCoordinatorResponse = message("FindCoordinatorResponse", 10, "0-6", "3+", [
    F("throttle_time_ms", INT32, "1+"),
    F("error_code", INT16, "0-3"),
    F("error_message", STRING, "1-3", nullable="1-3"),
    F("node_id", INT32, "0-3"),
    F("host", STRING, "0-3"),
    F("port", INT32, "0-3"),
    F("coordinators", Array(Struct("Coordinator", [
        F("key", STRING, "4+"),
        F("node_id", INT32, "4+"),
        F("host", STRING, "4+"),
        F("port", INT32, "4+"),
        F("error_code", INT16, "4+"),
        F("error_message", STRING, "4+", nullable="4+"),
    ])), "4+"),
])
