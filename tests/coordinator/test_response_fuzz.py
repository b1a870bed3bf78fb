"""Every well-formed request, whatever its values, gets a well-formed answer (or a deliberate close).

Hardening issue, item 9: a Metadata v10 request naming a topic by id made the server build a
response its own encoder refused ("request failed" ERROR, traceback, closed connection). Here every
API and version the server advertises is sent requests with random but valid field values (drawn
from the same declarations the codec is built from), and the server must answer each one with a
response our decoder reads back, or close that connection on purpose — never log a failure.
"""
from __future__ import annotations

import logging
import socket
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from server_harness import RawClient
from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import API_SCHEMAS, ApiVersionsRequest, MetadataRequest


sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "protocol"))  # declared_messages

from declared_messages import message_strategy  # noqa: E402

pytestmark = pytest.mark.timeout(240)

# APIs whose requests may legitimately wait (long polls and rebalance barriers): no answer in time is fine.
MAY_WAIT = {1, 11, 14}


def advertised(port: int) -> list[tuple[int, int]]:
    client = RawClient(port)
    try:
        response = client.request(ApiVersionsRequest(), 0)
    finally:
        client.close()
    return [(k.api_key, v) for k in response.api_keys if k.api_key in API_SCHEMAS and k.api_key != 18
            for v in range(k.min_version, k.max_version + 1)]


def test_metadata_v10_and_v11_naming_a_topic_by_id_is_an_invalid_request(server, raw_client, caplog):
    client = raw_client(server.port)
    topic_id = uuid.uuid4()
    for version in (10, 11):
        with caplog.at_level(logging.WARNING):
            response = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
                topic_id=topic_id, name=None)]), version)
        [topic] = response.topics
        assert (topic.error_code, topic.name, topic.topic_id) == (ErrorCode.INVALID_REQUEST, "", topic_id)
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    response = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
        topic_id=topic_id, name=None)]), 12)
    assert response.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID  # ids are v12's


@settings(max_examples=600, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_random_valid_requests_of_every_api_and_version_are_answered_or_closed_never_failed(server, caplog, data):
    api_key, version = data.draw(st.sampled_from(advertised(server.port)))
    request = data.draw(message_strategy(API_SCHEMAS[api_key].request, version))
    client = RawClient(server.port, timeout=2.0)
    caplog.clear()
    try:
        with caplog.at_level(logging.WARNING):
            sent = client.send(request, version)
            try:
                correlation_id, response = client.receive(api_key, version)
            except socket.timeout:
                assert api_key in MAY_WAIT, f"no answer to {type(request).__name__} v{version}"
            except (ConnectionError, OSError):
                pass  # a deliberate close: allowed, as long as nothing failed (checked below)
            else:
                assert correlation_id == sent
                assert type(response).__name__.endswith("Response")
    finally:
        client.close()
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not failures, f"{type(request).__name__} v{version}: {failures}"
