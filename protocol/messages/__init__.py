"""Every Kafka message Cohort speaks, each declared once (see `protocol.schema`).

`API_SCHEMAS` maps an API key to its request and response classes.
"""
from dataclasses import dataclass

from protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse


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
    _api("Heartbeat", HeartbeatRequest, HeartbeatResponse),
    _api("OffsetCommit", OffsetCommitRequest, OffsetCommitResponse),
]}
