"""The compiled and the pure-Python codecs give the same bytes and read them back to the same values.

Each example runs through the process's compiled module and through its `.py` twin loaded beside it
(tests/compiled_twins.py): request and response frames of every API and version, the frame reader
over any split of a byte stream, the log's record batches and journal entries.
"""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from compiled_twins import compiled_and_pure
from declared_messages import codec_settings, message_strategy
from cohort.protocol.messages import API_SCHEMAS

VERSIONS = [(key, version) for key, api in sorted(API_SCHEMAS.items())
            for version in range(api.min_version, api.max_version + 1)]


@pytest.fixture(scope="module")
def framing():
    return compiled_and_pure("cohort.protocol.framing")


@pytest.mark.parametrize("key, version", VERSIONS)
@codec_settings(15)
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1),
       client_id=st.one_of(st.none(), st.text(max_size=8)))
def test_request_frames_are_the_same_bytes_and_values_on_both_paths(framing, key, version, correlation_id,
                                                                      client_id, data):
    compiled, pure = framing
    msg = data.draw(message_strategy(API_SCHEMAS[key].request, version))
    frame = compiled.encode_request(msg, version, correlation_id, client_id)
    assert frame == pure.encode_request(msg, version, correlation_id, client_id)
    header, body = compiled.decode_request(frame[4:])
    pure_header, pure_body = pure.decode_request(frame[4:])
    assert body == pure_body == msg
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == \
        (pure_header.api_key, pure_header.api_version, pure_header.correlation_id, pure_header.client_id)


@pytest.mark.parametrize("key, version", VERSIONS)
@codec_settings(15)
@given(data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_response_frames_are_the_same_bytes_and_values_on_both_paths(framing, key, version, correlation_id, data):
    compiled, pure = framing
    msg = data.draw(message_strategy(API_SCHEMAS[key].response, version))
    frame = compiled.encode_response(compiled.RequestHeader(key, version, correlation_id, "c"), msg)
    assert frame == pure.encode_response(pure.RequestHeader(key, version, correlation_id, "c"), msg)
    assert compiled.decode_response(key, version, frame[4:]) == pure.decode_response(key, version, frame[4:])


@codec_settings(100)
@given(frames=st.lists(st.binary(max_size=40), max_size=6), cuts=st.lists(st.integers(0, 300), max_size=8),
       limit=st.integers(0, 48))
def test_the_frame_reader_cuts_any_stream_the_same_on_both_paths(framing, frames, cuts, limit):
    compiled, pure = framing
    stream = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    outcomes = []
    for module in (compiled, pure):
        reader, got = module.FrameReader(max_frame_bytes=limit), []
        try:
            for start, end in zip(bounds, bounds[1:]):
                got.extend(reader.feed(stream[start:end]))
            got.append(("buffered", reader.buffered))
        except module.FrameTooLarge as exc:
            got.append(("too large", str(exc)))
        outcomes.append(got)
    assert outcomes[0] == outcomes[1]


@codec_settings(200)
@given(base=st.integers(0, 2**62), timestamp=st.integers(0, 2**62),
       records=st.lists(st.tuples(st.binary(max_size=20), st.one_of(st.none(), st.binary(max_size=30))),
                        min_size=1, max_size=8),
       sparse=st.booleans())
def test_record_batches_and_journal_entries_are_the_same_bytes_on_both_paths(base, timestamp, records, sparse):
    batch, pure_batch = compiled_and_pure("cohort.coordinator.log.batch")
    journal, pure_journal = compiled_and_pure("cohort.coordinator.log.journal")
    keys = [k for k, _ in records]
    values = [v for _, v in records]
    deltas = [2 * i for i in range(len(records))] if sparse else None
    encoded = batch.encode_batch(base, timestamp, keys, values, deltas)
    assert encoded == pure_batch.encode_batch(base, timestamp, keys, values, deltas)
    read = [[(v.base_offset, v.last_offset, v.keys_values(encoded), list(v.offsets(encoded)))
             for v in module.iter_batches(encoded)] for module in (batch, pure_batch)]
    assert read[0] == read[1] == [(base, base + (deltas or [len(keys) - 1])[-1], (keys, values),
                                   [base + d for d in (deltas or range(len(keys)))])]
    assert journal.encode_entry(7, encoded) == pure_journal.encode_entry(7, encoded)
