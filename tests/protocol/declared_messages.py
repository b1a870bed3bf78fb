"""Test helpers derived from our declarations: hypothesis strategies for valid
messages, and a bridge to kafka-python 3's classes of the same messages.

Everything here walks `Cls.SCHEMA.struct`, so a new field in a declaration is
generated, converted and compared without touching the tests.
"""
from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, settings, strategies as st

from cohort.protocol.messages import API_SCHEMAS, PRIVATE_API_KEYS
from cohort.protocol.schema import (
    Array, Struct, INT8, INT16, INT32, INT64, UINT16, FLOAT64, BOOL, STRING, BYTES, RECORDS, UUID, ZERO_UUID,
)

_INT_RANGES = {INT8: 8, INT16: 16, INT32: 32, INT64: 64}


def codec_settings(max_examples: int = 100) -> settings:
    """Hypothesis settings for the codec suite: reproducible (derandomized, so CI
    never flakes) and bounded. Applied per test, so other suites keep their own."""
    return settings(max_examples=max_examples, derandomize=True, deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def on_wire(field, version: int, flexible: bool) -> bool:
    """Whether `field` exists in `version` (tagged fields exist only in flexible versions)."""
    return version in field.versions and (field.tag is None or flexible)


def _value_strategy(t: Any, nullable: bool, version: int, flexible: bool) -> st.SearchStrategy:
    if t in _INT_RANGES:
        bits = _INT_RANGES[t]
        s = st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    elif t is UINT16:
        s = st.integers(0, 0xFFFF)
    elif t is FLOAT64:
        s = st.floats(allow_nan=False)
    elif t is BOOL:
        s = st.booleans()
    elif t is STRING:
        s = st.text(max_size=6)  # any code point but lone surrogates: valid UTF-8 on the wire
    elif t is BYTES or t is RECORDS:
        s = st.binary(max_size=8)
        nullable = nullable or t is RECORDS
    elif t is UUID:
        s = st.one_of(st.just(ZERO_UUID), st.uuids())
    elif isinstance(t, Array):
        s = st.lists(_value_strategy(t.element, False, version, flexible), max_size=3)
    elif isinstance(t, Struct):
        s = struct_strategy(t, version, flexible)
    else:
        raise TypeError(t)
    return st.one_of(st.none(), s) if nullable else s


def _default_strategy(field) -> st.SearchStrategy:
    if isinstance(field.type, Struct) and field.default is None:
        return st.builds(field.type.cls)
    if isinstance(field.type, Array) and field.default is not None:
        return st.builds(list)
    return st.just(field.default)


def struct_strategy(struct_: Struct, version: int, flexible: bool) -> st.SearchStrategy:
    """Valid instances of `struct_` at `version`: every on-wire field is either its
    default or any value its type and nullability allow (so tagged fields are
    exercised both omitted and written)."""
    fields = {}
    for f in struct_.fields:
        if on_wire(f, version, flexible):
            fields[f.name] = st.one_of(_default_strategy(f),
                                       _value_strategy(f.type, version in f.nullable, version, flexible))
    return st.fixed_dictionaries(fields).map(lambda kw: struct_.cls(**kw))


_STRATEGIES: dict[tuple[type, int], st.SearchStrategy] = {}


def message_strategy(cls: type, version: int) -> st.SearchStrategy:
    key = (cls, version)
    if key not in _STRATEGIES:
        schema = cls.SCHEMA
        _STRATEGIES[key] = struct_strategy(schema.struct, version, version in schema.flexible)
    return _STRATEGIES[key]


# ---------------------------------------------------------------- kafka-python bridge


def kafka_python_classes() -> dict[int, tuple[type, type]]:
    """API key -> (request class, response class) from kafka-python 3 (Kafka's APIs: not Cohort's own)."""
    from kafka.protocol import sasl
    from kafka.protocol.admin import acl, groups, topics, users
    from kafka.protocol.consumer import fetch, group, offsets
    from kafka.protocol.metadata import api_versions, find_coordinator, metadata

    by_name = {}
    for module in (groups, topics, fetch, group, offsets, api_versions, find_coordinator, metadata, sasl, acl,
                   users):
        for name in dir(module):
            by_name[name] = getattr(module, name)
    return {key: (by_name[api.request.__name__], by_name[api.response.__name__])
            for key, api in API_SCHEMAS.items() if key not in PRIVATE_API_KEYS}


# kafka-python patches a few of Kafka's JSON definitions (its `json_patch` hooks);
# we declare Kafka's JSON as it is, and the bridge translates.
# * authorized-operations int32 fields become "bitfield" sets (INT32 min <-> None),
#   and Metadata's two of them are renamed to `authorized_operations`;
KP_RENAMES = {
    ("MetadataResponse", "cluster_authorized_operations"): "authorized_operations",
    ("MetadataResponseTopic", "topic_authorized_operations"): "authorized_operations",
}
KP_BITFIELDS = {
    ("MetadataResponse", "cluster_authorized_operations"),
    ("MetadataResponseTopic", "topic_authorized_operations"),
    ("DescribedGroup", "authorized_operations"),
}
# * and three defaults differ from Kafka's (no effect on the wire: defaults
#   only fill fields a caller leaves out).
KP_PATCHED_DEFAULTS = {
    ("PartitionData", "records"),  # kafka-python reads `records` as bytes (b""); Kafka's default is null
    ("CreatePartitionsTopic", "assignments"),  # kafka-python: null; Kafka: empty
    ("ListOffsetsRequest", "replica_id"),  # kafka-python: -1; Kafka: 0
}
_INT32_MIN = -(1 << 31)


def kp_name(struct_name: str, field_name: str) -> str:
    return KP_RENAMES.get((struct_name, field_name), field_name)


def _int_to_bits(value: int):
    if value == _INT32_MIN:
        return None
    raw = value & 0xFFFFFFFF
    return {b for b in range(32) if raw >> b & 1}


def _bits_to_int(bits) -> int:
    if bits is None:
        return _INT32_MIN
    raw = sum(1 << b for b in bits)
    return raw - (1 << 32) if raw & 0x80000000 else raw


def to_kafka_python(obj, struct_: Struct, kp_cls: type, version: int, flexible: bool):
    """The kafka-python object holding the same values as our `obj`."""
    kw = {}
    for f in struct_.fields:
        if on_wire(f, version, flexible):
            value = _to_kp_value(getattr(obj, f.name), f, f.type, kp_cls, version, flexible)
            if (struct_.name, f.name) in KP_BITFIELDS:
                value = _int_to_bits(value)
            kw[kp_name(struct_.name, f.name)] = value
    return kp_cls(**kw)


def _to_kp_value(value, field, t, kp_parent, version, flexible):
    if isinstance(t, Struct):
        if value is None:
            return None
        if field is not None and field.tag is not None and value == t.cls():
            # kafka-python writes a tagged struct whenever it is not None; Kafka (and
            # we) write it only when it differs from the default struct
            return None
        return to_kafka_python(value, t, getattr(kp_parent, t.name), version, flexible)
    if isinstance(t, Array) and value is not None:
        return [_to_kp_value(v, None, t.element, kp_parent, version, flexible) for v in value]
    return value


def from_kafka_python(kp_obj, struct_: Struct, version: int, flexible: bool):
    """Our object holding the values of a (decoded) kafka-python object."""
    kw = {}
    for f in struct_.fields:
        if on_wire(f, version, flexible):
            value = getattr(kp_obj, kp_name(struct_.name, f.name))
            if (struct_.name, f.name) in KP_BITFIELDS:
                value = _bits_to_int(value)
            kw[f.name] = _from_kp_value(value, f, f.type, version, flexible)
    return struct_.cls(**kw)


def _from_kp_value(value, field, t, version, flexible):
    if isinstance(t, Struct):
        if value is None:
            # an absent tagged struct: kafka-python says None, Kafka says "the default struct"
            return t.cls() if field is not None and field.tag is not None else None
        return from_kafka_python(value, t, version, flexible)
    if isinstance(t, Array) and value is not None:
        return [_from_kp_value(v, None, t.element, version, flexible) for v in value]
    if t is UUID and value is None:
        return ZERO_UUID  # kafka-python reads the zero UUID as None
    if t is UUID and not isinstance(value, uuid.UUID):
        return uuid.UUID(str(value))
    return value


def all_versions(cls: type) -> range:
    return range(cls.MIN_VERSION, cls.MAX_VERSION + 1)
