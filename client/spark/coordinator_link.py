"""The three coordinator calls the Spark connector makes, on top of Cohort's client.

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

from client.spark.commit_plan import CommittedOffset
from client.topic_partition import TopicPartition

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
