"""GroupReport (key 10000, Cohort's own): a group's journal, offset history, health, lag (with its sampled past) or past offsets.

Not a Kafka API: its key sits in a private range (10000+) that Kafka will not use, and ApiVersions
does not advertise it, so Kafka clients never see it; Cohort's CLI sends v0 directly. The report is
UTF-8 JSON in the shape the coordinator's read API gives the console (`GroupCoordinator.group_report`),
so the CLI and the console read the same document. Errors are Kafka codes (NOT_COORDINATOR: ask the
group's coordinator; GROUP_ID_NOT_FOUND; INVALID_REQUEST with a message for a report this node cannot
give, e.g. offset history in cluster mode).
"""
from cohort.protocol.schema import BYTES, INT16, INT32, INT64, STRING, F, message

# What `report` may ask for.
GROUP_REPORTS = ("rebalances", "history", "health", "lag", "offsets-at")

GroupReportRequest = message("GroupReportRequest", 10000, "0", "none", [
    F("group_id", STRING),
    F("report", STRING),
    F("since_ms", INT64, default=-1),    # rebalances/history/lag: entries at or after this time (-1: all kept)
    F("at_ms", INT64, default=-1),       # offsets-at: the moment whose committed offsets are wanted
    F("topic", STRING, nullable="0+", default=None),  # history: only this topic (None: all)
    F("partition", INT32, default=-1),   # history: only this partition of `topic` (-1: all)
])

GroupReportResponse = message("GroupReportResponse", 10000, "0", "none", [
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F("report", BYTES),
])
