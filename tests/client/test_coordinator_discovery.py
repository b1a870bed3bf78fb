"""Coordinator discovery and Kafka's retry rules, with a scripted broker in front of a real `cohort serve`.

The scripted broker stands in for the parts of a multi-broker Kafka cluster
that a single Cohort node never does on demand: a coordinator that is still
loading, and a coordinator that moved to another broker.
"""
from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from cohort.client.admin import Admin
from cohort.client.cluster import Cluster
from cohort.client.offsets import OffsetAndMetadata, commit_offsets, fetch_offsets
from cohort.client.topic_partition import TopicPartition
from cohort.protocol.errors import ErrorCode
from cohort.protocol.framing import FrameReader, decode_request, encode_response
from cohort.protocol.messages import (
    ApiVersionsResponse,
    FindCoordinatorResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
)

pytestmark = pytest.mark.timeout(60)

ADVERTISED = {18: (0, 3), 10: (0, 3), 9: (1, 7), 8: (2, 7)}


class MovingCoordinator:
    """Answers FindCoordinator from a script; refuses group requests with NOT_COORDINATOR."""

    def __init__(self, find_script: list) -> None:
        self.find_script = find_script  # each: an ErrorCode, "self", or (host, port)
        self.calls: Counter[str] = Counter()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader, writer):
        frames = FrameReader()
        try:
            while data := await reader.read(65536):
                for frame in frames.feed(data):
                    header, request = decode_request(frame)
                    writer.write(encode_response(header, self._answer(header.api_key, request)))
        except (asyncio.CancelledError, ConnectionError):
            pass
        finally:
            writer.close()

    def _answer(self, api_key: int, request):
        if api_key == 18:
            self.calls["ApiVersions"] += 1
            return ApiVersionsResponse(error_code=0, api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in ADVERTISED.items()
            ])
        if api_key == 10:
            step = self.find_script[min(self.calls["FindCoordinator"], len(self.find_script) - 1)]
            self.calls["FindCoordinator"] += 1
            if isinstance(step, ErrorCode):
                return FindCoordinatorResponse(error_code=step, node_id=-1, host="", port=-1)
            host, port = ("127.0.0.1", self.port) if step == "self" else step
            return FindCoordinatorResponse(error_code=0, node_id=7, host=host, port=port)
        if api_key == 9:
            self.calls["OffsetFetch"] += 1
            return OffsetFetchResponse(error_code=ErrorCode.NOT_COORDINATOR, topics=[])
        if api_key == 8:
            self.calls["OffsetCommit"] += 1
            Topic = OffsetCommitResponse.OffsetCommitResponseTopic
            return OffsetCommitResponse(topics=[
                Topic(name=t.name, partitions=[
                    Topic.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=ErrorCode.NOT_COORDINATOR)
                    for p in t.partitions
                ])
                for t in request.topics
            ])
        raise AssertionError(f"unexpected API {api_key}")


async def test_fetch_retries_a_loading_coordinator_and_follows_it_when_it_moves(shared_cohort_server):
    real = ("127.0.0.1", shared_cohort_server.port)
    async with Admin(shared_cohort_server.bootstrap) as admin:
        await admin.alter_offsets("g-moved", {("moved", 0): (31, "here")})
    broker = MovingCoordinator([ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, "self", real])
    await broker.start()
    cluster = Cluster(f"127.0.0.1:{broker.port}", retry_backoff_ms=10, api_timeout_ms=20000)
    try:
        assert await fetch_offsets(cluster, "g-moved") == {TopicPartition("moved", 0): OffsetAndMetadata(31, "here")}
        # Loading and unavailable: retried; found itself, refused with NOT_COORDINATOR; rediscovered the real one.
        assert broker.calls["FindCoordinator"] == 4
        assert broker.calls["OffsetFetch"] == 1
    finally:
        await cluster.close()
        await broker.stop()


async def test_commit_rediscovers_on_not_coordinator(shared_cohort_server):
    real = ("127.0.0.1", shared_cohort_server.port)
    broker = MovingCoordinator(["self", real])
    await broker.start()
    cluster = Cluster(f"127.0.0.1:{broker.port}", retry_backoff_ms=10, api_timeout_ms=20000)
    try:
        await commit_offsets(cluster, "g-moved-commit", {("moved", 1): (5, "after move")})
        assert broker.calls["OffsetCommit"] == 1 and broker.calls["FindCoordinator"] == 2
    finally:
        await cluster.close()
        await broker.stop()
    async with Admin(shared_cohort_server.bootstrap) as admin:
        assert await admin.fetch_offsets("g-moved-commit") == {TopicPartition("moved", 1): OffsetAndMetadata(5, "after move")}


async def test_retries_are_bounded_by_the_api_timeout():
    broker = MovingCoordinator([ErrorCode.COORDINATOR_NOT_AVAILABLE])
    await broker.start()
    cluster = Cluster(f"127.0.0.1:{broker.port}", retry_backoff_ms=10, retry_backoff_max_ms=50, api_timeout_ms=500)
    try:
        with pytest.raises(Exception) as info:
            await fetch_offsets(cluster, "g-never")
        assert "COORDINATOR_NOT_AVAILABLE" in str(info.value)
        assert broker.calls["FindCoordinator"] >= 2
    finally:
        await cluster.close()
        await broker.stop()
