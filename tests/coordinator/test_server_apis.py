"""The non-group APIs over a real socket: ApiVersions, FindCoordinator, Metadata, the topic
registry (CreateTopics, DeleteTopics, CreatePartitions) and record-less ListOffsets/Fetch."""
from __future__ import annotations

import struct
import uuid

import pytest

from server_harness import size_prefixed

from cohort.protocol.errors import ErrorCode
from cohort.protocol.framing import SUPPORTED_VERSIONS
from cohort.protocol.messages import (
    ApiVersionsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    FetchRequest,
    FindCoordinatorRequest,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
)

pytestmark = pytest.mark.timeout(60)

ZERO_UUID = uuid.UUID(int=0)
NOT_ADVERTISED = {0, 71, 76, 77, 78, 79, 80}  # Produce, GetTelemetrySubscriptions, the share-group APIs (KIP-932)
SERVED = {1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 29, 30, 31, 36, 37, 42, 47, 50, 51, 68, 69}


def create_topic(client, name: str, partitions: int = -1, replication_factor: int = -1, version: int = 7,
                 validate_only: bool = False):
    topic = CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions,
                                               replication_factor=replication_factor)
    response = client.request(CreateTopicsRequest(topics=[topic], validate_only=validate_only), version)
    [result] = response.topics
    return result


def metadata(client, names: list[str] | None, version: int = 12, auto_create: bool = True):
    topics = None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names]
    return client.request(MetadataRequest(topics=topics, allow_auto_topic_creation=auto_create), version)


def simple_commit(client, group: str, topic: str, partition: int, offset: int):
    partition_entry = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=partition, committed_offset=offset, committed_metadata="")
    request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[partition_entry])])
    response = client.request(request, 8)
    assert response.topics[0].partitions[0].error_code == 0


# -- ApiVersions -----------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_advertises_exactly_the_served_apis(server, raw_client, version):
    client = raw_client(server.port)
    request = ApiVersionsRequest(client_software_name="cohort-tests", client_software_version="1.0")
    response = client.request(request, version)
    assert response.error_code == 0
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert set(advertised) == SERVED
    assert not set(advertised) & NOT_ADVERTISED
    assert all(advertised[key] == SUPPORTED_VERSIONS[key] for key in advertised)


def test_api_versions_v3_writes_no_default_tagged_fields(server, raw_client):
    client = raw_client(server.port)
    client.send(ApiVersionsRequest(client_software_name="cohort-tests", client_software_version="1.0"), 3)
    frame = client.receive_frame()
    # The body ends with the top-level tagged-field section: a single 0 (no tags at all).
    assert frame[-1] == 0
    assert frame[-5:-1] == b"\x00\x00\x00\x00"  # throttle_time_ms just before it


@pytest.mark.parametrize("name,version", [("bad name", "1.0"), ("ok", "-1"), ("", "1.0"), ("ok", "")])
def test_api_versions_v3_with_invalid_software_name_gets_invalid_request(server, raw_client, name, version):
    client = raw_client(server.port)
    response = client.request(ApiVersionsRequest(client_software_name=name, client_software_version=version), 3)
    assert response.error_code == ErrorCode.INVALID_REQUEST
    assert response.api_keys == []


# -- FindCoordinator ---------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 4))
def test_find_coordinator_single_key_answers_this_node(server, raw_client, version):
    response = raw_client(server.port).request(FindCoordinatorRequest(key="any-group"), version)
    assert (response.error_code, response.node_id, response.host, response.port) == (0, 0, "127.0.0.1", server.port)
    if version >= 1:
        assert response.error_message == "NONE"  # Kafka writes the error's message, even for NONE


@pytest.mark.parametrize("version", range(4, 7))
def test_find_coordinator_batched_keys_get_one_entry_each(server, raw_client, version):
    response = raw_client(server.port).request(FindCoordinatorRequest(coordinator_keys=["a", "b", "c"]), version)
    assert [(c.key, c.node_id, c.port, c.error_code, c.error_message) for c in response.coordinators] == [
        (k, 0, server.port, 0, "") for k in ["a", "b", "c"]]  # Kafka: an empty message


