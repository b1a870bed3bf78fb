"""Every API Cohort serves, allowed and denied, through a real server with the ACL authorizer.

Requests come over the PLAINTEXT listener, so their principal is User:ANONYMOUS; each case grants
exactly the ACLs Kafka requires for the API (allowed) or all of them but one (denied) and checks
the answer: denied gives Kafka's error code at Kafka's place (GROUP_ / TOPIC_ /
CLUSTER_AUTHORIZATION_FAILED, or a listing that leaves the resource out); allowed never gives an
authorization error.
"""
from __future__ import annotations

import pytest

from cohort.coordinator.security.authorizer import (
    AclBinding, AclOperation as Op, AclPermissionType as Perm, PatternType, ResourceType as Res,
)
from cohort.protocol.messages import (
    AlterUserScramCredentialsRequest, CreateAclsRequest, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteAclsRequest, DeleteGroupsRequest, DeleteTopicsRequest, DescribeAclsRequest, DescribeGroupsRequest,
    DescribeUserScramCredentialsRequest, FetchRequest, FindCoordinatorRequest, HeartbeatRequest, JoinGroupRequest,
    LeaveGroupRequest, ListGroupsRequest, ListOffsetsRequest, MetadataRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, SyncGroupRequest, DescribeEndOffsetsRequest, ReportEndOffsetsRequest,
)

GROUP_DENIED, TOPIC_DENIED, CLUSTER_DENIED = 30, 29, 31
AUTH_ERRORS = {GROUP_DENIED, TOPIC_DENIED, CLUSTER_DENIED}
G, T, C = (Res.GROUP, "g"), (Res.TOPIC, "t"), (Res.CLUSTER, "kafka-cluster")


def grant(resource, op) -> AclBinding:
    return AclBinding(resource[0], resource[1], PatternType.LITERAL, "User:ANONYMOUS", "*", op, Perm.ALLOW)


OC = OffsetCommitRequest.OffsetCommitRequestTopic
OD = OffsetDeleteRequest.OffsetDeleteRequestTopic
LO = ListOffsetsRequest.ListOffsetsTopic
FT = FetchRequest.FetchTopic
OF = OffsetFetchRequest.OffsetFetchRequestGroup
RE = ReportEndOffsetsRequest.ReportedTopic


def report_end(offset: int) -> ReportEndOffsetsRequest:
    return ReportEndOffsetsRequest(topics=[RE(name="t", partitions=[RE.ReportedPartition(partition_index=0,
                                                                                          end_offset=offset)])])


def errors(response, path: str) -> list[int]:
    """Every error code found along a dotted path of lists (e.g. "topics.partitions.error_code")."""
    level = [response]
    for part in path.split("."):
        nxt = []
        for item in level:
            value = getattr(item, part)
            nxt.extend(value if isinstance(value, list) else [value])
        level = nxt
    return level


