"""The compiled modules against their own `.py` source, function by function, in one process.

    python -m bench.compiled_bench --runs 5

For each step of a request that a compiled module does (cut a frame, decode a request, encode a
response, encode a record batch and its journal entry, store and read committed offsets) it times the
compiled module and its pure-Python twin (`compiled.source_twin`) on the same input, alternating,
by this thread's CPU time (a busy machine stretches both alike). A run's figure is nanoseconds per
call; the table shows the median of `--runs` runs. This isolates what compilation buys per call from
the server's syscalls and the load generator (docs/compiled-path.md).
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import time
from collections.abc import Callable

from cohort.protocol.compiled import is_extension, source_twin
from cohort.protocol.messages import (
    HeartbeatRequest, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
)


def _offset_commit() -> OffsetCommitRequest:
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id="bench-group", generation_id_or_member_epoch=7, member_id="m-1",
                               topics=[topic(name="orders", partitions=[topic.OffsetCommitRequestPartition(
                                   partition_index=3, committed_offset=1234567, committed_metadata="")])])


def _offset_fetch() -> OffsetFetchRequest:
    topic = OffsetFetchRequest.OffsetFetchRequestTopic
    return OffsetFetchRequest(group_id="bench-group", topics=[topic(name="orders", partition_indexes=[3])])


def cases(modules: dict[str, object]) -> dict[str, Callable[[], object]]:
    """Step name -> a call of that step on one fixed input, through `modules` (one path's modules)."""
    framing = modules["cohort.protocol.framing"]
    batch = modules["cohort.coordinator.log.batch"]
    journal = modules["cohort.coordinator.log.journal"]
    offsets = modules["cohort.coordinator.groups.offsets.table"]
    commit_frame = framing.encode_request(_offset_commit(), 2, 1, "bench")
    fetch_frame = framing.encode_request(_offset_fetch(), 5, 1, "bench")[4:]
    heartbeat_frame = framing.encode_request(HeartbeatRequest(group_id="bench-group", generation_id=1,
                                                              member_id="m-1"), 3, 1, "bench")[4:]
    header = framing.RequestHeader(8, 2, 1, "bench")
    topic = OffsetCommitResponse.OffsetCommitResponseTopic
    answer = OffsetCommitResponse(topics=[topic(name="orders", partitions=[
        topic.OffsetCommitResponsePartition(partition_index=3, error_code=0)])])
    reader = framing.FrameReader()
    key, value = b"\x00\x01" + b"k" * 28, b"\x00\x03" + b"v" * 38
    encoded = batch.encode_batch(5, 1_700_000_000_000, [key], [value])
    table = offsets.OffsetsTable()
    table.put_fields("bench-group", "orders", 3, 1, -1, "", 0, -1)
    return {
        "frame reader: one OffsetCommit frame": lambda: reader.feed(commit_frame),
        "decode OffsetCommit v2 request": lambda: framing.decode_request(commit_frame[4:]),
        "decode OffsetFetch v5 request": lambda: framing.decode_request(fetch_frame),
        "decode Heartbeat v3 request": lambda: framing.decode_request(heartbeat_frame),
        "encode OffsetCommit v2 response": lambda: framing.encode_response(header, answer),
        "encode a 1-record batch": lambda: batch.encode_batch(5, 1_700_000_000_000, [key], [value]),
        "encode its journal entry": lambda: journal.encode_entry(3, encoded),
        "store a committed offset": lambda: table.put_fields("bench-group", "orders", 3, 2, -1, "", 0, -1),
        "read committed offsets (OffsetFetch)": lambda: table.committed("bench-group", "orders", [3]),
    }


def codec_cases(generated) -> dict[str, Callable[[], object]]:
    """Step name -> a call of one generated codec (the versions the bench's clients send: the newest)
    through `generated`: the build's module, its `.py`, or a stand-in holding the import-time codecs."""
    from bench.codec_bench import _join_group
    from cohort.protocol.messages import (
        ConsumerGroupHeartbeatRequest, HeartbeatResponse, OffsetFetchResponse,
    )
    fetch_topic = OffsetFetchResponse.OffsetFetchResponseGroup.OffsetFetchResponseTopics
    requests = {
        "decode OffsetCommit v9 request": (_offset_commit(), 9),
        "decode OffsetFetch v9 request": (OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id="bench-group", topics=[OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                name="orders", partition_indexes=[3])])]), 9),
        "decode Heartbeat v4 request": (HeartbeatRequest(group_id="bench-group", generation_id=1, member_id="m-1"), 4),
        "decode JoinGroup v9 request (3 protocols)": (_join_group(), 9),
        "decode ConsumerGroupHeartbeat v0 request": (ConsumerGroupHeartbeatRequest(
            group_id="bench-group", member_id="m-1", member_epoch=3), 0),
    }
    commit_topic = OffsetCommitResponse.OffsetCommitResponseTopic
    responses = {
        "encode OffsetCommit v9 response": (OffsetCommitResponse(topics=[commit_topic(name="orders", partitions=[
            commit_topic.OffsetCommitResponsePartition(partition_index=3, error_code=0)])]), 9),
        "encode OffsetFetch v9 response": (OffsetFetchResponse(groups=[OffsetFetchResponse.OffsetFetchResponseGroup(
            group_id="bench-group", topics=[fetch_topic(name="orders", partitions=[
                fetch_topic.OffsetFetchResponsePartitions(partition_index=3, committed_offset=1234567)])])]), 9),
        "encode Heartbeat v4 response": (HeartbeatResponse(), 4),
    }
    calls: dict[str, Callable[[], object]] = {}
    for step, (msg, version) in requests.items():
        data = msg.encode(version)
        decode = generated.CODECS[(type(msg).SCHEMA.name, version)][0]
        calls[step] = lambda decode=decode, data=data: decode(data, 0, len(data))
    for step, (msg, version) in responses.items():
        encode = generated.CODECS[(type(msg).SCHEMA.name, version)][1]
        calls[step] = lambda encode=encode, msg=msg: encode(msg, bytearray(8))
    return calls


