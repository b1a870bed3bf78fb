"""A blocking facade over `Admin` for synchronous code (the Spark driver, scripts, the CLI).

`BlockingAdmin` runs a private asyncio event loop in a daemon thread and
forwards each call to it, so it can be used from any thread, including one
that already runs its own event loop. Every method blocks until the answer
arrives or raises the same exceptions as the asyncio client (`cohort.client.errors`).

    from cohort.client.blocking import BlockingAdmin

    with BlockingAdmin("127.0.0.1:9092") as admin:
        # A simple commit (generation -1, no member id), as an external
        # committer sends it: Kafka accepts it only while the group has no
        # active members.
        admin.commit_offsets("my-group", {("events", 0): (1234, "batch 7"), ("events", 1): 99})
        admin.fetch_offsets("my-group")        # {TopicPartition('events', 0): OffsetAndMetadata(1234, 'batch 7', -1), ...}
        admin.describe_group("my-group").state  # 'Empty'
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Mapping, Sequence

from cohort.client.admin import Admin, GroupDescription, GroupListing, ListedOffset, NewTopic
from cohort.client.cluster import TopicInfo
from cohort.client.errors import KafkaError
from cohort.client.offsets import OffsetAndMetadata
from cohort.client.topic_partition import TopicPartition


class BlockingAdmin:
    """Synchronous admin client: committed offsets, groups and topics on any Kafka-compatible server."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str = "cohort-admin",
        request_timeout_ms: int = 30000,
        api_timeout_ms: int = 60000,
        connect_timeout_ms: int = 10000,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cohort-blocking-admin", daemon=True)
        self._thread.start()
        self._call_timeout = (api_timeout_ms + request_timeout_ms) / 1000 + 5

        async def make() -> Admin:
            return Admin(
                bootstrap,
                client_id=client_id,
                request_timeout_ms=request_timeout_ms,
                api_timeout_ms=api_timeout_ms,
                connect_timeout_ms=connect_timeout_ms,
            )

        try:
            self._admin = self._run(make())
        except BaseException:
            self._stop_loop()
            raise

    def __enter__(self) -> "BlockingAdmin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _run(self, coro):
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("BlockingAdmin is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(self._call_timeout)

    def close(self) -> None:
        """Close connections and stop the private loop; idempotent."""
        if self._loop.is_closed():
            return
        try:
            self._run(self._admin.close())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()

    # ------------------------------------------------------------ offsets

    def commit_offsets(self, group_id: str, offsets: Mapping) -> None:
        """Simple commit (generation -1, no member id) of `offsets`.

        `offsets` maps (topic, partition) to an offset, (offset, metadata) or
        `OffsetAndMetadata`. Returns once the coordinator acknowledged every
        partition. Kafka refuses a simple commit while the group has active
        members: that raises `cohort.client.errors.UnknownMemberIdError` (a
        `CommitFailedError`); other refusals raise `KafkaError` with `.code`.
        """
        self._run(self._admin.alter_offsets(group_id, offsets))

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Committed offsets of the group (all partitions by default); partitions without one are omitted."""
        return self._run(self._admin.fetch_offsets(group_id, partitions))

    def fetch_offsets_many(
        self, groups: Mapping[str, Iterable[tuple[str, int]] | None]
    ) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
        return self._run(self._admin.fetch_offsets_many(groups))

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        return self._run(self._admin.delete_offsets(group_id, partitions))

    # ------------------------------------------------------------ groups

    def describe_group(self, group_id: str) -> GroupDescription:
        """State, protocol and members; a group that does not exist has state 'Dead'."""
        return self._run(self._admin.describe_group(group_id))

    def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        return self._run(self._admin.describe_groups(group_ids))

    def group_report(self, group_id: str, report: str, **params) -> object:
        """One of Cohort's own reports of a group ("health", "lag", "rebalances", "history"), as JSON data."""
        return self._run(self._admin.group_report(group_id, report, **params))

    def list_groups(self, states: Iterable[str] | None = None) -> list[GroupListing]:
        return self._run(self._admin.list_groups(states))

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, KafkaError | None]:
        return self._run(self._admin.delete_groups(group_ids))

    # ------------------------------------------------------------ topics

    def create_topics(self, topics: Iterable[NewTopic], *, validate_only: bool = False) -> dict[str, KafkaError | None]:
        return self._run(self._admin.create_topics(topics, validate_only=validate_only))

    def list_topics(self, *, include_internal: bool = False) -> dict[str, TopicInfo]:
        return self._run(self._admin.list_topics(include_internal=include_internal))

    def describe_topics(self, names: Iterable[str]) -> dict[str, TopicInfo]:
        return self._run(self._admin.describe_topics(names))

    def delete_topics(self, names: Iterable[str]) -> dict[str, KafkaError | None]:
        return self._run(self._admin.delete_topics(names))

    def create_partitions(self, new_totals: Mapping[str, int]) -> dict[str, KafkaError | None]:
        return self._run(self._admin.create_partitions(new_totals))

    def list_partition_offsets(self, specs: Mapping[tuple[str, int], int]) -> dict[TopicPartition, ListedOffset]:
        return self._run(self._admin.list_partition_offsets(specs))

    # Cohort's own: the end offsets sources report
    def report_end_offsets(self, ends: Mapping[tuple[str, int], int], *,
                           force: bool = False) -> dict[TopicPartition, int | KafkaError]:
        return self._run(self._admin.report_end_offsets(ends, force=force))

    def delete_end_offsets(self, partitions) -> dict[TopicPartition, int | KafkaError]:
        return self._run(self._admin.delete_end_offsets([TopicPartition(*tp) for tp in partitions]))

    def describe_end_offsets(self, topics: Iterable[str]) -> dict:
        return self._run(self._admin.describe_end_offsets(topics))
