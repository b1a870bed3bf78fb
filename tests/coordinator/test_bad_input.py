"""Bad input over a real socket costs only its own connection; everyone else is served as before."""
from __future__ import annotations

import logging
import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from server_harness import RawClient, size_prefixed
from cohort.protocol.errors import ErrorCode
from cohort.protocol.framing import encode_request
from cohort.protocol.messages import ApiVersionsRequest, HeartbeatRequest, MetadataRequest

pytestmark = pytest.mark.timeout(90)


def header(api_key: int, version: int, correlation_id: int = 1, client_id: bytes = b"bad") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def assert_well_behaved_client_is_served(client: RawClient) -> None:
    """The bystander keeps its connection and gets correct answers."""
    response = client.request(ApiVersionsRequest(), 0)
    assert response.error_code == 0 and response.api_keys
    response = client.request(MetadataRequest(topics=None), 9)
    assert response.brokers[0].node_id == 0


BAD_INPUTS = {
    "garbage bytes": b"\x00\x00\x00\x10" + bytes(range(200, 216)),
    "an http request": b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",  # its 'size' is ~1.2 GB
    "a negative size": struct.pack(">i", -5) + b"abcde",
    "a truncated body": size_prefixed(header(3, 9) + b"\x00\x05"),  # frame complete, body cut short
    "a truncated header": size_prefixed(b"\x00\x03\x00"),
    "an unknown api key": size_prefixed(header(9999, 0) + b"\x00" * 8),
    "produce (not served)": size_prefixed(header(0, 3) + b"\x00" * 16),
    "an unsupported version": size_prefixed(header(12, 99) + b"\x00" * 16),
    "trailing junk after a bad frame": size_prefixed(header(-1, 0)) + b"\xff" * 64,
}


@pytest.mark.parametrize("what", sorted(BAD_INPUTS))
def test_bad_input_closes_only_that_connection(server, raw_client, caplog, what):
    bystander = raw_client(server.port)
    assert_well_behaved_client_is_served(bystander)
    offender = raw_client(server.port)
    with caplog.at_level(logging.INFO, logger="cohort.coordinator.server.connection"):
        offender.send_bytes(BAD_INPUTS[what])
        assert offender.is_closed_by_server(), f"{what}: connection left open"
    closing = [r for r in caplog.records if r.name == "cohort.coordinator.server.connection" and "closing connection" in r.getMessage()]
    assert len(closing) == 1, [r.getMessage() for r in closing]  # logged once, as a warning, not a traceback
    assert closing[0].levelno == logging.WARNING and not closing[0].exc_info
    assert_well_behaved_client_is_served(bystander)
    assert_well_behaved_client_is_served(raw_client(server.port))  # and new connections are accepted


def test_oversized_frame_is_refused_from_its_size_prefix(server_factory, raw_client):
    server = server_factory(socket_request_max_bytes=1024)
    bystander = raw_client(server.port)
    offender = raw_client(server.port)
    # Announce 2 KiB but send only the prefix and a few bytes: the refusal cannot wait for the body.
    offender.send_bytes(struct.pack(">i", 2048) + header(3, 9))
    assert offender.is_closed_by_server()
    assert_well_behaved_client_is_served(bystander)
    # A request just under the limit is still served.
    ok = raw_client(server.port)
    assert ok.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="x" * 200)],
                                      allow_auto_topic_creation=False), 9).topics[0].name == "x" * 200


def test_a_client_that_hangs_up_mid_frame_does_not_disturb_others(server, raw_client):
    bystander = raw_client(server.port)
    frame = encode_request(MetadataRequest(topics=None), 9, 1, "half")
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    sock.sendall(frame[: len(frame) // 2])
    sock.close()
    assert_well_behaved_client_is_served(bystander)


def test_unsupported_api_versions_version_gets_the_fallback_and_keeps_the_connection(server, raw_client):
    client = raw_client(server.port)
    # ApiVersions v9 (unknown to us): read with header v2, answered with a v0 body (KIP-511).
    client.send_bytes(size_prefixed(header(18, 9, correlation_id=77) + b"\x00" + b"\x02a\x021\x00"))
    frame = client.receive_frame()
    correlation_id, error_code, count = struct.unpack_from(">ihi", frame)
    assert (correlation_id, error_code, count) == (77, ErrorCode.UNSUPPORTED_VERSION, 1)
    assert struct.unpack_from(">hhh", frame, 10) == (18, 0, 4)
    assert client.request(ApiVersionsRequest(client_software_name="x", client_software_version="1"), 3).error_code == 0


def test_unsupported_version_of_another_api_closes_the_connection(server, raw_client):
    client = raw_client(server.port)
    client.send(HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), 4)
    assert client.receive(12, 4)[1].error_code == ErrorCode.UNKNOWN_MEMBER_ID  # v4 is fine
    client.send_bytes(size_prefixed(header(12, 5) + b"\x00" * 20))  # v5 is not
    assert client.is_closed_by_server()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.binary(min_size=1, max_size=300), api_key=st.sampled_from([3, 8, 9, 10, 11, 14, 18, 19, 1, 2]),
       version=st.integers(min_value=0, max_value=16))