@pytest.mark.parametrize("key_type,version,expected", [
    (1, 2, ErrorCode.COORDINATOR_NOT_AVAILABLE),   # transactions: no transaction coordinator here
    (1, 4, ErrorCode.COORDINATOR_NOT_AVAILABLE),
    (2, 5, ErrorCode.INVALID_REQUEST),             # share key type only exists from v6
    (2, 6, ErrorCode.INVALID_REQUEST),             # Kafka with share groups disabled (KIP-932 is out of scope)
    (9, 3, ErrorCode.INVALID_REQUEST),
    (9, 6, ErrorCode.INVALID_REQUEST),
])
def test_find_coordinator_other_key_types_get_kafkas_errors(server, raw_client, key_type, version, expected):
    client = raw_client(server.port)
    if version >= 4:
        response = client.request(FindCoordinatorRequest(key_type=key_type, coordinator_keys=["k"]), version)
        [entry] = response.coordinators
        assert (entry.error_code, entry.node_id, entry.host, entry.port) == (expected, -1, "", -1)
        assert entry.error_message
    else:
        response = client.request(FindCoordinatorRequest(key="k", key_type=key_type), version)
        assert (response.error_code, response.node_id, response.port) == (expected, -1, -1)


# -- Metadata and the topic registry --------------------------------------------------------------

def test_metadata_auto_creates_with_num_partitions_and_lists_this_node_everywhere(server_factory, raw_client):
    server = server_factory(num_partitions=3)
    client = raw_client(server.port)
    response = metadata(client, ["auto-created"])
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(0, "127.0.0.1", server.port)]
    assert response.controller_id == 0 and response.cluster_id
    [topic] = response.topics
    assert (topic.error_code, topic.name, topic.is_internal) == (0, "auto-created", False)
    assert topic.topic_id != ZERO_UUID
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes, p.offline_replicas)
            for p in topic.partitions] == [(i, 0, [0], [0], []) for i in range(3)]
    assert metadata(client, ["auto-created"]).topics[0].topic_id == topic.topic_id  # created once


def test_metadata_without_auto_creation_reports_unknown_topics(server_factory, raw_client):
    client = raw_client(server_factory(auto_create_topics_enable=False).port)
    [topic] = metadata(client, ["missing"]).topics
    assert (topic.error_code, topic.partitions) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
    [topic] = metadata(client, ["missing"]).topics  # still not created
    assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_request_may_refuse_auto_creation(server, raw_client):
    client = raw_client(server.port)
    [topic] = metadata(client, ["not-wanted"], version=4, auto_create=False).topics
    assert topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert metadata(client, None).topics == []


@pytest.mark.parametrize("name", ["", ".", "..", "has space", "x" * 250, "ünïcode"])
def test_metadata_for_an_invalid_name_is_invalid_topic(server, raw_client, name):
    [topic] = metadata(raw_client(server.port), [name]).topics
    assert topic.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_metadata_all_topics_forms(server, raw_client):
    client = raw_client(server.port)
    for name in ["a", "b"]:
        assert create_topic(client, name, 2).error_code == 0
    assert sorted(t.name for t in metadata(client, [], version=0).topics) == ["a", "b"]  # v0: empty = all
    assert sorted(t.name for t in metadata(client, None, version=1).topics) == ["a", "b"]  # v1+: null = all
    assert metadata(client, [], version=1).topics == []  # v1+: empty = none


def test_metadata_v12_looks_topics_up_by_id(server, raw_client):
    client = raw_client(server.port)
    created = create_topic(client, "by-id", 2)
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(topic_id=created.topic_id, name=None)])
    [topic] = client.request(request, 12).topics
    assert (topic.error_code, topic.name, len(topic.partitions)) == (0, "by-id", 2)
    unknown = uuid.uuid4()
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(topic_id=unknown, name=None)])
    [topic] = client.request(request, 12).topics
    assert (topic.error_code, topic.topic_id) == (ErrorCode.UNKNOWN_TOPIC_ID, unknown)


