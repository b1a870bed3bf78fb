"""The build's generated codecs (`cohort.protocol.codegen`) are the declarations' codecs, byte for byte.

Three paths per (message, version) of the hot APIs: the generated module as the process runs it
(compiled where the build compiled it), its `.py` run beside it (the pure path), and the codec the
schema generates from the declaration at import time (what runs without the build step). Requests
are decoded by all three to the same values and the same failures; responses are encoded by all
three to the same bytes.
"""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from declared_messages import codec_settings, message_strategy
from cohort.protocol import codegen, schema
from cohort.protocol.compiled import is_extension, source_twin
from cohort.protocol.messages import API_SCHEMAS

MODULE = f"cohort.protocol.{codegen.MODULE}"
HOT = [api for api in API_SCHEMAS.values() if api.name in codegen.HOT_APIS]
VERSIONS = [(api.key, version) for api in HOT for version in range(api.min_version, api.max_version + 1)]


def _generated():
    try:
        return importlib.import_module(MODULE)
    except ImportError:
        pytest.skip("no generated codec module here (built without the build step): the import-time codecs run")


@pytest.fixture(scope="module")
def paths():
    """(generated as the process runs it, its `.py` run beside it)."""
    generated = _generated()
    return generated, source_twin(MODULE) if is_extension(generated.__file__) else generated


def _declaration_codec(message: type, version: int) -> schema._Compiled:
    """The codec generated from the declaration now, as the schema does without the build's module."""
    return schema.compile_struct(message.SCHEMA.struct, version, version in message.SCHEMA.flexible, {})


def _failure(decode, data: bytes):
    try:
        obj, end = decode(data, 0, len(data))
    except schema.DecodeFailure as exc:
        return "failure", exc.reason, exc.pos
    return obj, end


def test_every_hot_api_version_is_generated_in_the_servers_direction():
    codecs = _generated().CODECS
    for key, version in VERSIONS:
        api = API_SCHEMAS[key]
        assert codecs[(api.request.SCHEMA.name, version)][0] is not None, (api.name, version)
        assert codecs[(api.response.SCHEMA.name, version)][1] is not None, (api.name, version)


def test_the_schema_serves_the_generated_codecs():
    generated = _generated()
    for key, version in VERSIONS:
        api = API_SCHEMAS[key]
        request, response = api.request.SCHEMA, api.response.SCHEMA
        assert request.codec(version).decode is generated.CODECS[(request.name, version)][0]
        assert response.codec(version).encode is generated.CODECS[(response.name, version)][1]


def test_the_generated_module_is_made_from_these_declarations():
    """The build artifact matches what the generator makes from the declarations now."""
    generated = _generated()
    assert generated.FINGERPRINT == codegen.declarations_fingerprint()
    source = Path(generated.__file__).with_name(codegen.MODULE + ".py")
    assert source.read_text() == codegen.module_sources()[0]


@pytest.mark.parametrize("key, version", VERSIONS)
@codec_settings(25)
@given(data=st.data())
def test_requests_decode_to_the_same_values_on_every_path(paths, key, version, data):
    generated, pure = paths
    message = API_SCHEMAS[key].request
    decode = generated.CODECS[(message.SCHEMA.name, version)][0]
    pure_decode = pure.CODECS[(message.SCHEMA.name, version)][0]
    declared = _declaration_codec(message, version).decode
    msg = data.draw(message_strategy(message, version))
    encoded = bytes(_declaration_codec(message, version).encode(msg, bytearray()))
    assert decode(encoded, 0, len(encoded)) == pure_decode(encoded, 0, len(encoded)) == \
        declared(encoded, 0, len(encoded)) == (msg, len(encoded))
    # every truncation and one corrupted byte: the same value or the same failure at the same byte
    cut = data.draw(st.integers(0, len(encoded)))
    flip = data.draw(st.integers(0, max(len(encoded) - 1, 0)))
    corrupted = bytearray(encoded)
    if corrupted:
        corrupted[flip] ^= data.draw(st.integers(1, 255))
    for broken in (encoded[:cut], bytes(corrupted)):
        assert _failure(decode, broken) == _failure(pure_decode, broken) == _failure(declared, broken)


@pytest.mark.parametrize("key, version", VERSIONS)
@codec_settings(25)
@given(data=st.data())
def test_responses_encode_to_the_same_bytes_on_every_path(paths, key, version, data):
    generated, pure = paths
    message = API_SCHEMAS[key].response
    encode = generated.CODECS[(message.SCHEMA.name, version)][1]
    pure_encode = pure.CODECS[(message.SCHEMA.name, version)][1]
    msg = data.draw(message_strategy(message, version))
    expected = _declaration_codec(message, version).encode(msg, bytearray(b"head"))
    assert encode(msg, bytearray(b"head")) == pure_encode(msg, bytearray(b"head")) == expected
    assert message.decode(bytes(expected[4:]), version) == msg


def test_a_module_built_from_other_declarations_is_not_used():
    """Declarations edited after the build: the import-time codecs run, and a warning says why."""
    _generated()
    code = (f"import logging; logging.basicConfig(); import {MODULE} as g; g.FINGERPRINT = 'other'; "
            "from cohort.protocol.messages import HeartbeatRequest as H; "
            "print(H.SCHEMA.codec(4).decode is g.CODECS[('HeartbeatRequest', 4)][0]); "
            "print(H.decode(H(group_id='g', member_id='m').encode(4), 4).group_id)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["False", "g"]
    assert "built from other declarations" in done.stderr
