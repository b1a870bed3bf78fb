"""Authorization of every request at Kafka's places, around the node's handlers.

`RequestAuthorization.guard` wraps each handler of the dispatch table with the
checks Kafka's `KafkaApis` makes for that API, and shapes denials exactly as
Kafka does:

* JoinGroup, SyncGroup, Heartbeat, LeaveGroup: group READ, else GROUP_AUTHORIZATION_FAILED;
* ConsumerGroupHeartbeat: group READ, and topic DESCRIBE for every subscribed topic name
  (TOPIC_AUTHORIZATION_FAILED); a regex resolves over the topics with DESCRIBE only;
  ConsumerGroupDescribe: DESCRIBE per group, and TOPIC_AUTHORIZATION_FAILED for a group whose
  assignments hold a topic without DESCRIBE;
* OffsetCommit: group READ (every partition GROUP_AUTHORIZATION_FAILED), then topic
  READ per topic (its partitions TOPIC_AUTHORIZATION_FAILED; the rest is committed);
* OffsetFetch: group DESCRIBE; requested topics without DESCRIBE answer
  TOPIC_AUTHORIZATION_FAILED, and "all topics" leaves them out;
* GroupReport (Cohort's own): group DESCRIBE; its offsets, commits and health cover only topics
  with DESCRIBE, as OffsetFetch's "all topics";
* DescribeGroups: DESCRIBE per group; ListGroups: every group with CLUSTER DESCRIBE,
  else only groups with DESCRIBE; DeleteGroups: DELETE per group;
* OffsetDelete: group DELETE, then topic READ per topic;
* GroupOverview (Cohort's own list page): the groups ListGroups would list, each without the
  topics (and their lag) the principal may not DESCRIBE;
* FindCoordinator (groups): group DESCRIBE;
* Metadata: topics without DESCRIBE are left out of "all topics" and answer
  TOPIC_AUTHORIZATION_FAILED when named; auto-creation needs CLUSTER or topic CREATE;
  the authorized-operations fields carry the real bits;
* CreateTopics: CLUSTER or topic CREATE; DeleteTopics: topic DELETE;
  CreatePartitions: topic ALTER; ListOffsets: topic DESCRIBE; Fetch: topic READ (CreateTopics,
  CreatePartitions, ListOffsets and Fetch are rows of `TOPIC_RULES`: the operation, where the topics
  are, how a refusal looks);
* ReportEndOffsets (Cohort's own): topic WRITE or ALTER, like a producer; a forced one (v1) topic or
  CLUSTER ALTER (its partitions
  TOPIC_AUTHORIZATION_FAILED); DescribeEndOffsets: topic DESCRIBE;
* DescribeAcls, DescribeUserScramCredentials: CLUSTER DESCRIBE; CreateAcls,
  DeleteAcls, AlterUserScramCredentials: CLUSTER ALTER (CLUSTER_AUTHORIZATION_FAILED).

Every explicit denial is one line on the ``cohort.audit`` logger and a count in
the metrics (by resource type and operation); topics and groups silently left
out of a listing are not (Kafka does not log those either).
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from cohort.coordinator.contracts.answers import PendingAnswer, encode_off_loop
from cohort.coordinator.contracts.collector import COLLECTOR_HOLD
from cohort.coordinator.contracts.requests import RequestContext
from cohort.coordinator.config import WORKER_LINK_LISTENER
from cohort.coordinator.security.authorizer import CLUSTER_NAME, AclOperation, Authorizer, ResourceType
from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import (
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    GroupOverviewRequest, GroupReportRequest, GroupReportResponse,
    DescribeEndOffsetsRequest, DescribeEndOffsetsResponse, ReportEndOffsetsRequest, ReportEndOffsetsResponse,
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, CreateAclsRequest, CreateAclsResponse,
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteAclsRequest, DeleteAclsResponse, DeleteGroupsRequest, DeleteGroupsResponse, DeleteTopicsRequest,
    DeleteTopicsResponse, DescribeAclsRequest, DescribeAclsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, FetchRequest, FetchResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListOffsetsRequest,
    ListOffsetsResponse, MetadataRequest, MetadataResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse,
)

audit = logging.getLogger("cohort.audit")

READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                                                AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE)
GROUP, TOPIC, CLUSTER = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.CLUSTER
INT32_MIN = -2147483648
_FAILED = "Authorization failed."


def _host(ctx: RequestContext) -> str:
    return ctx.client_host[1:] if ctx.client_host.startswith("/") else ctx.client_host


class RequestAuthorization:
    """The checks of one node; `authorizer` holds the ACLs, `topics` resolves topic ids and existence."""

    def __init__(self, authorizer: Authorizer, topic_exists: Callable[[str], bool],
                 topic_name_by_id: Callable[[Any], str | None], metrics: Any = None,
                 learn_topics: Callable[[list[str]], Awaitable[None]] | None = None) -> None:
        """`learn_topics(names)`: find out whether topics this node has not heard of exist (a `--workers`
        worker asks the registry's owner) before telling reading one from creating it."""
        self.authorizer = authorizer
        self._learn_topics = learn_topics
        self._topic_exists = topic_exists
        self._topic_name_by_id = topic_name_by_id
        self.metrics = metrics
        # (principal, host) -> topic -> may DESCRIBE, for the ACLs of `_described_generation`.
        self._described: dict[tuple[str, str], dict[str, bool]] = {}
        self._described_generation = -1

    # ------------------------------------------------------------------ decisions
    def allowed(self, ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str,
                audit_denial: bool = True) -> bool:
        if self.authorizer.authorize(ctx.principal, _host(ctx), op, rtype, name):
            return True
        if audit_denial:
            audit.info("authorization denied", extra={"principal": ctx.principal, "host": _host(ctx),
                                                      "operation": op.name, "resource_type": rtype.name,
                                                      "resource": name})
            if self.metrics is not None:
                self.metrics.count_authorization_denial(rtype.name, op.name)
        return False

    def topic_visibility(self, ctx: RequestContext) -> Callable[[str], bool]:
        """Whether the principal may DESCRIBE a topic (no audit line: what it may not see is left out),
        remembered until the ACLs change, so that resolving a regex over every topic at each heartbeat
        costs dictionary lookups."""
        if self._described_generation != self.authorizer.generation or len(self._described) > 10_000:
            self._described.clear()
            self._described_generation = self.authorizer.generation
        decided = self._described.setdefault((ctx.principal, _host(ctx)), {})

        def visible(topic: str) -> bool:
            known = decided.get(topic)
            if known is None:
                known = decided[topic] = self.allowed(ctx, DESCRIBE, TOPIC, topic, audit_denial=False)
            return known
        return visible

    def _cluster(self, ctx, op, audit_denial=True) -> bool:
        return self.allowed(ctx, op, CLUSTER, CLUSTER_NAME, audit_denial)

    def operations(self, ctx: RequestContext, rtype: ResourceType, name: str) -> int:
        return self.authorizer.authorized_operations(ctx.principal, _host(ctx), rtype, name)

    # ------------------------------------------------------------------ wiring
    def guard(self, api_key: int, handler: Callable) -> Callable:
        """The handler of `api_key` with its checks in front (the handler itself if the API has none)."""
        check, rule = self._GUARDS.get(api_key), TOPIC_RULES.get(api_key)
        if check is None and rule is None:
            return handler
        guarded = check.__get__(self) if check is not None else functools.partial(self._per_topic, rule)
        handler = handler if inspect.iscoroutinefunction(handler) else _as_async(handler)

        async def run(request, version, ctx):
            if ctx.listener == WORKER_LINK_LISTENER:  # another worker, forwarding what it already authorized
                return await handler(request, version, ctx)
            return await guarded(handler, request, version, ctx)
        run.__name__ = f"authorized_{getattr(handler, '__name__', 'handler')}"
        return run

    # ------------------------------------------------------------------ group membership
    async def _join_group(self, handler, request, version, ctx):
        if self.allowed(ctx, READ, GROUP, request.group_id):
            return await handler(request, version, ctx)
        return JoinGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                                 protocol_name=None if version >= 7 else "", leader="", member_id="", members=[])

    async def _sync_group(self, handler, request, version, ctx):
        if self.allowed(ctx, READ, GROUP, request.group_id):
            return await handler(request, version, ctx)
        return SyncGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, assignment=b"")

    async def _heartbeat(self, handler, request, version, ctx):
        if self.allowed(ctx, READ, GROUP, request.group_id):
            return await handler(request, version, ctx)
        return HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)

    async def _leave_group(self, handler, request, version, ctx):
        if self.allowed(ctx, READ, GROUP, request.group_id):
            return await handler(request, version, ctx)
        return LeaveGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])

    async def _consumer_group_heartbeat(self, handler, request, version, ctx):
        # Kafka: READ on the group; subscribed topic names must all be DESCRIBE-able.
        if not self.allowed(ctx, READ, GROUP, request.group_id):
            return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                                  error_message=f"Not authorized to access group {request.group_id}.")
        names = request.subscribed_topic_names or []
        denied = [n for n in names if not self.allowed(ctx, DESCRIBE, TOPIC, n)]
        if denied:
            return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                  error_message=f"Not authorized to describe topics {denied}.")
        # A regex resolves only over the topics the member's principal may DESCRIBE (KAFKA-18813).
        return await handler(request, version, dataclasses.replace(ctx, topic_visible=self.topic_visibility(ctx)))

    async def _consumer_group_describe(self, handler, request, version, ctx):
        Described = ConsumerGroupDescribeResponse.DescribedConsumerGroup
        response = await self._describe_each_group(
            handler, request, version, ctx, "group_ids", ConsumerGroupDescribeResponse,
            lambda name: Described(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=name,
                                   error_message=f"Not authorized to describe group {name}."),
            request.include_authorized_operations)
        # Kafka (KAFKA-18813): a group whose members' assignments or target assignments hold a topic the
        # principal may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED, with no members and no names.
        inner = _unwrap(response)
        visible = self.topic_visibility(ctx)
        inner.groups = [g if g.error_code != 0 or all(
            visible(t.topic_name) for m in g.members for a in (m.assignment, m.target_assignment)
            for t in a.topic_partitions) else Described(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, group_id=g.group_id, members=[],
                error_message="The group has described topic(s) that the client is not authorized to describe.")
            for g in inner.groups]
        return response

    # ------------------------------------------------------------------ offsets
    async def _offset_commit(self, handler, request, version, ctx):
        Topic, Partition = OffsetCommitResponse.OffsetCommitResponseTopic, \
            OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition

        def refused(topics, code):
            return [Topic(name=t.name, partitions=[Partition(partition_index=p.partition_index, error_code=code)
                                                   for p in t.partitions]) for t in topics]

        if not self.allowed(ctx, READ, GROUP, request.group_id):
            return await _refusal(lambda: OffsetCommitResponse(
                topics=refused(request.topics, ErrorCode.GROUP_AUTHORIZATION_FAILED)), _partitions(request.topics))
        allowed, denied = self._split_topics(ctx, READ, request.topics, lambda t: t.name)
        if not denied:
            return await handler(request, version, ctx)
        if not allowed:
            return await _refusal(lambda: OffsetCommitResponse(
                topics=refused(denied, ErrorCode.TOPIC_AUTHORIZATION_FAILED)), _partitions(denied))
        answer = refused(denied, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        if allowed:
            narrowed = copy.copy(request)
            narrowed.topics = allowed
            response = _unwrap(await handler(narrowed, version, ctx))
            response.topics = list(response.topics) + answer
            return response
        return OffsetCommitResponse(topics=answer)

    def _split_topics(self, ctx, op, topics, name_of, audit_denial=True):
        allowed, denied, decided = [], [], {}
        for t in topics:
            name = name_of(t)
            if name is None:  # an unknown topic id: the handler answers UNKNOWN_TOPIC_ID, as Kafka does
                allowed.append(t)
                continue
            if name not in decided:
                decided[name] = self.allowed(ctx, op, TOPIC, name, audit_denial)
            (allowed if decided[name] else denied).append(t)
        return allowed, denied

    async def _offset_fetch(self, handler, request, version, ctx):
        if version >= 8:
            return await self._offset_fetch_groups(handler, request, version, ctx)
        Topic = OffsetFetchResponse.OffsetFetchResponseTopic
        Partition = Topic.OffsetFetchResponsePartition

        def refused(topics, code):
            return [Topic(name=t.name, partitions=[
                Partition(partition_index=i, committed_offset=-1, metadata="", error_code=code)
                for i in t.partition_indexes]) for t in topics or []]

        if not self.allowed(ctx, DESCRIBE, GROUP, request.group_id):
            if version < 2:  # v0-1 have no group-level error: every partition carries it
                return OffsetFetchResponse(topics=refused(request.topics, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            return OffsetFetchResponse(topics=[], error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if request.topics is None:  # every committed topic: leave out those the principal may not describe
            response = await handler(request, version, ctx)
            inner = _unwrap(response)
            inner.topics = [t for t in inner.topics if self.allowed(ctx, DESCRIBE, TOPIC, t.name, False)]
            return response
        allowed, denied = self._split_topics(ctx, DESCRIBE, request.topics, lambda t: t.name)
        if not denied:
            return await handler(request, version, ctx)
        narrowed = copy.copy(request)
        narrowed.topics = allowed
        response = _unwrap(await handler(narrowed, version, ctx)) if allowed else OffsetFetchResponse(topics=[])
        response.topics = list(response.topics) + refused(denied, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        return response

    async def _offset_fetch_groups(self, handler, request, version, ctx):
        Group = OffsetFetchResponse.OffsetFetchResponseGroup
        Topic = Group.OffsetFetchResponseTopics
        Partition = Topic.OffsetFetchResponsePartitions
        allowed_groups, denied_groups, refused_topics = [], [], {}
        for g in request.groups:
            if not self.allowed(ctx, DESCRIBE, GROUP, g.group_id):
                denied_groups.append(g.group_id)
                continue
            narrowed = copy.copy(g)
            if g.topics is not None:
                ok, denied = self._split_topics(ctx, DESCRIBE, g.topics, lambda t: t.name)
                narrowed.topics = ok
                refused_topics[g.group_id] = [Topic(name=t.name, partitions=[
                    Partition(partition_index=i, committed_offset=-1, metadata="",
                              error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED) for i in t.partition_indexes])
                    for t in denied]
            allowed_groups.append(narrowed)
        if allowed_groups:
            narrowed_request = copy.copy(request)
            narrowed_request.groups = allowed_groups
            response = await handler(narrowed_request, version, ctx)
            inner = _unwrap(response)
        else:
            response = inner = OffsetFetchResponse(groups=[])
        requested_all = {g.group_id for g in request.groups if g.topics is None}
        for group in inner.groups:
            if group.group_id in requested_all:
                group.topics = [t for t in group.topics if self.allowed(ctx, DESCRIBE, TOPIC, t.name, False)]
            group.topics = list(group.topics) + refused_topics.get(group.group_id, [])
        inner.groups = list(inner.groups) + [
            Group(group_id=g, topics=[], error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in denied_groups]
        return response

    async def _group_report(self, handler, request, version, ctx):
        # Cohort's own report on a group (journal, history, health, offsets at a time): group DESCRIBE as
        # DescribeGroups, and only the topics OffsetFetch would show (topic DESCRIBE, silently left out).
        if self.allowed(ctx, DESCRIBE, GROUP, request.group_id):
            return await handler(request, version, dataclasses.replace(ctx, topic_visible=self.topic_visibility(ctx)))
        return GroupReportResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                   error_message="not authorized to describe the group", report=b"")

    async def _offset_delete(self, handler, request, version, ctx):
        Topic = OffsetDeleteResponse.OffsetDeleteResponseTopic
        Partition = Topic.OffsetDeleteResponsePartition
        if not self.allowed(ctx, DELETE, GROUP, request.group_id):
            return OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, topics=[])
        allowed, denied = self._split_topics(ctx, READ, request.topics, lambda t: t.name)
        if not denied:
            return await handler(request, version, ctx)
        narrowed = copy.copy(request)
        narrowed.topics = allowed
        response = _unwrap(await handler(narrowed, version, ctx))
        response.topics = list(response.topics) + [Topic(name=t.name, partitions=[
            Partition(partition_index=p.partition_index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            for p in t.partitions]) for t in denied]
        return response

    # ------------------------------------------------------------------ group admin
    async def _describe_groups(self, handler, request, version, ctx):
        Described = DescribeGroupsResponse.DescribedGroup
        return await self._describe_each_group(
            handler, request, version, ctx, "groups", DescribeGroupsResponse,
            lambda name: Described(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=name, group_state="",
                                   protocol_type="", protocol_data="", members=[]),
            version >= 3 and request.include_authorized_operations)

    async def _describe_each_group(self, handler, request, version, ctx, field: str, response_cls, denied,
                                   with_operations: bool):
        """DESCRIBE per group: the handler sees the allowed ones, the others are answered `denied(name)`,
        in the order asked; `with_operations` fills each answer's authorized operations."""
        names = getattr(request, field)
        allowed = [g for g in names if self.allowed(ctx, DESCRIBE, GROUP, g)]
        narrowed = copy.copy(request)
        setattr(narrowed, field, allowed)
        response = await handler(narrowed, version, ctx) if allowed else response_cls(groups=[])
        inner = _unwrap(response)
        by_id = {g.group_id: g for g in inner.groups}
        groups = []
        for name in names:
            found = by_id.get(name)
            if found is None:
                found = denied(name)
            elif with_operations:
                found.authorized_operations = self.operations(ctx, GROUP, name)
            groups.append(found)
        inner.groups = groups
        return response

    async def _list_groups(self, handler, request, version, ctx):
        response = await handler(request, version, ctx)
        if self._cluster(ctx, DESCRIBE, audit_denial=False):
            return response
        inner = _unwrap(response)
        inner.groups = [g for g in inner.groups if self.allowed(ctx, DESCRIBE, GROUP, g.group_id, False)]
        return response

    async def _group_overview(self, handler, request, version, ctx):
        # Cohort's own list page: the groups ListGroups would list, each summarized over the topics OffsetFetch
        # shows. The page itself skips the rest, so its cursor, counts and health never reflect them.
        def group_visible(group_id: str) -> bool:
            return self.allowed(ctx, DESCRIBE, GROUP, group_id, False)
        return await handler(request, version, dataclasses.replace(
            ctx, topic_visible=self.topic_visibility(ctx),
            group_visible=None if self._cluster(ctx, DESCRIBE, audit_denial=False) else group_visible))

    async def _delete_groups(self, handler, request, version, ctx):
        allowed = [g for g in request.groups_names if self.allowed(ctx, DELETE, GROUP, g)]
        denied = [g for g in request.groups_names if g not in allowed]
        if not denied:
            return await handler(request, version, ctx)
        narrowed = copy.copy(request)
        narrowed.groups_names = allowed
        response = _unwrap(await handler(narrowed, version, ctx)) if allowed else DeleteGroupsResponse(results=[])
        response.results = list(response.results) + [DeleteGroupsResponse.DeletableGroupResult(
            group_id=g, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in denied]
        return response

    async def _find_coordinator(self, handler, request, version, ctx):
        if request.key_type != 0:
            return await handler(request, version, ctx)
        if version < 4:
            if self.allowed(ctx, DESCRIBE, GROUP, request.key):
                return await handler(request, version, ctx)
            return FindCoordinatorResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message=_FAILED,
                                           node_id=-1, host="", port=-1)
        allowed = [k for k in request.coordinator_keys if self.allowed(ctx, DESCRIBE, GROUP, k)]
        narrowed = copy.copy(request)
        narrowed.coordinator_keys = allowed
        response = _unwrap(await handler(narrowed, version, ctx))
        response.coordinators = list(response.coordinators) + [FindCoordinatorResponse.Coordinator(
            key=k, node_id=-1, host="", port=-1, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
            error_message=_FAILED) for k in request.coordinator_keys if k not in allowed]
        return response

    # ------------------------------------------------------------------ topics
    async def _metadata(self, handler, request, version, ctx):
        Entry = MetadataResponse.MetadataResponseTopic
        denied: list[str] = []
        narrowed = request
        if request.topics:
            if self._learn_topics is not None and (version < 4 or request.allow_auto_topic_creation):
                await self._learn_topics([t.name for t in request.topics if t.name is not None])
            keep = []
            may_create = None
            for t in request.topics:
                name = t.name if t.name is not None else self._topic_name_by_id(t.topic_id)
                if name is None:
                    keep.append(t)  # unknown id: the handler answers UNKNOWN_TOPIC_ID
                elif not self.allowed(ctx, DESCRIBE, TOPIC, name):
                    denied.append(name)
                elif not self._topic_exists(name) and (version < 4 or request.allow_auto_topic_creation):
                    if may_create is None:
                        may_create = self._cluster(ctx, CREATE, audit_denial=False)
                    if may_create or self.allowed(ctx, CREATE, TOPIC, name):
                        keep.append(t)
                    else:
                        denied.append(name)
                else:
                    keep.append(t)
            if denied:
                narrowed = copy.copy(request)
                narrowed.topics = keep
        response = await handler(narrowed, version, ctx)
        inner = _unwrap(response)
        if request.topics is None or (version == 0 and not request.topics):
            inner.topics = [t for t in inner.topics if self.allowed(ctx, DESCRIBE, TOPIC, t.name, False)]
        elif denied and not narrowed.topics:
            inner.topics = []  # the handler read an empty list as "no topics", which is right
        inner.topics = list(inner.topics) + [Entry(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name,
                                                   is_internal=False, partitions=[]) for name in denied]
        if version >= 8 and request.include_topic_authorized_operations:
            for t in inner.topics:
                if t.error_code == 0 and t.name is not None:
                    t.topic_authorized_operations = self.operations(ctx, TOPIC, t.name)
        if 8 <= version <= 10 and request.include_cluster_authorized_operations:
            inner.cluster_authorized_operations = self.operations(ctx, CLUSTER, CLUSTER_NAME)
        return response

    async def _delete_topics(self, handler, request, version, ctx):
        Result = DeleteTopicsResponse.DeletableTopicResult
        narrowed = copy.copy(request)
        refused = []
        if version >= 6:
            keep = []
            for t in request.topics:
                name = t.name if t.name is not None else self._topic_name_by_id(t.topic_id)
                if name is not None and not self.allowed(ctx, DELETE, TOPIC, name):
                    refused.append(Result(name=t.name, topic_id=t.topic_id,
                                          error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=_FAILED))
                else:
                    keep.append(t)
            narrowed.topics = keep
        else:
            keep = []
            for name in request.topic_names:
                if self.allowed(ctx, DELETE, TOPIC, name):
                    keep.append(name)
                else:
                    refused.append(Result(name=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                          error_message=_FAILED))
            narrowed.topic_names = keep
        if not refused:
            return await handler(request, version, ctx)
        response = _unwrap(await handler(narrowed, version, ctx))
        response.responses = list(response.responses) + refused
        return response

    async def _per_topic(self, rule: "TopicRule", handler, request, version, ctx):
        """Kafka's per-topic check: topics the principal may not act on answer TOPIC_AUTHORIZATION_FAILED
        in the response, the handler gets the others (or is not called, when the rule says so)."""
        topics = getattr(request, rule.request_field)
        if rule.cluster_operation is not None and self._cluster(ctx, rule.cluster_operation, audit_denial=False):
            return await handler(request, version, ctx)
        allowed, denied = self._split_topics(ctx, rule.operation, topics, lambda t: rule.name_of(self, t, version))
        if not denied:
            return await handler(request, version, ctx)
        narrowed = copy.copy(request)
        setattr(narrowed, rule.request_field, allowed)
        if allowed or rule.empty_response is None:
            response = _unwrap(await handler(narrowed, version, ctx))
        else:
            response = rule.empty_response()

        def refuse():
            entries = list(getattr(response, rule.response_field)) + [rule.refused(t, version) for t in denied]
            setattr(response, rule.response_field, entries)
            return response
        return await _refusal(refuse, _partitions(denied))

    async def _report_end_offsets(self, handler, request, version, ctx):
        """A source reporting end offsets needs WRITE (it produces the data) or ALTER on each topic; a forced
        report (an operator moving an end back or removing it) needs ALTER on the topic or the cluster."""
        if version >= 1 and request.force:
            cluster = self._cluster(ctx, ALTER, audit_denial=False)

            def may_report(t) -> bool:
                return cluster or self.allowed(ctx, ALTER, TOPIC, t.name)
        else:
            def may_report(t) -> bool:
                return (self.allowed(ctx, WRITE, TOPIC, t.name, audit_denial=False)
                        or self.allowed(ctx, ALTER, TOPIC, t.name))
        allowed, denied = [], []
        for t in request.topics:
            (allowed if may_report(t) else denied).append(t)
        if not denied:
            return await handler(request, version, ctx)
        Result = ReportEndOffsetsResponse.ReportedTopicResult
        count = _partitions(denied)
        message = _FAILED if count < REFUSED_OFF_LOOP_ENTRIES else None  # (a big refusal: no longer than asked)

        def refused():
            return [Result(name=t.name, partitions=[Result.ReportedPartitionResult(
                partition_index=p.partition_index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                error_message=message) for p in t.partitions]) for t in denied]
        if not allowed:
            return await _refusal(lambda: ReportEndOffsetsResponse(topics=refused()), count)
        narrowed = copy.copy(request)
        narrowed.topics = allowed
        response = _unwrap(await handler(narrowed, version, ctx))
        response.topics = list(response.topics) + refused()
        return response

    # ------------------------------------------------------------------ security admin
    async def _describe_acls(self, handler, request, version, ctx):
        if self._cluster(ctx, DESCRIBE):
            return await handler(request, version, ctx)
        return DescribeAclsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=_FAILED,
                                    resources=[])

    async def _create_acls(self, handler, request, version, ctx):
        if self._cluster(ctx, ALTER):
            return await handler(request, version, ctx)
        return CreateAclsResponse(results=[CreateAclsResponse.AclCreationResult(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=_FAILED) for _ in request.creations])

    async def _delete_acls(self, handler, request, version, ctx):
        if self._cluster(ctx, ALTER):
            return await handler(request, version, ctx)
        return DeleteAclsResponse(filter_results=[DeleteAclsResponse.DeleteAclsFilterResult(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=_FAILED, matching_acls=[])
            for _ in request.filters])

    async def _describe_scram(self, handler, request, version, ctx):
        if self._cluster(ctx, DESCRIBE):
            return await handler(request, version, ctx)
        return DescribeUserScramCredentialsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                    error_message=_FAILED, results=[])

    async def _alter_scram(self, handler, request, version, ctx):
        if self._cluster(ctx, ALTER):
            return await handler(request, version, ctx)
        users = list(dict.fromkeys(x.name for x in [*request.deletions, *request.upsertions]))
        return AlterUserScramCredentialsResponse(results=[
            AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult(
                user=u, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=_FAILED) for u in users])

    _GUARDS = {
        JoinGroupRequest.API_KEY: _join_group,
        ConsumerGroupHeartbeatRequest.API_KEY: _consumer_group_heartbeat,
        ConsumerGroupDescribeRequest.API_KEY: _consumer_group_describe,
        SyncGroupRequest.API_KEY: _sync_group,
        HeartbeatRequest.API_KEY: _heartbeat,
        LeaveGroupRequest.API_KEY: _leave_group,
        OffsetCommitRequest.API_KEY: _offset_commit,
        OffsetFetchRequest.API_KEY: _offset_fetch,
        OffsetDeleteRequest.API_KEY: _offset_delete,
        GroupReportRequest.API_KEY: _group_report,
        GroupOverviewRequest.API_KEY: _group_overview,
        ReportEndOffsetsRequest.API_KEY: _report_end_offsets,
        DescribeGroupsRequest.API_KEY: _describe_groups,
        ListGroupsRequest.API_KEY: _list_groups,
        DeleteGroupsRequest.API_KEY: _delete_groups,
        FindCoordinatorRequest.API_KEY: _find_coordinator,
        MetadataRequest.API_KEY: _metadata,
        DeleteTopicsRequest.API_KEY: _delete_topics,
        DescribeAclsRequest.API_KEY: _describe_acls,
        CreateAclsRequest.API_KEY: _create_acls,
        DeleteAclsRequest.API_KEY: _delete_acls,
        DescribeUserScramCredentialsRequest.API_KEY: _describe_scram,
        AlterUserScramCredentialsRequest.API_KEY: _alter_scram,
    }


@dataclass(frozen=True, slots=True)
class TopicRule:
    """One API's per-topic authorization: which operation, where the topics are, how a refusal looks."""

    operation: AclOperation
    request_field: str
    response_field: str
    refused: Callable[[Any, int], Any]  # (request topic, version) -> its TOPIC_AUTHORIZATION_FAILED entry
    name_of: Callable[[RequestAuthorization, Any, int], str | None] = lambda auth, t, version: t.name
    empty_response: Callable[[], Any] | None = None  # answer without calling the handler when nothing is allowed
    cluster_operation: AclOperation | None = None  # allowed on the CLUSTER: every topic is


_ListOffsetsTopic = ListOffsetsResponse.ListOffsetsTopicResponse
_FetchTopic = FetchResponse.FetchableTopicResponse

TOPIC_RULES: dict[int, TopicRule] = {
    CreateTopicsRequest.API_KEY: TopicRule(
        CREATE, "topics", "topics", cluster_operation=CREATE,
        empty_response=lambda: CreateTopicsResponse(topics=[]),
        refused=lambda t, v: CreateTopicsResponse.CreatableTopicResult(
            name=t.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=_FAILED)),
    CreatePartitionsRequest.API_KEY: TopicRule(
        ALTER, "topics", "results", empty_response=lambda: CreatePartitionsResponse(results=[]),
        refused=lambda t, v: CreatePartitionsResponse.CreatePartitionsTopicResult(
            name=t.name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=_FAILED)),
    ListOffsetsRequest.API_KEY: TopicRule(
        DESCRIBE, "topics", "topics",
        refused=lambda t, v: _ListOffsetsTopic(name=t.name, partitions=[
            _ListOffsetsTopic.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                                           error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                           old_style_offsets=[]) for p in t.partitions])),
    DescribeEndOffsetsRequest.API_KEY: TopicRule(
        DESCRIBE, "topics", "topics", name_of=lambda auth, t, version: t,
        refused=lambda t, v: DescribeEndOffsetsResponse.DescribedTopic(
            name=t, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message=_FAILED, partitions=[])),
    FetchRequest.API_KEY: TopicRule(
        READ, "topics", "responses",
        name_of=lambda auth, t, version: t.topic if version < 13 else auth._topic_name_by_id(t.topic_id),
        refused=lambda t, v: _FetchTopic(
            topic=t.topic if v < 13 else "", topic_id=t.topic_id if v >= 13 else _FetchTopic().topic_id,
            partitions=[_FetchTopic.PartitionData(partition_index=p.partition,
                                                  error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                  high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                                                  aborted_transactions=None, records=b"")
                        for p in t.partitions])),
}


# A refusal naming more partitions than this is built on a worker thread and encoded there (`_refusal`).
REFUSED_OFF_LOOP_ENTRIES = 5_000


def _partitions(topics) -> int:
    """How many entries refusing `topics` makes: their partitions (a topic entry without any counts one)."""
    return sum(len(getattr(t, "partitions", None) or ()) or 1 for t in topics)


async def _refusal(build: Callable[[], Any], entries: int):
    """The answer `build()` makes to refused work: for a big request (`entries` partitions past
    REFUSED_OFF_LOOP_ENTRIES) made on a worker thread and encoded off the loop, so refusing megabytes
    holds up no other client; small ones are made here."""
    if entries < REFUSED_OFF_LOOP_ENTRIES:
        return build()
    return encode_off_loop(await COLLECTOR_HOLD.run(build))


def _unwrap(response):
    """The response inside a settled `PendingAnswer` (one encoded off the loop: edits made to it reach the
    encoder), or the response itself."""
    return response.response if type(response) is PendingAnswer else response


def _as_async(handler):
    """A plain handler as a coroutine function (it hands back a `PendingAnswer` when it must wait)."""
    async def run(request, version, ctx):
        result = handler(request, version, ctx)
        return await result if type(result) is PendingAnswer else result
    return run