def test_cluster_id_and_topics_survive_a_restart(server_factory, raw_client, tmp_path):
    first = server_factory(data_dir=tmp_path / "data")
    client = raw_client(first.port)
    created = create_topic(client, "durable", 4)
    cluster_id = metadata(client, None).cluster_id
    first.stop()
    second = server_factory(data_dir=tmp_path / "data")
    response = metadata(raw_client(second.port), None)
    assert response.cluster_id == cluster_id
    [topic] = response.topics
    assert (topic.name, topic.topic_id, len(topic.partitions)) == ("durable", created.topic_id, 4)


@pytest.mark.parametrize("version", [0, 2, 4, 5, 7])
def test_create_topics_creates_and_refuses_like_kafka(server, raw_client, version):
    client = raw_client(server.port)
    ok = create_topic(client, "t1", 3, 1, version)
    assert ok.error_code == 0
    if version >= 5:
        assert (ok.num_partitions, ok.replication_factor) == (3, 1)
    if version >= 7:
        assert ok.topic_id != ZERO_UUID
    assert create_topic(client, "t1", 3, 1, version).error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert create_topic(client, "t2", 0, 1, version).error_code == ErrorCode.INVALID_PARTITIONS
    assert create_topic(client, "t3", 1, 3, version).error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert create_topic(client, "t4", 1, 0, version).error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert create_topic(client, "bad/name", 1, 1, version).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert create_topic(client, "col.lide", 1, 1, version).error_code == 0
    # '.' and '_' collide in metric names, so Kafka refuses the second of such a pair
    assert create_topic(client, "col_lide", 1, 1, version).error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    refused = create_topic(client, "t5", 0, 1, version)
    if version >= 1:
        assert refused.error_message


def test_create_topics_validate_only_creates_nothing(server, raw_client):
    client = raw_client(server.port)
    checked = create_topic(client, "maybe", 5, -1, validate_only=True)
    assert (checked.error_code, checked.num_partitions) == (0, 5)
    assert metadata(client, None).topics == []
    assert create_topic(client, "maybe", 0, -1, validate_only=True).error_code == ErrorCode.INVALID_PARTITIONS


def test_create_topics_defaults_and_duplicates(server_factory, raw_client):
    client = raw_client(server_factory(num_partitions=4).port)
    assert create_topic(client, "defaulted").num_partitions == 4
    twice = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(name="dup", num_partitions=1,
                                                                          replication_factor=1)] * 2)
    results = client.request(twice, 7).topics
    assert [r.error_code for r in results] == [ErrorCode.INVALID_REQUEST] * 2


def test_delete_topics_by_name_and_by_id(server, raw_client):
    client = raw_client(server.port)
    create_topic(client, "gone-by-name", 1)
    by_id = create_topic(client, "gone-by-id", 1)
    [result] = client.request(DeleteTopicsRequest(topic_names=["gone-by-name"], timeout_ms=1000), 5).responses
    assert (result.name, result.error_code) == ("gone-by-name", 0)
    state = DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=by_id.topic_id)
    [result] = client.request(DeleteTopicsRequest(topics=[state], timeout_ms=1000), 6).responses
    assert (result.name, result.topic_id, result.error_code) == ("gone-by-id", by_id.topic_id, 0)
    assert metadata(client, None).topics == []
    [result] = client.request(DeleteTopicsRequest(topic_names=["gone-by-name"], timeout_ms=1000), 0).responses
    assert result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    state = DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=uuid.uuid4())
    [result] = client.request(DeleteTopicsRequest(topics=[state], timeout_ms=1000), 6).responses
    assert result.error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_create_partitions_only_increases(server, raw_client):
    client = raw_client(server.port)
    create_topic(client, "growing", 2)

    def grow(count: int, name: str = "growing"):
        request = CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
            name=name, count=count, assignments=None)], timeout_ms=1000, validate_only=False)
        [result] = client.request(request, 3).results
        return result.error_code

    assert grow(5) == 0
    assert len(metadata(client, ["growing"]).topics[0].partitions) == 5
    assert grow(5) == ErrorCode.INVALID_PARTITIONS
    assert grow(3) == ErrorCode.INVALID_PARTITIONS
    assert grow(9, "no-such-topic") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- topics without records: ListOffsets and Fetch --------------------------------------------------

