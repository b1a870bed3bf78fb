"""Every Kafka message Cohort speaks, each declared once (see `cohort.protocol.schema`).

`API_SCHEMAS` maps an API key to its request and response classes.
"""
from dataclasses import dataclass

from cohort.protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse
from cohort.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from cohort.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse
from cohort.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from cohort.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from cohort.protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from cohort.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from cohort.protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from cohort.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from cohort.protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from cohort.protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from cohort.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from cohort.protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse
from cohort.protocol.messages.fetch import FetchRequest, FetchResponse
from cohort.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from cohort.protocol.messages.group_overview import GroupOverviewRequest, GroupOverviewResponse
from cohort.protocol.messages.end_offsets import (
    DescribeEndOffsetsRequest,
    DescribeEndOffsetsResponse,
    ReportEndOffsetsRequest,
    ReportEndOffsetsResponse,
)
from cohort.protocol.messages.group_report import GroupReportRequest, GroupReportResponse
from cohort.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from cohort.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from cohort.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from cohort.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from cohort.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from cohort.protocol.messages.metadata import MetadataRequest, MetadataResponse
from cohort.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from cohort.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from cohort.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from cohort.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from cohort.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from cohort.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str
    request: type
    response: type
    min_version: int
    max_version: int
    flexible_from: int  # first flexible version (32767 when never flexible)


def _api(name: str, request: type, response: type) -> Api:
    schema = request.SCHEMA
    return Api(request.API_KEY, name, request, response, schema.valid.low, schema.valid.high, schema.flexible.low
               if schema.flexible.low <= schema.flexible.high else 32767)


API_SCHEMAS: dict[int, Api] = {a.key: a for a in [
    _api("ApiVersions", ApiVersionsRequest, ApiVersionsResponse),
    _api("FindCoordinator", FindCoordinatorRequest, FindCoordinatorResponse),
    _api("JoinGroup", JoinGroupRequest, JoinGroupResponse),
    _api("SyncGroup", SyncGroupRequest, SyncGroupResponse),
    _api("Heartbeat", HeartbeatRequest, HeartbeatResponse),
    _api("LeaveGroup", LeaveGroupRequest, LeaveGroupResponse),
    _api("OffsetCommit", OffsetCommitRequest, OffsetCommitResponse),
    _api("OffsetFetch", OffsetFetchRequest, OffsetFetchResponse),
    _api("DescribeGroups", DescribeGroupsRequest, DescribeGroupsResponse),
    _api("ListGroups", ListGroupsRequest, ListGroupsResponse),
    _api("DeleteGroups", DeleteGroupsRequest, DeleteGroupsResponse),
    _api("OffsetDelete", OffsetDeleteRequest, OffsetDeleteResponse),
    _api("Metadata", MetadataRequest, MetadataResponse),
    _api("CreateTopics", CreateTopicsRequest, CreateTopicsResponse),
    _api("DeleteTopics", DeleteTopicsRequest, DeleteTopicsResponse),
    _api("CreatePartitions", CreatePartitionsRequest, CreatePartitionsResponse),
    _api("ListOffsets", ListOffsetsRequest, ListOffsetsResponse),
    _api("Fetch", FetchRequest, FetchResponse),
    _api("SaslHandshake", SaslHandshakeRequest, SaslHandshakeResponse),
    _api("SaslAuthenticate", SaslAuthenticateRequest, SaslAuthenticateResponse),
    _api("DescribeAcls", DescribeAclsRequest, DescribeAclsResponse),
    _api("CreateAcls", CreateAclsRequest, CreateAclsResponse),
    _api("DeleteAcls", DeleteAclsRequest, DeleteAclsResponse),
    _api("DescribeUserScramCredentials", DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse),
    _api("AlterUserScramCredentials", AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse),
    _api("ConsumerGroupHeartbeat", ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse),
    _api("ConsumerGroupDescribe", ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse),
    _api("GroupReport", GroupReportRequest, GroupReportResponse),  # Cohort's own (private key range)
    _api("GroupOverview", GroupOverviewRequest, GroupOverviewResponse),  # Cohort's own (private key range)
    _api("ReportEndOffsets", ReportEndOffsetsRequest, ReportEndOffsetsResponse),  # Cohort's own
    _api("DescribeEndOffsets", DescribeEndOffsetsRequest, DescribeEndOffsetsResponse),  # Cohort's own
]}

# API keys of Cohort's own APIs: served, never advertised in ApiVersions (Kafka clients must not see them).
PRIVATE_API_KEYS = frozenset(key for key in API_SCHEMAS if key >= 10000)

__all__ = [
    "API_SCHEMAS", "Api",
    "ApiVersionsRequest", "ApiVersionsResponse",
    "FindCoordinatorRequest", "FindCoordinatorResponse",
    "JoinGroupRequest", "JoinGroupResponse",
    "SyncGroupRequest", "SyncGroupResponse",
    "HeartbeatRequest", "HeartbeatResponse",
    "LeaveGroupRequest", "LeaveGroupResponse",
    "OffsetCommitRequest", "OffsetCommitResponse",
    "OffsetFetchRequest", "OffsetFetchResponse",
    "DescribeGroupsRequest", "DescribeGroupsResponse",
    "ListGroupsRequest", "ListGroupsResponse",
    "DeleteGroupsRequest", "DeleteGroupsResponse",
    "OffsetDeleteRequest", "OffsetDeleteResponse",
    "MetadataRequest", "MetadataResponse",
    "CreateTopicsRequest", "CreateTopicsResponse",
    "DeleteTopicsRequest", "DeleteTopicsResponse",
    "CreatePartitionsRequest", "CreatePartitionsResponse",
    "ListOffsetsRequest", "ListOffsetsResponse",
    "FetchRequest", "FetchResponse",
    "SaslHandshakeRequest", "SaslHandshakeResponse",
    "SaslAuthenticateRequest", "SaslAuthenticateResponse",
    "DescribeAclsRequest", "DescribeAclsResponse",
    "CreateAclsRequest", "CreateAclsResponse",
    "DeleteAclsRequest", "DeleteAclsResponse",
    "DescribeUserScramCredentialsRequest", "DescribeUserScramCredentialsResponse",
    "AlterUserScramCredentialsRequest", "AlterUserScramCredentialsResponse",
    "ConsumerGroupHeartbeatRequest", "ConsumerGroupHeartbeatResponse",
    "ConsumerGroupDescribeRequest", "ConsumerGroupDescribeResponse",
    "GroupReportRequest", "GroupReportResponse", "GroupOverviewRequest", "GroupOverviewResponse", "PRIVATE_API_KEYS",
    "ReportEndOffsetsRequest", "ReportEndOffsetsResponse", "DescribeEndOffsetsRequest", "DescribeEndOffsetsResponse",
]
