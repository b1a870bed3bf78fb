"""The ConsumerGroupHeartbeat request's rules that hold before any group state is read: the member epochs
with a meaning of their own, Kafka's checks of the fields (the wire side may run them before a group
exists) and the error a heartbeat is refused with.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import re2

from cohort.coordinator.groups.consumer.assignors import DEFAULT_ASSIGNORS
from cohort.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from cohort.coordinator.groups.consumer.events import ConsumerGroupHeartbeat

CREATED_GROUP_EPOCH = 1  # a new group's epoch and target assignment epoch, as Kafka's
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
GENERATED_MEMBER_ID_REQUIRED_VERSION = 1  # ConsumerGroupHeartbeat v1+: the client makes its member id


class HeartbeatError(Exception):
    """A heartbeat rejected with a Kafka error code and message (a value in the response)."""

    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


def compile_regex(regex: str):
    """An RE2 pattern (Kafka resolves subscriptions with RE2/J); HeartbeatError if it does not compile."""
    try:
        return re2.compile(regex, options=_RE2_OPTIONS)
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise HeartbeatError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                             f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {detail}.") from None


def validate_heartbeat(group_id: str, request: ConsumerGroupHeartbeat,
                       assignors: Iterable[str] = DEFAULT_ASSIGNORS) -> None:
    """Kafka's checks of a heartbeat before any group state is looked at; raises HeartbeatError."""
    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.INVALID_REQUEST, message)

    epoch = request.member_epoch
    if (request.api_version >= GENERATED_MEMBER_ID_REQUIRED_VERSION or epoch > 0
            or epoch == LEAVE_GROUP_MEMBER_EPOCH) and request.member_id == "":
        raise invalid("MemberId can't be empty.")
    if group_id == "":
        raise invalid("GroupId can't be empty.")
    if request.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if request.rack_id == "":
        raise invalid("RackId can't be empty.")
    if epoch == JOIN_GROUP_MEMBER_EPOCH:
        if request.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.topic_partitions is None or request.topic_partitions:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if request.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")
    names = list(assignors)
    if request.server_assignor is not None and request.server_assignor not in names:
        raise HeartbeatError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                             f"ServerAssignor {request.server_assignor} is not supported. "
                             f"Supported assignors: {', '.join(names)}.")
    if request.subscribed_topic_regex:
        compile_regex(request.subscribed_topic_regex)

