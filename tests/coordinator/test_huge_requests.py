"""A huge request does not hold the server for everyone else (hardening, item 5).

An OffsetFetch of every offset of a group with 1 M partitions held the event loop for 5.4 s and
delayed another client's commit by 3.5 s. Huge fetches and commits are now worked through in
slices, with other connections served in between, and their answers are encoded off the loop.
Checked by order, not by time: a small request sent right after the huge one is answered first.
"""
from __future__ import annotations

import select

import pytest

from bounded_wait import wait_until
from server_harness import RawClient
from cohort.protocol.framing import decode_response
from cohort.protocol.messages import ApiVersionsRequest, OffsetCommitRequest, OffsetFetchRequest

pytestmark = pytest.mark.timeout(180)
PARTITIONS = 200_000


def commit(group: str, first: int, last: int) -> OffsetCommitRequest:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        T(name="t", partitions=[T.OffsetCommitRequestPartition(partition_index=p, committed_offset=p + 1,
                                                               committed_metadata="") for p in range(first, last)])])


def first_answered(huge: RawClient, small: RawClient, timeout: float = 60) -> str:
    ready, _, _ = select.select([huge.sock, small.sock], [], [], timeout)
    assert ready, "nothing answered"
    return "small" if small.sock in ready else "huge"


def test_a_small_request_is_answered_while_an_all_offsets_fetch_of_a_huge_group_runs(server, raw_client):
    setup = raw_client(server.port)
    for first in range(0, PARTITIONS, 50_000):
        assert all(p.error_code == 0 for t in setup.request(commit("huge", first, first + 50_000), 2).topics
                   for p in t.partitions)
    huge, small = raw_client(server.port), raw_client(server.port)

    huge.send(OffsetFetchRequest(group_id="huge", topics=None), 7)
    small.send(ApiVersionsRequest(), 0)

    assert first_answered(huge, small) == "small"
    _, fetched = decode_response(9, 7, huge.receive_frame())
    [topic] = fetched.topics
    assert len(topic.partitions) == PARTITIONS
    assert [(p.partition_index, p.committed_offset) for p in topic.partitions[:3]] == [(0, 1), (1, 2), (2, 3)]
    assert topic.partitions[-1].committed_offset == PARTITIONS


def test_a_small_request_is_answered_while_a_huge_commit_is_built(server, raw_client):
    huge, small = raw_client(server.port), raw_client(server.port)

    huge.send(commit("wide", 0, PARTITIONS), 2)
    # The server must have taken in all of the huge frame first (else the small one simply arrives
    # earlier): the commit creates its group before it builds the 200 000 records.
    wait_until(lambda: server.run(lambda: server.server.groups.group("wide") is not None), 30,
               "the huge commit to be decoded and under way")
    small.send(ApiVersionsRequest(), 0)

    assert first_answered(huge, small) == "small"
    _, committed = decode_response(8, 2, huge.receive_frame())
    assert sum(1 for t in committed.topics for p in t.partitions if p.error_code == 0) == PARTITIONS


def test_a_commit_built_in_slices_answers_every_topic_in_request_order(server, raw_client):
    """Over 5 000 partitions a commit is built a slice at a time: its answer still lists every topic of the
    request in order, an empty one included, each with its partitions in order."""
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    P = T.OffsetCommitRequestPartition
    wide = [P(partition_index=p, committed_offset=p + 7, committed_metadata="") for p in range(12_001)]
    request = OffsetCommitRequest(group_id="sliced", generation_id_or_member_epoch=-1, member_id="", topics=[
        T(name="wide", partitions=wide), T(name="none", partitions=[]),
        T(name="few", partitions=[P(partition_index=p, committed_offset=1, committed_metadata="") for p in (5, 2)])])
    client = raw_client(server.port)

    committed = client.request(request, 2)

    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in committed.topics] == [
        ("wide", [(p, 0) for p in range(12_001)]), ("none", []), ("few", [(5, 0), (2, 0)])]
    fetched = client.request(OffsetFetchRequest(group_id="sliced", topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name="wide", partition_indexes=[0, 12_000])]), 1)
    assert [p.committed_offset for p in fetched.topics[0].partitions] == [7, 12_007]