# (id, request, version, required grants, the grant left out when denied, where the error is, expected code)
CASES = [
    ("JoinGroup", JoinGroupRequest(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                                   protocol_type="consumer",
                                   protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]),
     5, [(G, Op.READ)], (G, Op.READ), "error_code", GROUP_DENIED),
    ("SyncGroup", SyncGroupRequest(group_id="g", generation_id=1, member_id="m", assignments=[]), 3,
     [(G, Op.READ)], (G, Op.READ), "error_code", GROUP_DENIED),
    ("Heartbeat", HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), 3,
     [(G, Op.READ)], (G, Op.READ), "error_code", GROUP_DENIED),
    ("LeaveGroup", LeaveGroupRequest(group_id="g", members=[LeaveGroupRequest.MemberIdentity(member_id="m")]), 3,
     [(G, Op.READ)], (G, Op.READ), "error_code", GROUP_DENIED),
    ("OffsetCommit-group", OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
        OC(name="t", partitions=[OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)])]), 8,
     [(G, Op.READ), (T, Op.READ)], (G, Op.READ), "topics.partitions.error_code", GROUP_DENIED),
    ("OffsetCommit-topic", OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
        OC(name="t", partitions=[OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)])]), 8,
     [(G, Op.READ), (T, Op.READ)], (T, Op.READ), "topics.partitions.error_code", TOPIC_DENIED),
    ("OffsetFetch-group", OffsetFetchRequest(group_id="g", topics=None), 7,
     [(G, Op.DESCRIBE)], (G, Op.DESCRIBE), "error_code", GROUP_DENIED),
    ("OffsetFetch-topic", OffsetFetchRequest(group_id="g", topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]), 7,
     [(G, Op.DESCRIBE), (T, Op.DESCRIBE)], (T, Op.DESCRIBE), "topics.partitions.error_code", TOPIC_DENIED),
    ("OffsetFetch-v8-group", OffsetFetchRequest(groups=[OF(group_id="g", topics=None)]), 8,
     [(G, Op.DESCRIBE)], (G, Op.DESCRIBE), "groups.error_code", GROUP_DENIED),
    ("OffsetFetch-v8-topic", OffsetFetchRequest(groups=[OF(group_id="g", topics=[
        OF.OffsetFetchRequestTopics(name="t", partition_indexes=[0])])]), 8,
     [(G, Op.DESCRIBE), (T, Op.DESCRIBE)], (T, Op.DESCRIBE), "groups.topics.partitions.error_code", TOPIC_DENIED),
    ("DescribeGroups", DescribeGroupsRequest(groups=["g"]), 5,
     [(G, Op.DESCRIBE)], (G, Op.DESCRIBE), "groups.error_code", GROUP_DENIED),
    ("DeleteGroups", DeleteGroupsRequest(groups_names=["g"]), 2,
     [(G, Op.DELETE)], (G, Op.DELETE), "results.error_code", GROUP_DENIED),
    ("OffsetDelete-group", OffsetDeleteRequest(group_id="g", topics=[
        OD(name="t", partitions=[OD.OffsetDeleteRequestPartition(partition_index=0)])]), 0,
     [(G, Op.DELETE), (T, Op.READ)], (G, Op.DELETE), "error_code", GROUP_DENIED),
    ("OffsetDelete-topic", OffsetDeleteRequest(group_id="g", topics=[
        OD(name="t", partitions=[OD.OffsetDeleteRequestPartition(partition_index=0)])]), 0,
     [(G, Op.DELETE), (T, Op.READ)], (T, Op.READ), "topics.partitions.error_code", TOPIC_DENIED),
    ("FindCoordinator-v3", FindCoordinatorRequest(key="g", key_type=0), 3,
     [(G, Op.DESCRIBE)], (G, Op.DESCRIBE), "error_code", GROUP_DENIED),
    ("FindCoordinator-v4", FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]), 4,
     [(G, Op.DESCRIBE)], (G, Op.DESCRIBE), "coordinators.error_code", GROUP_DENIED),
    ("Metadata", MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")],
                                 allow_auto_topic_creation=False), 12,
     [(T, Op.DESCRIBE)], (T, Op.DESCRIBE), "topics.error_code", TOPIC_DENIED),
    ("Metadata-autocreate", MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="new-topic")],
                                            allow_auto_topic_creation=True), 12,
     [((Res.TOPIC, "new-topic"), Op.DESCRIBE), ((Res.TOPIC, "new-topic"), Op.CREATE)],
     ((Res.TOPIC, "new-topic"), Op.CREATE), "topics.error_code", TOPIC_DENIED),
    ("CreateTopics", CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name="u", num_partitions=1, replication_factor=1, assignments=[], configs=[])]), 7,
     [((Res.TOPIC, "u"), Op.CREATE)], ((Res.TOPIC, "u"), Op.CREATE), "topics.error_code", TOPIC_DENIED),
    ("DeleteTopics", DeleteTopicsRequest(topic_names=["t"]), 5,
     [(T, Op.DELETE)], (T, Op.DELETE), "responses.error_code", TOPIC_DENIED),
    ("CreatePartitions", CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
        name="t", count=3, assignments=None)], timeout_ms=1000), 3,
     [(T, Op.ALTER)], (T, Op.ALTER), "results.error_code", TOPIC_DENIED),
    ("ListOffsets", ListOffsetsRequest(replica_id=-1, topics=[LO(name="t", partitions=[
        LO.ListOffsetsPartition(partition_index=0, timestamp=-1)])]), 7,
     [(T, Op.DESCRIBE)], (T, Op.DESCRIBE), "topics.partitions.error_code", TOPIC_DENIED),
    ("Fetch", FetchRequest(max_wait_ms=0, min_bytes=0, topics=[FT(topic="t", partitions=[
        FT.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024)])]), 12,
     [(T, Op.READ)], (T, Op.READ), "responses.partitions.error_code", TOPIC_DENIED),
    # Cohort's own: a source reporting end offsets needs WRITE (like a producer) or ALTER on the topic
    ("ReportEndOffsets-write", report_end(5), 0,
     [(T, Op.WRITE)], (T, Op.WRITE), "topics.partitions.error_code", TOPIC_DENIED),
    ("ReportEndOffsets-alter", report_end(6), 0,
     [(T, Op.ALTER)], (T, Op.ALTER), "topics.partitions.error_code", TOPIC_DENIED),
    ("ReportEndOffsets-read-is-not-enough", report_end(7), 0,
     [(T, Op.READ), (T, Op.WRITE)], (T, Op.WRITE), "topics.partitions.error_code", TOPIC_DENIED),
    ("DescribeEndOffsets", DescribeEndOffsetsRequest(topics=["t"]), 0,
     [(T, Op.DESCRIBE)], (T, Op.DESCRIBE), "topics.error_code", TOPIC_DENIED),
    ("DescribeAcls", DescribeAclsRequest(resource_type_filter=1, pattern_type_filter=1, operation=1,
                                         permission_type=1), 3,
     [(C, Op.DESCRIBE)], (C, Op.DESCRIBE), "error_code", CLUSTER_DENIED),
    ("CreateAcls", CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
        resource_type=3, resource_name="x", principal="User:x", host="*", operation=3, permission_type=3)]), 3,
     [(C, Op.ALTER)], (C, Op.ALTER), "results.error_code", CLUSTER_DENIED),
    ("DeleteAcls", DeleteAclsRequest(filters=[DeleteAclsRequest.DeleteAclsFilter(
        resource_type_filter=3, resource_name_filter="x", pattern_type_filter=1, operation=1, permission_type=1)]), 3,
     [(C, Op.ALTER)], (C, Op.ALTER), "filter_results.error_code", CLUSTER_DENIED),
    ("DescribeUserScramCredentials", DescribeUserScramCredentialsRequest(users=None), 0,
     [(C, Op.DESCRIBE)], (C, Op.DESCRIBE), "error_code", CLUSTER_DENIED),
    ("AlterUserScramCredentials", AlterUserScramCredentialsRequest(deletions=[
        AlterUserScramCredentialsRequest.ScramCredentialDeletion(name="nobody", mechanism=2)], upsertions=[]), 0,
     [(C, Op.ALTER)], (C, Op.ALTER), "results.error_code", CLUSTER_DENIED),
]