def list_offsets(client, topic: str, partition: int, timestamp: int, version: int = 7):
    partition_entry = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=partition, timestamp=timestamp)
    request = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[partition_entry])])
    [topic_entry] = client.request(request, version).topics
    [answer] = topic_entry.partitions
    return answer


def test_list_offsets_answers_for_a_log_without_records(server, raw_client):
    client = raw_client(server.port)
    create_topic(client, "empty-log", 2)
    assert (list_offsets(client, "empty-log", 0, -2).offset, list_offsets(client, "empty-log", 0, -1).offset) == (0, 0)
    # The high watermark is the highest offset any group committed for the partition.
    simple_commit(client, "group-a", "empty-log", 0, 42)
    simple_commit(client, "group-b", "empty-log", 0, 17)
    simple_commit(client, "group-c", "empty-log", 0, -2)  # a sentinel never raises it
    latest = list_offsets(client, "empty-log", 0, -1)
    assert (latest.error_code, latest.offset, latest.timestamp, latest.leader_epoch) == (0, 42, -1, 0)
    assert list_offsets(client, "empty-log", 0, -2).offset == 0
    assert list_offsets(client, "empty-log", 1, -1).offset == 0  # other partitions are untouched
    by_time = list_offsets(client, "empty-log", 0, 1_700_000_000_000)
    assert (by_time.error_code, by_time.offset, by_time.timestamp) == (0, -1, -1)
    assert list_offsets(client, "empty-log", 0, -3).offset == -1  # max timestamp: no record
    assert list_offsets(client, "empty-log", 2, -1).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert list_offsets(client, "no-such", 0, -1).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    v0 = list_offsets(client, "empty-log", 0, -1, version=0)
    assert (v0.error_code, v0.old_style_offsets) == (0, [42])


def fetch(client, topic: str | uuid.UUID, partition: int, offset: int, version: int, max_wait_ms: int = 50,
          session_id: int = 0, session_epoch: int = -1):
    topic_entry = FetchRequest.FetchTopic(partitions=[FetchRequest.FetchTopic.FetchPartition(
        partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)])
    if isinstance(topic, uuid.UUID):
        topic_entry.topic_id = topic
    else:
        topic_entry.topic = topic
    request = FetchRequest(max_wait_ms=max_wait_ms, min_bytes=1, topics=[topic_entry], session_id=session_id,
                           session_epoch=session_epoch)
    return client.request(request, version)


@pytest.mark.parametrize("version", [0, 4, 7, 11, 12])
def test_fetch_returns_no_records_and_the_high_watermark(server, raw_client, version):
    client = raw_client(server.port)
    create_topic(client, "fetched", 1)
    simple_commit(client, "g", "fetched", 0, 42)
    for offset in (0, 42, 1000):  # never OFFSET_OUT_OF_RANGE, even past the high watermark
        response = fetch(client, "fetched", 0, offset, version)
        [answer] = response.responses[0].partitions
        assert (answer.error_code, answer.high_watermark, answer.records or b"") == (0, 42, b"")
        if version >= 5:
            assert answer.log_start_offset == 0
        if version >= 7:
            assert (response.error_code, response.session_id) == (0, 0)
    [answer] = fetch(client, "fetched", 3, 0, version).responses[0].partitions
    assert answer.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("version", [13, 16])
def test_fetch_by_topic_id(server, raw_client, version):
    client = raw_client(server.port)
    created = create_topic(client, "fetched-by-id", 1)
    response = fetch(client, created.topic_id, 0, 0, version)
    [topic] = response.responses
    assert topic.topic_id == created.topic_id and topic.partitions[0].error_code == 0
    [answer] = fetch(client, uuid.uuid4(), 0, 0, version).responses[0].partitions
    assert answer.error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_fetch_sessions_are_declined_like_a_full_session_cache(server, raw_client):
    client = raw_client(server.port)
    create_topic(client, "sessions", 1)
    opened = fetch(client, "sessions", 0, 0, 12, session_id=0, session_epoch=0)  # asks for a session
    assert (opened.error_code, opened.session_id) == (0, 0)  # none given: keep sending full fetches
    incremental = fetch(client, "sessions", 0, 0, 12, session_id=1234, session_epoch=3)
    assert (incremental.error_code, incremental.responses) == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, [])