def test_random_request_bodies_never_break_the_server(server, garbage, api_key, version):
    """Any body after a valid header is answered or closes its connection; the server lives on."""
    bystander = RawClient(server.port)
    offender = RawClient(server.port)
    try:
        offender.send_bytes(size_prefixed(header(api_key, version) + garbage))
        offender.sock.settimeout(2)
        try:
            data = offender.sock.recv(65536)  # an answer, or the close
        except (socket.timeout, ConnectionResetError):
            data = None
        assert data is None or isinstance(data, bytes)
        assert_well_behaved_client_is_served(bystander)
    finally:
        offender.close()
        bystander.close()


def _commit(group: str, topic: str = "t", **request_fields):
    from cohort.protocol.messages import OffsetCommitRequest

    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        T(name=topic, partitions=[T.OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                                 committed_metadata="")])], **request_fields)


def test_a_retention_of_forever_is_committed_not_an_overflow(server, raw_client, caplog):
    """OffsetCommit v2-v4 with retention_time_ms = 2^63-1 (hardening, item 10): commit time + retention
    overflows int64; the expiry is clamped, the commit succeeds, and nothing is logged as an error."""
    from cohort.protocol.messages import OffsetFetchRequest

    client = raw_client(server.port)
    with caplog.at_level(logging.WARNING):
        response = client.request(_commit("forever", retention_time_ms=(1 << 63) - 1), 2)
        assert response.topics[0].partitions[0].error_code == 0
        fetched = client.request(OffsetFetchRequest(group_id="forever", topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]), 1)
    assert fetched.topics[0].partitions[0].committed_offset == 5
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("field", ["group", "topic"])
def test_a_string_longer_than_32767_bytes_in_a_flexible_version_is_a_malformed_request(
        server, raw_client, caplog, field):
    """Kafka's readers refuse compact strings over 32767 bytes: the request is malformed and its
    connection is closed with one warning (no ERROR, no UNKNOWN_SERVER_ERROR); others are unaffected."""
    bystander = raw_client(server.port)
    offender = raw_client(server.port)
    long = "x" * 40_000
    with caplog.at_level(logging.WARNING):
        offender.send(_commit(long) if field == "group" else _commit("g", topic=long), 8)
        assert offender.is_closed_by_server()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("exceeds 32767" in getattr(r, "detail", "") for r in caplog.records)
    assert_well_behaved_client_is_served(bystander)


def test_a_client_that_resets_right_after_a_bad_frame_is_logged_with_its_address(server_factory, caplog):
    """Hardening, item 11: the address came from the socket after the accept, gone once the client reset.
    Repeats from one address are one line per log.aggregation.interval.ms, with their count."""
    server = server_factory(log_aggregation_interval_ms=1000)
    ports = []
    with caplog.at_level(logging.WARNING):
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", server.port))
            ports.append(s.getsockname()[1])
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
            s.sendall(struct.pack(">i", -5) + b"abc")
            s.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            repeated = [r for r in caplog.records if r.getMessage().endswith("(repeated)")]
            closing = [r for r in caplog.records if "negative frame size" in getattr(r, "detail", "")
                       and r not in repeated]
            if repeated and sum(r.count for r in repeated) + len(closing) >= 20:
                break
            time.sleep(0.01)
    assert len(closing) == 1  # not a line per bad frame
    assert closing[0].peer.startswith("127.0.0.1:") and int(closing[0].peer.rpartition(":")[2]) in ports
    assert len(repeated) == 1 and repeated[0].peer_host == "127.0.0.1" and repeated[0].count == 19
    assert repeated[0].first <= repeated[0].last and "negative frame size" in repeated[0].detail
