"""How the server treats connections: pipelining and response order, limits, idle timeout, shutdown."""
from __future__ import annotations

import socket
import threading
import time

import pytest
from bounded_wait import wait_until

from cohort.protocol.framing import decode_response, encode_request
from cohort.protocol.messages import (
    ApiVersionsRequest,
    FetchRequest,
    FindCoordinatorRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)

pytestmark = pytest.mark.timeout(60)


def parked_fetch(max_wait_ms: int) -> FetchRequest:
    """A Fetch the server holds for its max wait (there are never records to return early)."""
    partition = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024)
    return FetchRequest(max_wait_ms=max_wait_ms, min_bytes=1,
                        topics=[FetchRequest.FetchTopic(topic="pipelined", partitions=[partition])])


def commit(group: str, offset: int) -> OffsetCommitRequest:
    partition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=offset, committed_metadata="")
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name="pipelined", partitions=[partition])])


def test_a_request_behind_a_parked_fetch_ends_its_wait_so_its_answer_is_not_held(server_factory, raw_client):
    """Answers leave in request order: a FindCoordinator (a client looking for a group's moved coordinator)
    sent behind a Fetch parked for its max wait would wait out that Fetch; it ends the wait instead."""
    server = server_factory(fetch_max_wait_cap_ms=5000)
    client = raw_client(server.port)
    client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="pipelined")]), 9)
    client.send_bytes(encode_request(parked_fetch(5000), 11, correlation_id=1, client_id="pipe"))
    time.sleep(0.2)  # the Fetch is parked by now
    sent = time.monotonic()
    client.send_bytes(encode_request(FindCoordinatorRequest(key="p"), 3, correlation_id=2, client_id="pipe"))
    fetch = decode_response(FetchRequest.API_KEY, 11, client.receive_frame())
    found = decode_response(FindCoordinatorRequest.API_KEY, 3, client.receive_frame())
    waited = time.monotonic() - sent
    assert [fetch[0], found[0]] == [1, 2] and fetch[1].error_code == 0 and found[1].error_code == 0
    assert fetch[1].responses[0].partitions[0].records in (b"", None)  # answered as at the end of its wait
    assert waited < 2.5, waited  # not the Fetch's 5 s max wait


def test_pipelined_requests_are_answered_in_request_order(server, raw_client):
    client = raw_client(server.port)
    client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="pipelined")]), 9)
    # A slow request first (a parked Fetch), then fast ones of every kind, all sent before reading.
    requests = [(parked_fetch(300), 11), (ApiVersionsRequest(), 2), (commit("p", 5), 8),
                (FindCoordinatorRequest(key="p"), 3), (MetadataRequest(topics=None), 12), (commit("p", 6), 8)]
    frames = b"".join(encode_request(m, v, correlation_id=100 + i, client_id="pipe")
                      for i, (m, v) in enumerate(requests))
    client.send_bytes(frames)
    answers = [decode_response(m.API_KEY, v, client.receive_frame()) for m, v in requests]
    assert [correlation_id for correlation_id, _ in answers] == [100 + i for i in range(len(requests))]
    assert all(getattr(response, "error_code", 0) == 0 for _, response in answers)
    # Both commits were applied, in order.
    fetched = client.request(OffsetFetchRequest(group_id="p", topics=None), 7)
    assert fetched.topics[0].partitions[0].committed_offset == 6


def committed(client, group: str) -> int:
    response = client.request(OffsetFetchRequest(group_id=group, topics=None), 7)
    return response.topics[0].partitions[0].committed_offset if response.topics else -1


def test_a_pipelined_offset_fetch_sees_the_commit_sent_before_it(server, raw_client):
    """Kafka runs one request at a time per connection; clients rely on read-your-writes."""
    client = raw_client(server.port)
    client.request(commit("ryw", 5), 8)
    for offset in range(6, 16):
        client.send_bytes(encode_request(commit("ryw", offset), 8, correlation_id=1, client_id="c")
                          + encode_request(OffsetFetchRequest(group_id="ryw", topics=None), 7, correlation_id=2,
                                           client_id="c"))
        assert decode_response(8, 8, client.receive_frame())[0] == 1
        _, fetched = decode_response(9, 7, client.receive_frame())
        assert fetched.topics[0].partitions[0].committed_offset == offset


def test_a_commit_pipelined_behind_a_parked_fetch_is_not_held_up(server_factory, raw_client):
    """Commits, heartbeats and fetches commute, so they run side by side on one connection; and the
    commit ends the Fetch's wait, whose answer would otherwise hold the commit's back."""
    server = server_factory(fetch_max_wait_cap_ms=10000)
    client, observer = raw_client(server.port), raw_client(server.port)
    client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="pipelined")]), 9)
    sent = time.monotonic()
    client.send_bytes(encode_request(parked_fetch(10000), 11, correlation_id=1, client_id="c")
                      + encode_request(commit("side-by-side", 7), 8, correlation_id=2, client_id="c"))
    wait_until(lambda: committed(observer, "side-by-side") == 7, 8, "the commit (it waited for the parked Fetch?)")
    fetch = decode_response(FetchRequest.API_KEY, 11, client.receive_frame())
    answer = decode_response(OffsetCommitRequest.API_KEY, 8, client.receive_frame())
    assert (fetch[0], answer[0]) == (1, 2) and answer[1].topics[0].partitions[0].error_code == 0
    assert time.monotonic() - sent < 5, "the commit's answer waited out the Fetch's 10 s"


