"""ReportEndOffsets and DescribeEndOffsets (Cohort's own APIs 10001, 10002): how far topic partitions go.

A source's report only moves an end forward; an operator's forced report (v1 `force`: `cohort topics
end-offsets set --force`, `… delete`) replaces or removes it and is one line on the `cohort.audit` logger.
Both are answered by the node keeping the topic registry (others answer NOT_CONTROLLER). The authorizer
(`cohort.coordinator.security.authorization`) checks WRITE or ALTER for a report, ALTER for a forced one.
"""
from __future__ import annotations

import logging
import time

from cohort.coordinator.contracts.requests import RequestContext
from cohort.coordinator.contracts.store import StorageError
from cohort.coordinator.server.topics import TopicRefusal
from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import (
    DescribeEndOffsetsResponse,
    ReportEndOffsetsResponse,
)

audit = logging.getLogger("cohort.audit")


class EndOffsetsApis:
    """The end-offset handlers of `handlers.RequestHandlers` (its `topics`, `_keeps_registry`, `_not_controller`)."""

    # ------------------------------------------------------------------ end offsets (Cohort's own APIs)
    async def report_end_offsets(self, request, version: int, ctx: RequestContext) -> ReportEndOffsetsResponse:
        """A source reports how far its partitions' data goes; kept with the topic registry (controller only)."""
        Result = ReportEndOffsetsResponse.ReportedTopicResult
        Partition = Result.ReportedPartitionResult
        now_ms = int(time.time() * 1000)
        force = version >= 1 and request.force
        topics = []
        for wanted in request.topics:
            ends: dict[int, int] = {}
            for p in wanted.partitions:  # a partition named twice: the higher end counts
                ends[p.partition_index] = max(p.end_offset, ends.get(p.partition_index, p.end_offset))
            if not self._keeps_registry:
                results: dict = dict.fromkeys(ends, self._not_controller())
            else:
                try:
                    if force:
                        results = await self._correct_end_offsets(wanted.name, ends, now_ms, ctx)
                    else:
                        results = await self.topics.report_end_offsets(wanted.name, ends, now_ms)
                except StorageError as exc:
                    results = dict.fromkeys(ends, TopicRefusal(exc.error_code, f"Could not persist: {exc}"))
            partitions = []
            for index, result in results.items():
                if isinstance(result, TopicRefusal):
                    partitions.append(Partition(partition_index=index, error_code=result.error_code,
                                                error_message=result.message, end_offset=-1))
                else:
                    partitions.append(Partition(partition_index=index, error_code=0,
                                                end_offset=-1 if result is None else result.end_offset))
            topics.append(Result(name=wanted.name, partitions=partitions))
        return ReportEndOffsetsResponse(topics=topics)

    async def _correct_end_offsets(self, name: str, ends: dict[int, int], now_ms: int,
                                   ctx: RequestContext) -> dict:
        """A forced report (an operator's correction, -1: remove): applied whatever the kept end, and audited
        with the end before and after. Per partition the end now kept (None: none) or the refusal."""
        corrected = await self.topics.correct_end_offsets(
            name, {p: None if end == -1 else end for p, end in ends.items()}, now_ms)
        results: dict = {}
        for partition, result in corrected.items():
            if isinstance(result, TopicRefusal):
                results[partition] = result
                continue
            before, after = result
            audit.info("end offset corrected", extra={
                "principal": ctx.principal, "host": ctx.client_host, "topic": name, "partition": partition,
                "end_before": None if before is None else before.end_offset,
                "end_after": None if after is None else after.end_offset})
            results[partition] = after
        return results

    def describe_end_offsets(self, request, version: int, ctx: RequestContext) -> DescribeEndOffsetsResponse:
        """Every partition of each topic with its reported end (-1: none), from the node keeping the registry."""
        Described = DescribeEndOffsetsResponse.DescribedTopic
        topics = []
        for name in request.topics:
            topic = self.topics.get(name)
            refusal = (self._not_controller() if not self._keeps_registry else
                       TopicRefusal(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
                       if topic is None else None)
            if refusal is not None:
                topics.append(Described(name=name, error_code=refusal.error_code, error_message=refusal.message,
                                        partitions=[]))
                continue
            ends = self.topics.reported_ends(name)
            topics.append(Described(name=name, error_code=0, partitions=[
                Described.DescribedPartition(partition_index=p, end_offset=ends[p].end_offset if p in ends else -1,
                                             reported_ms=ends[p].reported_ms if p in ends else -1)
                for p in range(topic.partitions)]))
        return DescribeEndOffsetsResponse(topics=topics)
