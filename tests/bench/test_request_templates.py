"""Pre-encoded requests: patching the correlation id and sequence slots yields exactly the request
the codec would have encoded; the ZooKeeper setData frames are well formed."""
from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.stats import LatencyRecorder
from bench.wire import SEQUENCE_SENTINEL, RequestTemplate
from bench.workloads.offsets import simple_commit
from bench.zookeeper import ZkCommitTemplate, offset_path
from cohort.protocol.framing import decode_request, encode_request

correlation_ids = st.integers(0, 2**31 - 1)
sequences = st.integers(0, 2**63 - 1)


@settings(max_examples=50, deadline=None)
@given(cid=correlation_ids, seq=sequences, partitions=st.integers(1, 10), version=st.integers(2, 9))
def test_rendered_commit_equals_a_freshly_encoded_one(cid, seq, partitions, version):
    template = RequestTemplate(simple_commit("g", partitions), version)
    assert len(template.sequence_positions) == partitions

    frame = bytes(template.render(cid, seq))

    assert frame == encode_request(simple_commit("g", partitions, seq), version, cid, "cohort-bench")
    header, body = decode_request(frame[4:])
    assert header.correlation_id == cid
    assert [p.committed_offset for t in body.topics for p in t.partitions] == [seq] * partitions


def test_a_template_without_sentinel_has_no_sequence_slots():
    template = RequestTemplate(simple_commit("g", 1, offset=5), 2)
    assert template.sequence_positions == ()
    assert SEQUENCE_SENTINEL not in (5,)


@settings(max_examples=30, deadline=None)
@given(first=st.integers(1, 2**30), seq=st.integers(0, 10**19), partitions=st.integers(1, 10))
def test_zookeeper_commit_is_one_set_data_frame_per_partition(first, seq, partitions):
    frames = bytes(ZkCommitTemplate("grp", partitions).render(first, seq))
    pos = 0
    for p in range(partitions):
        (size,) = struct.unpack_from(">i", frames, pos)
        body = frames[pos + 4:pos + 4 + size]
        xid, op, path_len = struct.unpack_from(">iii", body, 0)
        path = body[12:12 + path_len].decode()
        (data_len,) = struct.unpack_from(">i", body, 12 + path_len)
        data = body[16 + path_len:16 + path_len + data_len]
        (version,) = struct.unpack_from(">i", body, 16 + path_len + data_len)
        assert (xid, op, path, int(data), version) == (first + p, 5, offset_path("grp", "bench", p), seq, -1)
        assert len(body) == 16 + path_len + data_len + 4
        pos += 4 + size
    assert pos == len(frames)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 10**9), min_size=1, max_size=300))
def test_latency_summary_matches_the_sorted_samples(samples):
    rec = LatencyRecorder()
    for s in samples:
        rec.add(s)
    summary = rec.summary()
    data = sorted(samples)
    assert summary["count"] == len(samples)
    assert summary["p50"] == data[int(0.5 * len(data))] / 1e6
    assert summary["max"] == data[-1] / 1e6
    assert summary["cdf"][0][1] == data[0] / 1e6