def test_connections_beyond_max_connections_are_refused(server_factory, raw_client):
    server = server_factory(max_connections=2)
    first, second = raw_client(server.port), raw_client(server.port)
    assert first.request(ApiVersionsRequest(), 0).error_code == 0
    assert second.request(ApiVersionsRequest(), 0).error_code == 0
    third = raw_client(server.port)
    assert third.is_closed_by_server()
    second.close()
    deadline = time.monotonic() + 10
    while True:  # the slot frees once the server has seen the close
        fourth = raw_client(server.port)
        try:
            assert fourth.request(ApiVersionsRequest(), 0).error_code == 0
            break
        except (ConnectionError, OSError):
            assert time.monotonic() < deadline, "closed connection never freed its slot"
            time.sleep(0.05)
    assert first.request(ApiVersionsRequest(), 0).error_code == 0


def test_idle_connections_are_closed(server_factory, raw_client):
    server = server_factory(connections_max_idle_ms=200)
    idle = raw_client(server.port)
    assert idle.request(ApiVersionsRequest(), 0).error_code == 0
    assert idle.is_closed_by_server(timeout=5)


def test_requests_queued_beyond_the_limit_wait_but_are_all_answered(server_factory, raw_client):
    server = server_factory(queued_max_requests_per_connection=2)
    client = raw_client(server.port)
    client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="pipelined")]), 9)
    frames = b"".join(encode_request(parked_fetch(50), 11, correlation_id=i, client_id="q") for i in range(10))
    client.send_bytes(frames)
    assert [decode_response(1, 11, client.receive_frame())[0] for _ in range(10)] == list(range(10))


def test_stop_answers_parked_requests_and_closes(server_factory, raw_client):
    server = server_factory(fetch_max_wait_cap_ms=30000)
    client = raw_client(server.port)
    client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="pipelined")]), 9)
    client.send(parked_fetch(30000), 11)  # would wait 30 s
    wait_until(lambda: server.run(lambda: server.server.handlers.fetch_waits.parked), 10, "the Fetch to park")
    stopper = threading.Thread(target=server.stop)
    stopper.start()
    _, response = client.receive(1, 11)  # answered by the shutdown, not the timeout
    assert response.responses[0].partitions[0].error_code == 0
    stopper.join(20)
    assert not stopper.is_alive()
    assert client.is_closed_by_server()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).recv(1)


def wide_commit(group: str, partitions: int, offset: int) -> OffsetCommitRequest:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        T(name="wide", partitions=[T.OffsetCommitRequestPartition(partition_index=p, committed_offset=offset,
                                                                  committed_metadata="") for p in range(partitions)])])


def test_a_frame_decoded_off_the_loop_is_served_in_order_with_the_requests_behind_it(server, raw_client):
    """A request frame of DECODE_OFF_LOOP_BYTES or more is decoded on a worker thread; the requests sent
    after it on the same connection wait for it, so they are served, and answered, after it."""
    from cohort.coordinator.server.connection import DECODE_OFF_LOOP_BYTES

    client = raw_client(server.port)
    big = wide_commit("wide", 40_000, 7)
    frames = [encode_request(big, 8, correlation_id=1, client_id="wide")]
    assert len(frames[0]) > DECODE_OFF_LOOP_BYTES
    small = [(OffsetFetchRequest(group_id="wide", topics=None), 7), (commit("wide-too", 3), 8),
             (ApiVersionsRequest(), 2)]
    frames += [encode_request(m, v, correlation_id=2 + i, client_id="wide") for i, (m, v) in enumerate(small)]
    client.send_bytes(b"".join(frames))  # all at once: the small ones arrive while the big one decodes
    answers = [decode_response(m.API_KEY, v, client.receive_frame())
               for m, v in [(big, 8)] + small]
    assert [correlation_id for correlation_id, _ in answers] == [1, 2, 3, 4]
    assert all(p.error_code == 0 for t in answers[0][1].topics for p in t.partitions)
    fetched = answers[1][1]  # the fetch sent after the big commit sees all of it
    assert sum(len(t.partitions) for t in fetched.topics) == 40_000
    assert {p.committed_offset for t in fetched.topics for p in t.partitions} == {7}
    assert committed(client, "wide-too") == 3


def test_a_malformed_frame_decoded_off_the_loop_closes_only_its_connection(server, raw_client):
    from cohort.coordinator.server.connection import DECODE_OFF_LOOP_BYTES

    bystander = raw_client(server.port)
    client = raw_client(server.port)
    frame = encode_request(wide_commit("broken", 40_000, 1), 8, correlation_id=1, client_id="broken")
    assert len(frame) > DECODE_OFF_LOOP_BYTES
    client.send_bytes(frame[:-200] + b"\xff" * 200)  # same size prefix, garbage where the last partitions were
    assert client.is_closed_by_server(timeout=10)
    bystander.request(commit("after", 1), 8)
    assert committed(bystander, "after") == 1