class ImportTimeCodecs:
    """The generated module's table, made of the codecs the schema generates at import time (what
    runs without the build's module, and what the code before it ran)."""

    def __init__(self, generated) -> None:
        from cohort.protocol import messages, schema
        classes = {cls.SCHEMA.name: cls for api in messages.API_SCHEMAS.values() for cls in (api.request, api.response)}
        self.CODECS = {}
        for (name, version) in generated.CODECS:
            message = classes[name].SCHEMA
            codec = schema.compile_struct(message.struct, version, version in message.flexible, {})
            self.CODECS[(name, version)] = (codec.decode, codec.encode)


def per_call_ns(call: Callable[[], object], min_time: float) -> float:
    calls, spent = 0, 0.0
    batch = 200
    while spent < min_time:
        start = time.thread_time()
        for _ in range(batch):
            call()
        spent += time.thread_time() - start
        calls += batch
    return spent / calls * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=0.2, help="CPU seconds per step per run")
    args = parser.parse_args()
    names = ("cohort.protocol.framing", "cohort.coordinator.log.batch", "cohort.coordinator.log.journal",
             "cohort.coordinator.groups.offsets.table")
    compiled = {name: importlib.import_module(name) for name in names}
    not_compiled = [name for name, module in compiled.items() if not is_extension(module.__file__)]
    if not_compiled:
        raise SystemExit(f"not compiled here: {', '.join(not_compiled)} (pip install -e . with a C compiler)")
    paths = {"compiled": cases(compiled), "pure": cases({name: source_twin(name) for name in names})}
    figures: dict[str, dict[str, list[float]]] = {step: {"compiled": [], "pure": []} for step in paths["pure"]}
    for run in range(max(args.runs, 3)):
        order = ("compiled", "pure") if run % 2 == 0 else ("pure", "compiled")
        for step in figures:
            for path in order:
                figures[step][path].append(per_call_ns(paths[path][step], args.min_time))
    print(f"| step | compiled (ns) | pure (ns) | pure / compiled |\n|---|---:|---:|---:|")
    for step, runs in figures.items():
        c, p = statistics.median(runs["compiled"]), statistics.median(runs["pure"])
        print(f"| {step} | {c:.0f} | {p:.0f} | {p / c:.2f}× |")
    generated_codecs(args.runs, args.min_time)


def generated_codecs(runs: int, min_time: float) -> None:
    """The build's generated codecs: compiled, their `.py`, and the import-time codecs, alternating."""
    name = "cohort.protocol._generated_codecs"
    try:
        generated = importlib.import_module(name)
    except ImportError:
        raise SystemExit(f"{name} is not built here (pip install -e .)") from None
    if not is_extension(generated.__file__):
        raise SystemExit(f"not compiled here: {name} (pip install -e . with a C compiler)")
    paths = {"compiled": codec_cases(generated), "pure": codec_cases(source_twin(name)),
             "import-time": codec_cases(ImportTimeCodecs(generated))}
    figures = {step: {path: [] for path in paths} for step in paths["compiled"]}
    for run in range(max(runs, 3)):
        order = list(paths) if run % 2 == 0 else list(reversed(paths))
        for step in figures:
            for path in order:
                figures[step][path].append(per_call_ns(paths[path][step], min_time))
    print("\n| generated codec | compiled (ns) | pure `.py` (ns) | import-time (ns) | import-time / compiled "
          "| import-time / pure |\n|---|---:|---:|---:|---:|---:|")
    for step, by_path in figures.items():
        c, p, i = (statistics.median(by_path[path]) for path in ("compiled", "pure", "import-time"))
        print(f"| {step} | {c:.0f} | {p:.0f} | {i:.0f} | {i / c:.2f}× | {i / p:.2f}× |")


if __name__ == "__main__":
    main()
