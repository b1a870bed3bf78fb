"""Exceptions the client raises: one base, a few names the application is expected to catch.

Kafka reports most failures as error codes inside responses. The client turns
the ones it cannot handle itself (after the retries Kafka clients do) into a
`KafkaError` carrying the code, so a caller can always see which Kafka error
happened and whether retrying later could help.
"""
from __future__ import annotations

from cohort.protocol.errors import ErrorCode, error_name


class ClientError(Exception):
    """Base of everything the client raises on purpose."""


class KafkaConnectionError(ClientError):
    """The broker could not be reached, or the connection broke; retrying later may work."""

    retriable = True


class RequestTimedOut(KafkaConnectionError):
    """No response within the request timeout; the connection was closed (responses are in order)."""


class UnsupportedApi(ClientError):
    """The broker does not speak a version of this API that the client knows."""


class KafkaError(ClientError):
    """A Kafka error code the client could not resolve by retrying."""

    def __init__(self, code: int, message: str = "") -> None:
        self.code = int(code)
        self.name = error_name(self.code)
        # "TOPIC_ALREADY_EXISTS: Topic 't' already exists." — the server's sentence keeps its own
        # punctuation; appending ": NAME" to it doubled it.
        super().__init__(f"{self.name}: {message}" if message else self.name)

    @property
    def retriable(self) -> bool:
        try:
            return ErrorCode(self.code).retriable
        except ValueError:
            return False


class CommitFailedError(KafkaError):
    """A member-fenced offset commit was refused because this member is no longer in that generation.

    The group has rebalanced (or this member was removed); the offsets were not
    stored. Rejoin, then commit again for the partitions you still own.
    """


class IllegalGenerationError(CommitFailedError):
    """ILLEGAL_GENERATION: the request carried a generation the group has moved past."""


class UnknownMemberIdError(CommitFailedError):
    """UNKNOWN_MEMBER_ID: the coordinator no longer knows this member (expired or removed)."""


class FencedInstanceIdError(CommitFailedError):
    """FENCED_INSTANCE_ID: another member took over this static group.instance.id."""


class RebalanceInProgressError(KafkaError):
    """REBALANCE_IN_PROGRESS: the group is rebalancing; commit again after the rebalance completes."""


class GroupNotEmptyError(KafkaError):
    """NON_EMPTY_GROUP: the operation needs a group with no active members."""


class GroupIdNotFoundError(KafkaError):
    """GROUP_ID_NOT_FOUND: the coordinator has no such group."""


_BY_CODE: dict[int, type[KafkaError]] = {
    ErrorCode.ILLEGAL_GENERATION: IllegalGenerationError,
    ErrorCode.UNKNOWN_MEMBER_ID: UnknownMemberIdError,
    ErrorCode.FENCED_INSTANCE_ID: FencedInstanceIdError,
    ErrorCode.REBALANCE_IN_PROGRESS: RebalanceInProgressError,
    ErrorCode.NON_EMPTY_GROUP: GroupNotEmptyError,
    ErrorCode.GROUP_ID_NOT_FOUND: GroupIdNotFoundError,
}


def kafka_error(code: int, message: str = "") -> KafkaError:
    """The most specific exception for a Kafka error code."""
    return _BY_CODE.get(int(code), KafkaError)(code, message)
