"""DeleteTopics (key 20): delete topics by name (v0-5) or by name/id (v6+)."""
from cohort.protocol.schema import F, Array, Struct, message, INT16, INT32, STRING, UUID

DeleteTopicsRequest = message("DeleteTopicsRequest", 20, "0-6", "4+", [
    F("topics", Array(Struct("DeleteTopicState", [
        F("name", STRING, "6+", nullable="6+", default=None),
        F("topic_id", UUID, "6+"),
    ])), "6+"),
    F("topic_names", Array(STRING), "0-5"),
    F("timeout_ms", INT32),
])

DeleteTopicsResponse = message("DeleteTopicsResponse", 20, "0-6", "4+", [
    F("throttle_time_ms", INT32, "1+"),
    F("responses", Array(Struct("DeletableTopicResult", [
        F("name", STRING, nullable="6+"),
        F("topic_id", UUID, "6+"),
        F("error_code", INT16),
        F("error_message", STRING, "5+", nullable="5+", default=None),
    ]))),
])
