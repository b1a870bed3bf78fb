"""The coordinator calls the Spark connector makes, on top of Cohort's client.

The sink's commit runs in a JVM-started Python process that Spark reuses from
batch to batch (measured), and the listener runs in the driver: both keep one
connection per (bootstrap, timeout, retries) in a module-level cache so a
micro-batch pays for round trips, not for connecting.  Any failure drops the
cached connection, so the next batch reconnects.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from cohort.client.spark.commit_plan import CommittedOffset
from cohort.client.topic_partition import TopicPartition

__all__ = ["CoordinatorError", "GroupActive", "CoordinatorLink", "link_for"]

log = logging.getLogger("cohort.spark")

# Kafka's state names for a group nobody is a member of.
_INACTIVE_STATES = frozenset({"Empty", "Dead", ""})


class CoordinatorError(Exception):
    """The coordinator could not be reached, or refused a request (message says which and why)."""


class GroupActive(Exception):
    """The group has active members, so a simple (generation -1) commit would be refused."""


@dataclass(frozen=True, slots=True)
class _LinkKey:
    bootstrap: str
    timeout_ms: int
    retries: int


_links: dict[_LinkKey, "CoordinatorLink"] = {}
_links_lock = threading.Lock()


def link_for(bootstrap: str, timeout_ms: int, retries: int) -> "CoordinatorLink":
    """The process-wide link for these settings (created on first use)."""
    key = _LinkKey(bootstrap, timeout_ms, retries)
    with _links_lock:
        link = _links.get(key)
        if link is None:
            link = _links[key] = CoordinatorLink(bootstrap, timeout_ms, retries)
        return link



class CoordinatorLink:
    """Describe, fetch and commit for one group at a time through `cohort.client.blocking.BlockingAdmin`.

    Each call is one attempt bounded by `timeout_ms` (the client retries retriable
    Kafka errors and rediscovers the coordinator inside that budget); a failed
    attempt is retried `retries` more times on a fresh connection.  Errors come
    out as `CoordinatorError` (or `GroupActive`) with a one-line reason.
    """

    def __init__(self, bootstrap: str, timeout_ms: int, retries: int) -> None:
        self.bootstrap = bootstrap
        self.timeout_ms = timeout_ms
        self.retries = retries
        self._admin = None
        self._lock = threading.Lock()  # the listener may be called from several py4j threads

    def ensure_no_active_members(self, group: str) -> None:
        """Raise GroupActive unless the group is Empty or does not exist."""
        description = self._call(lambda admin: admin.describe_group(group), f"describe group {group!r}")
        if description.state not in _INACTIVE_STATES or description.members:
            raise GroupActive(
                f"consumer group {group!r} has {len(description.members)} active member(s) "
                f"(state {description.state}); the sink commits as a standalone committer (generation -1), "
                "which Kafka accepts only while a group has no active members. "
                "Give the Spark query its own group, or stop the group's consumers."
            )

    def committed_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        offsets = self._call(lambda admin: admin.fetch_offsets(group), f"fetch offsets of group {group!r}")
        return {
            TopicPartition(tp.topic, tp.partition): CommittedOffset(om.offset, om.metadata)
            for tp, om in offsets.items()
        }

    def commit(self, group: str, offsets: dict[TopicPartition, int], metadata: str) -> None:
        """One simple OffsetCommit for all `offsets`, each with `metadata`."""
        if not offsets:
            return
        payload = {(tp.topic, tp.partition): (offset, metadata) for tp, offset in offsets.items()}
        self._call(lambda admin: admin.commit_offsets(group, payload), f"commit offsets of group {group!r}",
                   group=group)

    def report_end_offsets(self, ends: dict[TopicPartition, int]) -> dict[TopicPartition, object]:
        """Tell Cohort how far the source's partitions go; per partition the end kept or the refusal
        (a `KafkaError`: e.g. the topic is not in Cohort's registry, or no WRITE/ALTER on it)."""
        if not ends:
            return {}
        return self._call(lambda admin: admin.report_end_offsets(ends), "report end offsets")

    def close(self) -> None:
        with self._lock:
            self._drop()

    # -- one attempt at a time, reconnecting between attempts ---------------------------------
    def _call(self, action, what: str, group: str | None = None):
        from cohort.client.errors import ClientError, RebalanceInProgressError, UnknownMemberIdError

        with self._lock:
            last: Exception | None = None
            for attempt in range(self.retries + 1):
                try:
                    return action(self._connected())
                except (UnknownMemberIdError, RebalanceInProgressError) as exc:
                    # A simple commit refused because members joined since the describe.
                    raise GroupActive(
                        f"consumer group {group!r} has active members (the coordinator refused the "
                        f"standalone commit with {exc.name}); give the Spark query its own group"
                    ) from None
                except (ClientError, OSError, TimeoutError, ValueError) as exc:
                    last = exc
                    self._drop()
                    if getattr(exc, "retriable", True) is False:
                        break
                    log.debug("cohort spark: %s failed (attempt %d): %s", what, attempt + 1, exc)
            raise CoordinatorError(f"{what} failed after {attempt + 1} attempt(s): {_describe(last)}")

    def _connected(self):
        if self._admin is None:
            from cohort.client.blocking import BlockingAdmin

            self._admin = BlockingAdmin(
                self.bootstrap,
                client_id="cohort-spark",
                request_timeout_ms=self.timeout_ms,
                api_timeout_ms=self.timeout_ms,
                connect_timeout_ms=min(self.timeout_ms, 10_000),
            )
        return self._admin

    def _drop(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            try:
                admin.close()
            except Exception as exc:  # closing a broken connection must not hide the real error
                log.debug("cohort spark: closing the admin client: %s", exc)


def _describe(exc: Exception | None) -> str:
    if exc is None:
        return "no attempt made"
    text = str(exc) or type(exc).__name__
    return text if type(exc).__name__ in text else f"{type(exc).__name__}: {text}"
