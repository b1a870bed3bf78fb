"""BrokerConnection over real sockets: negotiation, pipelining, timeouts, reconnects, bad addresses."""
from __future__ import annotations

import asyncio

import pytest

from cohort.client.connection import BrokerConnection, parse_address
from cohort.client.errors import KafkaConnectionError, RequestTimedOut
from client_harness import CohortServe, free_port
from cohort.protocol.framing import (
    SUPPORTED_VERSIONS,
    FrameReader,
    decode_request_header,
    encode_response,
)
from cohort.protocol.messages import ApiVersionsResponse, MetadataRequest

pytestmark = pytest.mark.timeout(60)


class ScriptedBroker:
    """A real TCP listener that answers ApiVersions like an older or newer broker, then stays silent.

    Used only where no real server behaves that way on demand (an old broker,
    a hung broker); everything else is tested against `cohort serve`.
    """

    def __init__(self, api_versions_max: int, advertise: dict[int, tuple[int, int]]) -> None:
        self.api_versions_max = api_versions_max
        self.advertise = advertise
        self.seen_versions: list[int] = []
        self.connections = 0

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader, writer):
        self.connections += 1
        frames = FrameReader()
        try:
            while data := await reader.read(65536):
                for frame in frames.feed(data):
                    header = _header_of(frame)
                    if header.api_key != 18:
                        continue  # a hung broker: never answers anything else
                    self.seen_versions.append(header.api_version)
                    if header.api_version > self.api_versions_max:
                        # Kafka's answer to an ApiVersions version it does not know:
                        # a v0 body with UNSUPPORTED_VERSION and its own range for key 18.
                        fallback = ApiVersionsResponse(
                            error_code=35,
                            api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=self.api_versions_max)],
                        )
                        writer.write(encode_response(header, fallback, version=0))
                        continue
                    response = ApiVersionsResponse(
                        error_code=0,
                        api_keys=[
                            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                            for k, (lo, hi) in self.advertise.items()
                        ],
                    )
                    writer.write(encode_response(header, response))
        except (asyncio.CancelledError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self):
        self.server.close()
        await self.server.wait_closed()


def _header_of(frame):
    return decode_request_header(frame)


async def test_negotiates_the_highest_version_both_sides_support(shared_cohort_server):
    conn = BrokerConnection("127.0.0.1", shared_cohort_server.port)
    try:
        await conn.connect()
        for key, (low, high) in SUPPORTED_VERSIONS.items():
            if conn.supports(key):
                assert low <= conn.version_for(key) <= high
        assert conn.version_for(MetadataRequest.API_KEY) == min(SUPPORTED_VERSIONS[3][1], conn._broker_ranges[3][1])
    finally:
        await conn.close()


async def test_falls_back_when_the_broker_does_not_know_our_api_versions_version():
    broker = ScriptedBroker(api_versions_max=2, advertise={18: (0, 2), 3: (0, 5), 10: (0, 2)})
    port = await broker.start()
    conn = BrokerConnection("127.0.0.1", port)
    try:
        await conn.connect()
        assert broker.seen_versions == [SUPPORTED_VERSIONS[18][1], 2]
        assert conn.version_for(3) == 5  # the broker's max, below ours
        assert conn.version_for(10) == 2
        assert not conn.supports(11)  # JoinGroup not advertised: not usable
    finally:
        await conn.close()
        await broker.stop()


async def test_pipelined_requests_all_get_their_own_answer(shared_cohort_server):
    conn = BrokerConnection("127.0.0.1", shared_cohort_server.port)
    try:
        await conn.connect()
        topics = [f"pipelined-{i}" for i in range(50)]
        requests = [
            conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=t)], allow_auto_topic_creation=False))
            for t in topics
        ]
        responses = await asyncio.gather(*requests)
        assert [r.topics[0].name for r in responses] == topics
    finally:
        await conn.close()


async def test_a_request_without_answer_times_out_and_closes_the_connection():
    broker = ScriptedBroker(api_versions_max=4, advertise={18: (0, 4), 3: (0, 12)})
    port = await broker.start()
    conn = BrokerConnection("127.0.0.1", port, request_timeout_ms=300, reconnect_backoff_ms=10)
    try:
        await conn.connect()
        with pytest.raises(RequestTimedOut, match="no response within 300 ms"):
            await conn.request(MetadataRequest(topics=None))
        assert not conn.connected
        # Used again, it reconnects (a second TCP connection, negotiated again).
        with pytest.raises(RequestTimedOut):
            await conn.request(MetadataRequest(topics=None))
        assert broker.connections == 2
    finally:
        await conn.close()
        await broker.stop()


async def test_unreachable_broker_is_a_clear_retriable_error():
    conn = BrokerConnection("127.0.0.1", free_port(), connect_timeout_ms=2000)
    with pytest.raises(KafkaConnectionError, match=r"cannot connect to 127\.0\.0\.1:\d+") as info:
        await conn.connect()
    assert info.value.retriable


async def test_reconnects_after_the_server_restarts(tmp_path):
    server = CohortServe(tmp_path / "data").start()
    conn = BrokerConnection("127.0.0.1", server.port, reconnect_backoff_ms=20, reconnect_backoff_max_ms=200)
    try:
        await conn.request(MetadataRequest(topics=None))
        server.stop()
        with pytest.raises(KafkaConnectionError):
            await conn.request(MetadataRequest(topics=None))
        server.start()
        response = await conn.request(MetadataRequest(topics=None))
        assert response.brokers[0].port == server.port
    finally:
        await conn.close()
        server.stop()


async def test_closed_connection_refuses_further_requests(shared_cohort_server):
    conn = BrokerConnection("127.0.0.1", shared_cohort_server.port)
    await conn.request(MetadataRequest(topics=None))
    await conn.close()
    with pytest.raises(KafkaConnectionError, match="closed"):
        await conn.request(MetadataRequest(topics=None))


@pytest.mark.parametrize(
    ("text", "expected"),
    [("h:1", ("h", 1)), ("h", ("h", 9092)), ("[::1]:9093", ("::1", 9093)), ("10.0.0.1:65535", ("10.0.0.1", 65535))],
)
def test_parse_address(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["", "h:0", "h:x", "h:70000", ":9092"])
def test_parse_address_refuses_nonsense(text):
    with pytest.raises(ValueError):
        parse_address(text)
