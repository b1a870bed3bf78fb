"""GroupOverview (key 10003, Cohort's own): one page of the groups a node coordinates, summarized.

Not a Kafka API (private key range, never advertised; see `group_report`). The web console's group list
sends it to every broker, the way an admin client sends ListGroups, instead of a DescribeGroups and a
GroupReport per group: the node answers a page of at most `limit` groups (after the cursor `after`, in an
order of the node's own, narrowed to ids containing `search`), each with its state, members, health and lag,
as UTF-8 JSON (`cohort.coordinator.groups.reports.overview`). `next_after` in the document is an opaque
cursor where the next page starts (it names no group); a page may be short (even empty) while `more` is
true, because a node bounds the work one answer costs. A cursor the node did not make answers
INVALID_REQUEST; a principal asking faster than `group.overview.max.pages.per.second` is slowed, then
answered THROTTLING_QUOTA_EXCEEDED.
"""
from cohort.protocol.schema import BYTES, INT16, INT32, STRING, F, message

GroupOverviewRequest = message("GroupOverviewRequest", 10003, "0", "none", [
    F("after", STRING, default=""),                     # the previous page's next_after ("" = the first page)
    F("limit", INT32, default=100),                     # at most this many groups (the node caps it)
    F("search", STRING, nullable="0+", default=None),   # only ids containing this text, case-insensitive
])

GroupOverviewResponse = message("GroupOverviewResponse", 10003, "0", "none", [
    F("error_code", INT16),
    F("error_message", STRING, nullable="0+", default=None),
    F("overview", BYTES),
])