@pytest.fixture
def acl_server(server_factory):
    node = server_factory(authorizer_class_name="acl", super_users="User:root")
    # topic t exists (2 partitions), made as the registry does for any creation
    node.call(node.server.topics.create("t", 2))
    return node


def set_acls(node, bindings):
    node.call(node.server.security.add_acls(bindings, "User:test"))


@pytest.mark.parametrize("name, request_, version, required, withheld, where, code", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("allowed", [True, False], ids=["allowed", "denied"])
def test_api_authorization(acl_server, raw_client, name, request_, version, required, withheld, where, code, allowed):
    client = raw_client(acl_server.port)
    if name.startswith("OffsetDelete"):  # the group must exist with an offset for the answer to list partitions
        commit_once(acl_server, client, "g")
    grants = [grant(r, op) for r, op in required if allowed or (r, op) != withheld]
    set_acls(acl_server, grants)
    response = client.request(request_, version)
    found = errors(response, where)
    assert found, f"{name}: no {where} in {response}"
    if allowed:
        assert not set(found) & AUTH_ERRORS, f"{name} allowed but answered {found}"
    else:
        assert code in found, f"{name} denied but answered {found}"


def commit_once(node, client, group: str) -> None:
    """Make `group` exist with a committed offset on t-0, through ACLs granted for that and removed after."""
    temporary = [grant((Res.GROUP, group), Op.READ), grant(T, Op.READ)]
    set_acls(node, temporary)
    response = client.request(OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        OC(name="t", partitions=[OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]), 8)
    assert response.topics[0].partitions[0].error_code == 0
    node.call(node.server.security.remove_acls(temporary, "User:test"))


def test_list_groups_shows_only_groups_the_principal_may_describe(acl_server, raw_client):
    client = raw_client(acl_server.port)
    for group in ("g", "h"):
        commit_once(acl_server, client, group)
    set_acls(acl_server, [grant(G, Op.DESCRIBE)])
    listed = client.request(ListGroupsRequest(), 4)
    assert [g.group_id for g in listed.groups] == ["g"]
    set_acls(acl_server, [grant(C, Op.DESCRIBE)])  # CLUSTER DESCRIBE lists every group
    assert sorted(g.group_id for g in client.request(ListGroupsRequest(), 4).groups) == ["g", "h"]


def test_metadata_of_all_topics_leaves_out_what_the_principal_may_not_describe(acl_server, raw_client):
    acl_server.call(acl_server.server.topics.create("secret", 1))
    set_acls(acl_server, [grant(T, Op.READ)])  # READ implies DESCRIBE
    response = raw_client(acl_server.port).request(MetadataRequest(topics=None, include_topic_authorized_operations=True), 12)
    assert [t.name for t in response.topics] == ["t"]
    assert response.topics[0].topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)


