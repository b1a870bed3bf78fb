"""The request contract between the server and whoever answers a request (the group coordinator,
the node's own handlers, the authorization guard): who asked, and the error a report answers with.

A handler is called as ``handler(request, api_version, RequestContext)``; it lives here, apart from
any implementation, so the server and `security/` depend on the contract, not on the coordinator.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent the request. `client_host` is Java's rendering of the peer address, e.g. "/127.0.0.1".

    `principal` is who the connection authenticated as (Kafka's "User:name"; ANONYMOUS without
    authentication) and `listener` the name of the listener it came in on.
    """

    client_id: str = ""
    client_host: str = ""
    principal: str = "User:ANONYMOUS"
    listener: str = ""
    # Which topics the principal may see in a GroupReport (the authorizer's topic DESCRIBE; None: all),
    # so the reports hide what OffsetFetch hides.
    topic_visible: Callable[[str], bool] | None = None
    # Which groups the principal may see in a listing (group DESCRIBE; None: all).
    group_visible: Callable[[str], bool] | None = None


class GroupReportError(Exception):
    """A journal, history or health question this node cannot answer: `error_code` is Kafka's code."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
