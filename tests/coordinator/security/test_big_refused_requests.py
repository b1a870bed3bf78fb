"""Big requests from a principal with no ACLs cost what they ask, and nobody else waits for them.

Over the ACL authorizer, as User:ANONYMOUS with no ACL: a request of an API whose requests are small by
nature (ListOffsets, ReportEndOffsets) past small.request.max.bytes closes its connection before it is
decoded; a refused huge OffsetCommit (an API that may be huge) is refused on a worker thread while a small
request sent after it on another connection is answered first (checked by order, never by time); a
refused ReportEndOffsets answers no more bytes than it was asked with.
"""
from __future__ import annotations

import select
import socket

import pytest

from cohort.protocol.framing import decode_response
from cohort.protocol.messages import (
    ApiVersionsRequest, ListOffsetsRequest, OffsetCommitRequest, ReportEndOffsetsRequest,
)
from cohort.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def node(server_factory):
    return server_factory(authorizer_class_name="acl", small_request_max_bytes=1 << 20)


def closed_by_server(client, timeout: float = 30) -> bool:
    client.sock.settimeout(timeout)
    try:
        return client.sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def list_offsets(partitions: int) -> ListOffsetsRequest:
    T = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest(replica_id=-1, topics=[T(name="t", partitions=[
        T.ListOffsetsPartition(partition_index=p, timestamp=-1) for p in range(partitions)])])


def report_ends(partitions: int) -> ReportEndOffsetsRequest:
    T = ReportEndOffsetsRequest.ReportedTopic
    return ReportEndOffsetsRequest(topics=[T(name="t", partitions=[
        T.ReportedPartition(partition_index=p, end_offset=(1 << 63) - 1) for p in range(partitions)])])


def test_a_small_api_request_over_its_bound_closes_only_its_own_connection(node, raw_client):
    for request, version in ((list_offsets(100_000), 7), (report_ends(150_000), 0)):  # 1.6 and 1.8 MB
        big, other = raw_client(node.port), raw_client(node.port)
        big.send(request, version)
        assert closed_by_server(big), f"{type(request).__name__}: the connection stayed open"
        assert other.request(ApiVersionsRequest(), 0).error_code == 0
    # under the bound, the same API is answered as before (refused per partition: no ACL)
    answer = raw_client(node.port).request(list_offsets(1000), 7)
    assert {p.error_code for t in answer.topics for p in t.partitions} == {ErrorCode.TOPIC_AUTHORIZATION_FAILED}


def test_a_refused_huge_commit_is_answered_in_full_while_others_are_served_first(node, raw_client):
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    huge_commit = OffsetCommitRequest(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
        T(name="t", partitions=[T.OffsetCommitRequestPartition(partition_index=p, committed_offset=1,
                                                               committed_metadata="") for p in range(200_000)])])
    huge, small = raw_client(node.port), raw_client(node.port)
    huge.send(huge_commit, 8)
    small.send(ApiVersionsRequest(), 0)
    ready, _, _ = select.select([huge.sock, small.sock], [], [], 60)
    assert ready == [small.sock], "the refused commit was answered before a small request sent after it"
    _, refused = decode_response(8, 8, huge.receive_frame())
    codes = [p.error_code for t in refused.topics for p in t.partitions]
    assert len(codes) == 200_000 and set(codes) == {ErrorCode.GROUP_AUTHORIZATION_FAILED}


def test_a_refused_report_answers_no_more_than_it_was_asked(node, raw_client):
    client = raw_client(node.port)
    request = report_ends(20_000)
    asked = len(request.encode(0))
    client.send(request, 0)
    frame = client.receive_frame()
    _, answer = decode_response(10001, 0, frame)
    assert {p.error_code for t in answer.topics for p in t.partitions} == {ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert len(frame) <= 1.5 * asked, (len(frame), asked)
