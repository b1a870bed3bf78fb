"""The ceiling: a uvloop server that answers OffsetCommit and OffsetFetch with canned responses.

It does what any Kafka-protocol server in Python must do per request — read the socket, cut the
frame, parse the request header, write the answer — and nothing else: no body decoding, no
validation, no storage, no fsync. A request body it has not seen the shape of (api, version,
length) is decoded once to build the answer every later one of that shape gets, with only the
correlation id patched in. Cohort's request path is measured as a fraction of this
(`python -m bench compare --a cohort --b canned --workload commit`).

    python -m bench.canned --listen 127.0.0.1:PORT
"""
from __future__ import annotations

import argparse
import asyncio
import struct

from cohort.protocol.framing import decode_request, decode_request_header, encode_response
from cohort.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from cohort.protocol.framing import SUPPORTED_VERSIONS

_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")
ANSWERED = (ApiVersionsRequest.API_KEY, FindCoordinatorRequest.API_KEY, OffsetCommitRequest.API_KEY,
            OffsetFetchRequest.API_KEY)
NODE_ID = 1


def _answer(request, version: int, address: tuple[str, int]):
    """The full answer to a request of a new shape: success for every partition it names."""
    if isinstance(request, FindCoordinatorRequest):
        host, port = address
        if version >= 4:
            return FindCoordinatorResponse(coordinators=[FindCoordinatorResponse.Coordinator(
                key=k, node_id=NODE_ID, host=host, port=port, error_code=0) for k in request.coordinator_keys])
        return FindCoordinatorResponse(error_code=0, node_id=NODE_ID, host=host, port=port)
    if isinstance(request, ApiVersionsRequest):
        return ApiVersionsResponse(error_code=0, api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=key, min_version=SUPPORTED_VERSIONS[key][0],
                                           max_version=SUPPORTED_VERSIONS[key][1]) for key in ANSWERED])
    if isinstance(request, OffsetCommitRequest):
        topic, partition = OffsetCommitResponse.OffsetCommitResponseTopic, \
            OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition
        return OffsetCommitResponse(topics=[topic(name=t.name, partitions=[
            partition(partition_index=p.partition_index, error_code=0) for p in t.partitions])
            for t in request.topics])
    topic = OffsetFetchResponse.OffsetFetchResponseTopic
    partition = topic.OffsetFetchResponsePartition
    return OffsetFetchResponse(error_code=0, topics=[topic(name=t.name, partitions=[
        partition(partition_index=p, committed_offset=42, metadata="", error_code=0)
        for p in t.partition_indexes]) for t in request.topics or []])


class CannedConnection(asyncio.Protocol):
    """Frames in, canned frames out, in order (pipelined clients see in-order answers)."""

    canned: dict[tuple[int, int, int], bytes] = {}

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        out = []
        pos = 0
        end = len(buffer)
        while end - pos >= 4:
            size = _SIZE.unpack_from(buffer, pos)[0]
            if size < 0 or end - pos - 4 < size:
                break
            frame = bytes(buffer[pos + 4:pos + 4 + size])
            pos += 4 + size
            header = decode_request_header(frame)
            shape = (header.api_key, header.api_version, size)
            answer = self.canned.get(shape)
            if answer is None:
                if header.api_key not in ANSWERED:
                    self.transport.close()
                    return
                _, request = decode_request(frame)
                answer = encode_response(header, _answer(request, header.api_version,
                                                         self.transport.get_extra_info("sockname")[:2]))
                self.canned[shape] = answer
            reply = bytearray(answer)
            _CORRELATION.pack_into(reply, 4, header.correlation_id)
            out.append(reply)
        del buffer[:pos]
        if out:
            self.transport.write(b"".join(out))


async def serve(host: str, port: int) -> None:
    server = await asyncio.get_running_loop().create_server(CannedConnection, host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="HOST:PORT (loopback)")
    args = parser.parse_args()
    host, port = args.listen.rsplit(":", 1)
    import uvloop
    uvloop.run(serve(host, int(port)))


if __name__ == "__main__":
    main()