def test_describe_groups_reports_real_authorized_operations(acl_server, raw_client):
    set_acls(acl_server, [grant(G, Op.DESCRIBE), grant(G, Op.DELETE)])
    response = raw_client(acl_server.port).request(
        DescribeGroupsRequest(groups=["g"], include_authorized_operations=True), 5)
    assert response.groups[0].authorized_operations == (1 << Op.DESCRIBE) | (1 << Op.DELETE)


def test_a_deny_acl_wins_over_an_allow_for_a_real_request(acl_server, raw_client):
    set_acls(acl_server, [grant(G, Op.READ), AclBinding(Res.GROUP, "g", PatternType.LITERAL, "User:*", "*", Op.READ,
                                                        Perm.DENY)])
    response = raw_client(acl_server.port).request(HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), 3)
    assert response.error_code == GROUP_DENIED


def test_a_host_filter_applies_to_the_client_address(acl_server, raw_client):
    set_acls(acl_server, [AclBinding(Res.GROUP, "g", PatternType.LITERAL, "User:ANONYMOUS", "10.9.9.9", Op.READ,
                                     Perm.ALLOW)])
    response = raw_client(acl_server.port).request(HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), 3)
    assert response.error_code == GROUP_DENIED  # the client is 127.0.0.1, not 10.9.9.9
    set_acls(acl_server, [AclBinding(Res.GROUP, "g", PatternType.LITERAL, "User:ANONYMOUS", "127.0.0.1", Op.READ,
                                     Perm.ALLOW)])
    response = raw_client(acl_server.port).request(HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), 3)
    assert response.error_code != GROUP_DENIED


def test_a_commit_to_allowed_and_denied_topics_commits_the_allowed_ones(acl_server, raw_client):
    acl_server.call(acl_server.server.topics.create("u", 1))
    set_acls(acl_server, [grant(G, Op.READ), grant(T, Op.READ)])  # t yes, u no
    client = raw_client(acl_server.port)
    part = OC.OffsetCommitRequestPartition
    response = client.request(OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, member_id="",
                                                   topics=[OC(name="t", partitions=[part(partition_index=0,
                                                                                         committed_offset=7)]),
                                                           OC(name="u", partitions=[part(partition_index=0,
                                                                                         committed_offset=7)])]), 8)
    assert {t.name: t.partitions[0].error_code for t in response.topics} == {"t": 0, "u": TOPIC_DENIED}
    set_acls(acl_server, [grant(G, Op.DESCRIBE)])
    fetched = client.request(OffsetFetchRequest(group_id="g", topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0]),
        OffsetFetchRequest.OffsetFetchRequestTopic(name="u", partition_indexes=[0])]), 7)
    assert {t.name: (t.partitions[0].committed_offset, t.partitions[0].error_code) for t in fetched.topics} == {
        "t": (7, 0), "u": (-1, TOPIC_DENIED)}


def test_metadata_for_allowed_and_denied_topics_answers_each(acl_server, raw_client):
    acl_server.call(acl_server.server.topics.create("u", 1))
    set_acls(acl_server, [grant(T, Op.DESCRIBE)])
    response = raw_client(acl_server.port).request(MetadataRequest(topics=[
        MetadataRequest.MetadataRequestTopic(name="t"), MetadataRequest.MetadataRequestTopic(name="u")],
        allow_auto_topic_creation=False), 12)
    assert {t.name: (t.error_code, len(t.partitions)) for t in response.topics} == {
        "t": (0, 2), "u": (TOPIC_DENIED, 0)}


def test_offset_fetch_of_all_topics_leaves_out_topics_the_principal_may_not_describe(acl_server, raw_client):
    acl_server.call(acl_server.server.topics.create("u", 1))
    client = raw_client(acl_server.port)
    set_acls(acl_server, [grant(G, Op.READ), grant(T, Op.READ), grant((Res.TOPIC, "u"), Op.READ)])
    part = OC.OffsetCommitRequestPartition
    client.request(OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
        OC(name=name, partitions=[part(partition_index=0, committed_offset=3)]) for name in ("t", "u")]), 8)
    acl_server.call(acl_server.server.security.remove_acls([grant((Res.TOPIC, "u"), Op.READ)], "User:test"))
    for version in (7, 8):
        request = OffsetFetchRequest(group_id="g", topics=None) if version < 8 else \
            OffsetFetchRequest(groups=[OF(group_id="g", topics=None)])
        response = client.request(request, version)
        topics = response.topics if version < 8 else response.groups[0].topics
        assert [t.name for t in topics] == ["t"], version