def test_concurrent_auto_creation_makes_one_topic(server, raw_client):
    clients = [raw_client(server.port) for _ in range(4)]
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="raced")])
    for client in clients:  # all sent before any answer is read
        client.send(request, 12)
    ids = {client.receive(3, 12)[1].topics[0].topic_id for client in clients}
    assert len(ids) == 1 and ZERO_UUID not in ids


def test_a_recreated_topic_starts_from_offset_zero(server, raw_client):
    client = raw_client(server.port)
    create_topic(client, "reborn", 1)
    simple_commit(client, "g", "reborn", 0, 99)
    assert list_offsets(client, "reborn", 0, -1).offset == 99
    client.request(DeleteTopicsRequest(topic_names=["reborn"], timeout_ms=1000), 5)
    create_topic(client, "reborn", 1)
    assert list_offsets(client, "reborn", 0, -1).offset == 0


def test_metadata_reports_authorized_operations_only_when_asked(server, raw_client):
    client = raw_client(server.port)
    create_topic(client, "ops", 1)
    plain = client.request(MetadataRequest(topics=None), 10)
    assert plain.topics[0].topic_authorized_operations == -2147483648
    assert plain.cluster_authorized_operations == -2147483648
    asked = client.request(MetadataRequest(topics=None, include_topic_authorized_operations=True,
                                           include_cluster_authorized_operations=True), 10)
    read, describe = 1 << 3, 1 << 8
    assert asked.topics[0].topic_authorized_operations & (read | describe) == read | describe
    assert asked.cluster_authorized_operations & describe


# What librdkafka 2.16 sends when Produce is not advertised: Fetch v0 fields in the flexible encoding
# (request header v2, compact arrays and strings, tagged fields). Captured from the wire.
LIBRDKAFKA_FETCH_V0_FLEXIBLE = bytes.fromhex(
    "0001000000000004000772646b61666b6100ffffffff000001f40000000102027402"
    "00000000000000000000000000100000000000")


def test_librdkafkas_flexible_fetch_v0_is_answered_in_kind(server, raw_client):
    client = raw_client(server.port)
    create_topic(client, "t", 1)
    simple_commit(client, "g", "t", 0, 5)
    client.send_bytes(size_prefixed(LIBRDKAFKA_FETCH_V0_FLEXIBLE))
    frame = client.receive_frame()
    # response header v1 (correlation id + empty tags), then v0 fields, flexible encoding
    assert frame[:5] == b"\x00\x00\x00\x04\x00"
    topics_count, name_length, name = frame[5], frame[6], frame[7:8]
    assert (topics_count, name_length, name) == (2, 2, b"t")  # compact: N + 1
    partitions_count = frame[8]
    partition, error_code, high_watermark = struct.unpack_from(">ihq", frame, 9)
    assert (partitions_count, partition, error_code, high_watermark) == (2, 0, 0, 5)
    assert frame[23] == 1  # records: compact bytes, empty
    # librdkafka wants >= 25 bytes per topic after the topic count; an unknown tagged field pads it.
    assert len(frame) - 6 >= 25
    assert client.request(ApiVersionsRequest(), 0).error_code == 0  # the connection is still fine


def test_node_id_and_advertised_address_are_what_clients_are_told(server_factory, raw_client):
    server = server_factory(node_id=7, advertised_listeners="broker.example:19092")
    client = raw_client(server.port)
    create_topic(client, "placed", 2)
    response = metadata(client, None)
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(7, "broker.example", 19092)]
    assert response.controller_id == 7
    assert {(p.leader_id, tuple(p.replica_nodes)) for p in response.topics[0].partitions} == {(7, (7,))}
    found = client.request(FindCoordinatorRequest(coordinator_keys=["g"]), 4).coordinators[0]
    assert (found.node_id, found.host, found.port) == (7, "broker.example", 19092)
