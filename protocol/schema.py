"""Declare a Kafka message once; derive a fast encoder and decoder for every version.

A declaration mirrors Kafka's own JSON message definitions: each field has a
type and the versions it exists in, optionally the versions in which it may be
null, a default, and a tag (tagged fields live in the tagged-field section of
flexible versions). Fixed-width primitives are `construct` fields; their
struct formats drive the generated code, so there is one declaration and no
hand-written per-version path.

From a declaration we build, once per (struct, version), Python source for a
decoder and an encoder and compile it. Consecutive fixed-width fields are read
and written with a single `struct` call, which is what makes the codec fast
enough to sit in front of every request.

Decoders take `bytes` and a position and return (object, new position). Any
malformed input raises `ProtocolError` naming the message, version and byte
offset; never IndexError, MemoryError or a hang (lengths and counts are
checked against the bytes actually present before anything is allocated).
"""
from __future__ import annotations

import logging
import struct
import uuid
from dataclasses import dataclass, field as dc_field
from typing import Any, Iterable

import construct as cs

from cohort.protocol.errors import EncodeError, ProtocolError
from cohort.protocol.fingerprint import declarations_fingerprint

# --------------------------------------------------------------------------
# Types

INT8 = cs.Int8sb
INT16 = cs.Int16sb
INT32 = cs.Int32sb
INT64 = cs.Int64sb
UINT16 = cs.Int16ub
FLOAT64 = cs.Float64b
BOOL = cs.Flag


class _Named:
    """A variable-length Kafka type: the compiler knows how to read and write it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


STRING = _Named("string")
BYTES = _Named("bytes")
RECORDS = _Named("records")  # a record set: nullable bytes on the wire
UUID = _Named("uuid")

_FIXED_FORMATS = {INT8: "b", INT16: "h", INT32: "i", INT64: "q", UINT16: "H", FLOAT64: "d", BOOL: "?"}
_FIXED_DEFAULTS = {INT8: 0, INT16: 0, INT32: 0, INT64: 0, UINT16: 0, FLOAT64: 0.0, BOOL: False}
ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; `Versions.parse("3+")`, `"0-2"`, `"5"`, `"none"`."""

    low: int
    high: int  # inclusive; 32767 means "and later"

    @staticmethod
    def parse(text: str | None) -> "Versions":
        if text is None or text == "none":
            return NO_VERSIONS
        if text.endswith("+"):
            return Versions(int(text[:-1]), 32767)
        if "-" in text:
            low, high = text.split("-")
            return Versions(int(low), int(high))
        return Versions(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high


NO_VERSIONS = Versions(1, 0)


@dataclass(slots=True)
class Field:
    name: str
    type: Any  # a fixed construct type, a _Named type, Array or Struct
    versions: Versions
    nullable: Versions
    default: Any
    tag: int | None
    tagged: Versions

    @property
    def default_struct(self) -> bool:
        """A struct field whose default is a fresh default struct (not a nullable one defaulting to null)."""
        return isinstance(self.type, Struct) and self.default is None and self.nullable.low > self.nullable.high


class Array:
    """An array of a primitive type or of a Struct."""

    def __init__(self, element: Any) -> None:
        self.element = element

    def __repr__(self) -> str:
        return f"[]{self.element!r}"


class Struct:
    """A named group of fields: a message body or a nested struct."""

    def __init__(self, name: str, fields: Iterable[Field]) -> None:
        self.name = name
        self.fields = list(fields)
        self.cls: type | None = None

    def __repr__(self) -> str:
        return self.name


def F(name: str, type_: Any, versions: str = "0+", *, nullable: str | None = None,
      default: Any = ..., tag: int | None = None) -> Field:
    """Declare a field. With `tag`, the field is a tagged field in `versions`."""
    vr = Versions.parse(versions)
    if default is ...:
        default = _type_default(type_, Versions.parse(nullable))
    return Field(name, type_, vr, Versions.parse(nullable), default, tag,
                 vr if tag is not None else NO_VERSIONS)


def _type_default(type_: Any, nullable: Versions) -> Any:
    if type_ in _FIXED_DEFAULTS:
        return _FIXED_DEFAULTS[type_]
    if type_ is STRING:
        return ""
    if type_ is BYTES:
        return b""
    if type_ is RECORDS:
        return None
    if type_ is UUID:
        return ZERO_UUID
    if isinstance(type_, Array):
        return []  # copied per instance by the generated __init__
    if isinstance(type_, Struct):
        return None  # built per instance by the generated __init__
    raise TypeError(f"unknown field type {type_!r}")


# --------------------------------------------------------------------------
# Generated message classes


_MISSING = object()


class MessageBase:
    """Common behaviour of every generated message class."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields)
        return f"{type(self).__name__}({inner})"

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dicts and lists, for logs and JSON output."""
        def plain(v: Any) -> Any:
            if isinstance(v, MessageBase):
                return v.to_dict()
            if isinstance(v, list):
                return [plain(x) for x in v]
            return v
        return {n: plain(getattr(self, n)) for n in self._fields}


def _build_class(struct_: Struct, message_name: str) -> type:
    names = [f.name for f in struct_.fields]
    ns: dict[str, Any] = {"_MISSING": _MISSING}
    params = []
    body = []
    for f in struct_.fields:
        if isinstance(f.type, Array) and f.default is not None:
            # a fresh list per instance; an explicit None stays None (nullable arrays)
            params.append(f"{f.name}=_MISSING")
            body.append(f"    self.{f.name} = [] if {f.name} is _MISSING else {f.name}")
        elif f.default_struct:
            ns[f"_st_{f.name}"] = f.type
            params.append(f"{f.name}=_MISSING")
            body.append(f"    self.{f.name} = _st_{f.name}.cls() if {f.name} is _MISSING else {f.name}")
        else:
            ns[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
            body.append(f"    self.{f.name} = {f.name}")
    body.append("    self._unknown_tags = _unknown_tags")
    params.append("_unknown_tags=None")
    src = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body) + "\n"
    exec(compile(src, f"<init {struct_.name}>", "exec"), ns)
    cls = type(struct_.name, (MessageBase,), {
        "__slots__": tuple(names) + ("_unknown_tags",),
        "__init__": ns["__init__"],
        "_fields": tuple(names),
        "__module__": "cohort.protocol.messages",
        "__qualname__": struct_.name,
    })
    struct_.cls = cls
    for f in struct_.fields:
        nested = f.type.element if isinstance(f.type, Array) else f.type
        if isinstance(nested, Struct):
            setattr(cls, nested.name, _build_class(nested, message_name))
    return cls


# --------------------------------------------------------------------------
# Code generation


class DecodeFailure(Exception):
    """Internal: raised by generated decoders with the byte offset and reason."""

    def __init__(self, reason: str, pos: int) -> None:
        self.reason = reason
        self.pos = pos


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Kafka's unsigned varint: 7 bits a byte, least significant first, at most 5 bytes."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    while True:
        pos += 1
        if shift > 28:
            raise DecodeFailure("unsigned varint longer than 5 bytes", pos)
        b = buf[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
        shift += 7


def _write_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    _write_uvarint(out, value)
    return bytes(out)


_H = struct.Struct(">h")
_I = struct.Struct(">i")


class SourceWriter:
    """Emits Python source lines with indentation and unique local names.

    `scope` prefixes the names of constants, so that many generated functions can share one module's
    globals (`cohort.protocol.codegen` writes them all into one module at build time).
    """

    def __init__(self, scope: str = "") -> None:
        self.scope = scope
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {
            "DecodeFailure": DecodeFailure, "read_uvarint": read_uvarint, "_wuv": _write_uvarint,
            "_h": _H.unpack_from, "_i": _I.unpack_from, "_ph": _H.pack, "_pi": _I.pack,
            "_UUID": uuid.UUID, "_struct_error": struct.error,
        }
        self.counter = 0

    def tmp(self, prefix: str = "t") -> str:
        self.counter += 1
        return f"_{prefix}{self.counter}"

    def const(self, value: Any, prefix: str = "c") -> str:
        name = self.scope + self.tmp(prefix)
        self.ns[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)


def _present(f: Field, version: int) -> bool:
    return version in f.versions


def _is_nullable(f: Field, version: int) -> bool:
    return version in f.nullable


def _fixed_format(t: Any) -> str | None:
    return _FIXED_FORMATS.get(t)


class _Compiled:
    __slots__ = ("decode", "encode")

    def __init__(self, decode, encode) -> None:
        self.decode = decode
        self.encode = encode


def compile_struct(struct_: Struct, version: int, flexible: bool, cache: dict) -> _Compiled:
    """Build (or fetch) the decoder and encoder of `struct_` at `version`."""
    key = (id(struct_), version, flexible)
    if key in cache:
        return cache[key]
    compiled = _Compiled(None, None)
    cache[key] = compiled  # recursive structs resolve through the cache
    compiled.decode = _gen_decoder(struct_, version, flexible, cache)
    compiled.encode = _gen_encoder(struct_, version, flexible, cache)
    return compiled


# ---- decoding


def _emit_read_uvarint(g: SourceWriter, ind: int, target: str, minus_one: bool = False) -> None:
    """Inline the one-byte case of an unsigned varint; longer ones call `read_uvarint`."""
    g.emit(ind, f"{target} = buf[pos]")
    g.emit(ind, f"if {target} < 128: pos += 1")
    g.emit(ind, f"else: {target}, pos = read_uvarint(buf, pos)")
    if minus_one:
        g.emit(ind, f"{target} -= 1")


def _emit_write_uvarint(g: SourceWriter, ind: int, expr: str) -> None:
    g.emit(ind, f"_k = {expr}")
    g.emit(ind, "if _k < 128: out.append(_k)")
    g.emit(ind, "else: _wuv(out, _k)")


def gen_read_value(g: SourceWriter, ind: int, t: Any, target: str, nullable: bool, flexible: bool,
                    cache: dict, version: int, label: str, depth: int = 0) -> None:
    """Emit code reading one value of type `t` at `pos` into local `target`."""
    fmt = _fixed_format(t)
    if fmt is not None:
        s = struct.Struct(">" + fmt)
        g.emit(ind, f"{target}, = {g.const(s.unpack_from, 'u')}(buf, pos); pos += {s.size}")
        return
    if t is UUID:
        g.emit(ind, "_e = pos + 16")
        g.emit(ind, "if _e > end: raise DecodeFailure('truncated uuid', pos)")
        g.emit(ind, f"{target} = _UUID(bytes=buf[pos:_e]); pos = _e")
        return
    if t is STRING or t is BYTES or t is RECORDS:
        nullable = nullable or t is RECORDS
        if flexible:
            _emit_read_uvarint(g, ind, "_n", minus_one=True)
            if t is STRING:
                # Kafka's readers refuse a compact string longer than an int16 string could be:
                # the request is malformed (its connection is closed), not a value to answer.
                g.emit(ind, f"if _n > 32767: raise DecodeFailure('length ' + str(_n) + ' of {label} exceeds 32767', pos)")
        elif t is STRING:
            g.emit(ind, "_n, = _h(buf, pos); pos += 2")
        else:
            g.emit(ind, "_n, = _i(buf, pos); pos += 4")
        g.emit(ind, "if _n > 0:")
        g.emit(ind + 1, "_e = pos + _n")
        g.emit(ind + 1, f"if _e > end: raise DecodeFailure('length ' + str(_n) + ' of {label} runs past the end', pos)")
        if t is STRING:
            g.emit(ind + 1, f"{target} = buf[pos:_e].decode('utf-8'); pos = _e")
        else:
            g.emit(ind + 1, f"{target} = buf[pos:_e]; pos = _e")
        # empty (member ids, metadata) is common: no slice to take
        g.emit(ind, "elif _n == 0:")
        g.emit(ind + 1, f"{target} = {repr('' if t is STRING else b'')}")
        g.emit(ind, "else:")
        if nullable:
            g.emit(ind + 1, f"if _n != -1: raise DecodeFailure('invalid length ' + str(_n) + ' for {label}', pos)")
            g.emit(ind + 1, f"{target} = None")
        else:
            g.emit(ind + 1, f"raise DecodeFailure('null or negative length ' + str(_n) + ' for non-nullable {label}', pos)")
        return
    if isinstance(t, Struct):
        if nullable:
            # Nullable structs carry an int8 presence marker (-1 = null).
            g.emit(ind, "_m = buf[pos]; pos += 1")
            g.emit(ind, "if _m == 255:")
            g.emit(ind + 1, f"{target} = None")
            g.emit(ind, "else:")
            _emit_struct_read(g, ind + 1, t, target, version, flexible, cache, depth + 1)
        else:
            _emit_struct_read(g, ind, t, target, version, flexible, cache, depth + 1)
        return
    if isinstance(t, Array):
        if flexible:
            _emit_read_uvarint(g, ind, "_n", minus_one=True)
        else:
            g.emit(ind, "_n, = _i(buf, pos); pos += 4")
        g.emit(ind, "if _n < 0:")
        if nullable:
            g.emit(ind + 1, f"if _n != -1: raise DecodeFailure('invalid count ' + str(_n) + ' for {label}', pos)")
            g.emit(ind + 1, f"{target} = None")
        else:
            g.emit(ind + 1, f"raise DecodeFailure('null or negative count ' + str(_n) + ' for non-nullable {label}', pos)")
        g.emit(ind, "else:")
        el = t.element
        efmt = _fixed_format(el)
        if efmt is not None:
            size = struct.calcsize(">" + efmt)
            g.emit(ind + 1, f"_e = pos + _n * {size}")
            g.emit(ind + 1, f"if _e > end: raise DecodeFailure('count ' + str(_n) + ' of {label} runs past the end', pos)")
            # one element (the usual partition list of one) skips building a format string
            g.emit(ind + 1, f"if _n == 1: {target} = [{g.const(struct.Struct('>' + efmt).unpack_from, 'u')}(buf, pos)[0]]; pos = _e")
            g.emit(ind + 1, f"else: {target} = list(_struct_unpack('>' + str(_n) + '{efmt}', buf, pos)); pos = _e")
            g.ns["_struct_unpack"] = struct.unpack_from
            return
        # every element takes at least one byte: refuse absurd counts before looping
        g.emit(ind + 1, f"if _n > end - pos: raise DecodeFailure('count ' + str(_n) + ' of {label} runs past the end', pos)")
        item = g.tmp("x")
        lst = g.tmp("l")
        g.emit(ind + 1, f"{lst} = []")
        g.emit(ind + 1, "for _ in range(_n):")
        gen_read_value(g, ind + 2, el, item, False, flexible, cache, version, label + "[]", depth)
        g.emit(ind + 2, f"{lst}.append({item})")
        g.emit(ind + 1, f"{target} = {lst}")
        return
    raise TypeError(f"cannot decode type {t!r}")


def _fixed_run(fields: list[Field], i: int, version: int) -> tuple[list[Field], list[Field], int]:
    """The run of fixed-width, untagged fields starting at `i`, read or written with one `struct` call.

    Fields absent in `version` inside the run are skipped (and returned, so a
    decoder can give them their defaults); returns (run, absent, index after the run).
    """
    run: list[Field] = []
    absent: list[Field] = []
    j = i
    while j < len(fields):
        fj = fields[j]
        if _present(fj, version) and fj.tag is None and _fixed_format(fj.type) is not None:
            run.append(fj)
        elif not _present(fj, version) and fj.tag is None and run:
            absent.append(fj)
        else:
            break
        j += 1
    return run, absent, j


def _absent_expr(f: Field, g: SourceWriter) -> str:
    """Source for the value of a field that is not on the wire in this version."""
    if isinstance(f.type, Array):
        return "None" if f.default is None else "[]"
    if isinstance(f.type, Struct):
        if f.default_struct:
            return f"{g.const(f.type.cls, 'cls')}()"
        return "None" if f.default is None else g.const(f.default, "d")
    return g.const(f.default, "d")


# Nested structs are decoded inline, up to this depth (then through their own decoder).
_INLINE_DEPTH = 6


def _emit_struct_read(g: SourceWriter, ind: int, struct_: Struct, target: str, version: int, flexible: bool,
                      cache: dict, depth: int) -> None:
    """Emit code decoding one `struct_` at `pos` into `target`.

    The object is made with `object.__new__` and its slots are assigned as the
    fields are read; nested structs are emitted inline (no call per struct),
    and an empty tagged-field section costs one byte test.
    """
    if depth > _INLINE_DEPTH:
        dec = g.const(compile_struct(struct_, version, flexible, cache).decode, "dec")
        g.emit(ind, f"{target}, pos = {dec}(buf, pos, end)")
        return
    o = target if target.isidentifier() else g.tmp("o")
    g.emit(ind, f"{o} = _new({g.const(struct_.cls, 'cls')})")
    tagged: list[Field] = []
    fields = struct_.fields
    i = 0
    while i < len(fields):
        f = fields[i]
        if not _present(f, version) or f.tag is not None:
            if flexible and version in f.tagged:
                tagged.append(f)
            g.emit(ind, f"{o}.{f.name} = {_absent_expr(f, g)}")
            i += 1
            continue
        # merge a run of fixed-width fields into one struct read
        run, absent, j = _fixed_run(fields, i, version)
        if len(run) > 1:
            for fa in absent:
                g.emit(ind, f"{o}.{fa.name} = {_absent_expr(fa, g)}")
            s = struct.Struct(">" + "".join(_fixed_format(r.type) for r in run))
            names = ", ".join(f"{o}.{r.name}" for r in run)
            g.emit(ind, f"{names}, = {g.const(s.unpack_from, 'u')}(buf, pos); pos += {s.size}")
            i = j
            continue
        gen_read_value(g, ind, f.type, f"{o}.{f.name}", _is_nullable(f, version), flexible, cache, version,
                        f"{struct_.name}.{f.name}", depth)
        i += 1
    g.emit(ind, f"{o}._unknown_tags = None")
    if flexible:
        k = g.tmp("")
        nt, tag, size, tend, saved = f"_nt{k}", f"_tag{k}", f"_size{k}", f"_tend{k}", f"_end{k}"
        g.emit(ind, "if buf[pos] == 0: pos += 1")
        g.emit(ind, "else:")
        ind2 = ind + 1
        _emit_read_uvarint(g, ind2, nt)
        g.emit(ind2, f"if {nt} > end - pos: raise DecodeFailure('tag count ' + str({nt}) + ' runs past the end', pos)")
        g.emit(ind2, f"for _ in range({nt}):")
        g.emit(ind2 + 1, f"{tag}, pos = read_uvarint(buf, pos)")
        g.emit(ind2 + 1, f"{size}, pos = read_uvarint(buf, pos)")
        g.emit(ind2 + 1, f"{tend} = pos + {size}")
        g.emit(ind2 + 1, f"if {tend} > end: raise DecodeFailure('tagged field ' + str({tag}) + ' runs past the end', pos)")
        first = True
        for f in tagged:
            g.emit(ind2 + 1, f"{'if' if first else 'elif'} {tag} == {f.tag}:")
            first = False
            g.emit(ind2 + 2, f"{saved} = end; end = {tend}")
            gen_read_value(g, ind2 + 2, f.type, f"{o}.{f.name}", _is_nullable(f, version), True, cache, version,
                            f"{struct_.name}.{f.name}", depth)
            g.emit(ind2 + 2, f"if pos > {tend}: raise DecodeFailure('tagged field {f.tag} overruns its size', pos)")
            g.emit(ind2 + 2, f"end = {saved}; pos = {tend}")
        unknown_ind = ind2 + 1
        if tagged:
            g.emit(ind2 + 1, "else:")
            unknown_ind = ind2 + 2
        g.emit(unknown_ind, f"if {o}._unknown_tags is None: {o}._unknown_tags = {{}}")
        g.emit(unknown_ind, f"{o}._unknown_tags[{tag}] = buf[pos:{tend}]; pos = {tend}")
    if o != target:
        g.emit(ind, f"{target} = {o}")


def decoder_source(struct_: Struct, version: int, flexible: bool, cache: dict, name: str = "decode",
                   scope: str = "") -> SourceWriter:
    """The source of `name(buf, pos, end) -> (object, end)` decoding `struct_` at `version`."""
    g = SourceWriter(scope)
    g.ns["_new"] = object.__new__
    g.emit(0, f"def {name}(buf, pos, end):")
    g.emit(1, "try:")
    _emit_struct_read(g, 2, struct_, "obj", version, flexible, cache, 0)
    g.emit(2, "return obj, pos")
    g.emit(1, "except _struct_error:")
    g.emit(2, "raise DecodeFailure('truncated', pos) from None")
    g.emit(1, "except IndexError:")
    g.emit(2, "raise DecodeFailure('truncated', pos) from None")
    g.emit(1, "except UnicodeDecodeError:")
    g.emit(2, "raise DecodeFailure('invalid UTF-8', pos) from None")
    return g


def _gen_decoder(struct_: Struct, version: int, flexible: bool, cache: dict):
    g = decoder_source(struct_, version, flexible, cache)
    src = "\n".join(g.lines) + "\n"
    exec(compile(src, f"<decode {struct_.name} v{version}>", "exec"), g.ns)
    return g.ns["decode"]


# ---- encoding


def _gen_write_value(g: SourceWriter, ind: int, t: Any, expr: str, nullable: bool, flexible: bool,
                     cache: dict, version: int, label: str, depth: int = 0) -> None:
    fmt = _fixed_format(t)
    if fmt is not None:
        s = struct.Struct(">" + fmt)
        g.emit(ind, f"out += {g.const(s.pack, 'p')}({expr})")
        return
    if t is UUID:
        g.emit(ind, f"out += {expr}.bytes")
        return
    if t is STRING or t is BYTES or t is RECORDS:
        nullable = nullable or t is RECORDS
        v = g.tmp("v")
        g.emit(ind, f"{v} = {expr}")
        g.emit(ind, f"if {v} is None:")
        if nullable:
            g.emit(ind + 1, "out.append(0)" if flexible else
                   ("out += b'\\xff\\xff'" if t is STRING else "out += b'\\xff\\xff\\xff\\xff'"))
        else:
            g.emit(ind + 1, f"raise _Enc('{label} is not nullable in this version')")
        g.emit(ind, "else:")
        if t is STRING:
            g.emit(ind + 1, f"{v} = {v}.encode('utf-8')")
        if flexible:
            _emit_write_uvarint(g, ind + 1, f"len({v}) + 1")
        elif t is STRING:
            g.emit(ind + 1, f"out += _ph(len({v}))")
        else:
            g.emit(ind + 1, f"out += _pi(len({v}))")
        g.emit(ind + 1, f"out += {v}")
        return
    if isinstance(t, Struct):
        v = expr
        if not expr.isidentifier():
            v = g.tmp("v")
            g.emit(ind, f"{v} = {expr}")
        if nullable:
            g.emit(ind, f"if {v} is None: out.append(255)")
            g.emit(ind, "else:")
            g.emit(ind + 1, "out.append(1)")
            _emit_struct_write(g, ind + 1, t, v, version, flexible, cache, depth + 1)
        else:
            _emit_struct_write(g, ind, t, v, version, flexible, cache, depth + 1)
        return
    if isinstance(t, Array):
        v = g.tmp("v")
        g.emit(ind, f"{v} = {expr}")
        g.emit(ind, f"if {v} is None:")
        if nullable:
            g.emit(ind + 1, "out.append(0)" if flexible else "out += b'\\xff\\xff\\xff\\xff'")
        else:
            g.emit(ind + 1, f"raise _Enc('{label} is not nullable in this version')")
        g.emit(ind, "else:")
        if flexible:
            _emit_write_uvarint(g, ind + 1, f"len({v}) + 1")
        else:
            g.emit(ind + 1, f"out += _pi(len({v}))")
        el = t.element
        efmt = _fixed_format(el)
        if efmt is not None:
            g.ns["_struct_pack"] = struct.pack
            g.emit(ind + 1, f"if len({v}) == 1: out += {g.const(struct.Struct('>' + efmt).pack, 'p')}({v}[0])")
            g.emit(ind + 1, f"else: out += _struct_pack('>' + str(len({v})) + '{efmt}', *{v})")
            return
        item = g.tmp("x")
        g.emit(ind + 1, f"for {item} in {v}:")
        _gen_write_value(g, ind + 2, el, item, False, flexible, cache, version, label + "[]", depth)
        return
    raise TypeError(f"cannot encode type {t!r}")


def _is_default_expr(f: Field, expr: str, g: SourceWriter, version: int) -> str:
    """Source testing whether a tagged field holds its default (and so stays off the wire)."""
    if isinstance(f.type, Array):
        if f.default is None:
            return f"{expr} is None"
        if _is_nullable(f, version):
            return f"({expr} is not None and not {expr})"  # null differs from the empty default
        return f"not {expr}"
    if isinstance(f.type, Struct):
        # compared with one shared default instance (never handed out, never mutated)
        return f"{expr} is None or {expr} == {g.const(f.type.cls(), 'dflt')}"
    return f"{expr} == {g.const(f.default, 'd')}"


def encoder_source(struct_: Struct, version: int, flexible: bool, cache: dict, name: str = "encode",
                   scope: str = "") -> SourceWriter:
    """The source of `name(obj, out) -> out` appending `struct_` at `version` to bytearray `out`."""
    g = SourceWriter(scope)
    g.ns["_Enc"] = EncodeError
    g.emit(0, f"def {name}(obj, out):")
    _emit_struct_write(g, 1, struct_, "obj", version, flexible, cache, 0)
    g.emit(1, "return out")
    return g


def _gen_encoder(struct_: Struct, version: int, flexible: bool, cache: dict):
    g = encoder_source(struct_, version, flexible, cache)
    src = "\n".join(g.lines) + "\n"
    exec(compile(src, f"<encode {struct_.name} v{version}>", "exec"), g.ns)
    return g.ns["encode"]


def _emit_struct_write(g: SourceWriter, ind: int, struct_: Struct, obj: str, version: int, flexible: bool, cache: dict,
                       depth: int) -> None:
    """Emit code appending the struct held in local `obj` to `out`.

    Nested structs are written inline (no call per element), up to
    `_INLINE_DEPTH`, like the decoder; every helper local gets a unique name
    so nested sections (tagged fields swap `out`) never clobber each other.
    """
    if depth > _INLINE_DEPTH:
        enc = g.const(compile_struct(struct_, version, flexible, cache).encode, "enc")
        g.emit(ind, f"{enc}({obj}, out)")
        return
    fields = struct_.fields
    tagged: list[Field] = []
    i = 0
    while i < len(fields):
        f = fields[i]
        if not _present(f, version) or (f.tag is not None and not flexible):
            i += 1
            continue
        if flexible and version in f.tagged:
            tagged.append(f)
            i += 1
            continue
        run, _absent, j = _fixed_run(fields, i, version)
        if len(run) > 1:
            s = struct.Struct(">" + "".join(_fixed_format(r.type) for r in run))
            args = ", ".join(f"{obj}.{r.name}" for r in run)
            g.emit(ind, f"out += {g.const(s.pack, 'p')}({args})")
            i = j
            continue
        _gen_write_value(g, ind, f.type, f"{obj}.{f.name}", _is_nullable(f, version), flexible, cache, version,
                         f"{struct_.name}.{f.name}", depth)
        i += 1
    if flexible:
        unk = g.tmp("unk")
        tag, payload = g.tmp("tag"), g.tmp("payload")
        tagged.sort(key=lambda f: f.tag)
        if not tagged:
            g.emit(ind, f"{unk} = {obj}._unknown_tags")
            g.emit(ind, f"if not {unk}:")
            g.emit(ind + 1, "out.append(0)")
            g.emit(ind, "else:")
            g.emit(ind + 1, f"_wuv(out, len({unk}))")
            g.emit(ind + 1, f"for {tag} in sorted({unk}):")
            g.emit(ind + 2, f"_wuv(out, {tag}); _wuv(out, len({unk}[{tag}])); out += {unk}[{tag}]")
        else:
            # tagged fields are written only when they differ from their default;
            # unknown tags kept from decoding are written back in tag order
            items, save, known = g.tmp("items"), g.tmp("save"), g.tmp("known")
            g.emit(ind, f"{items} = []")
            for f in tagged:
                expr = f"{obj}.{f.name}"
                g.emit(ind, f"if not ({_is_default_expr(f, expr, g, version)}):")
                g.emit(ind + 1, f"{save} = out; out = bytearray()")
                _gen_write_value(g, ind + 1, f.type, expr, _is_nullable(f, version), True, cache, version,
                                 f"{struct_.name}.{f.name}", depth)
                g.emit(ind + 1, f"{items}.append(({f.tag}, out)); out = {save}")
            g.emit(ind, f"{unk} = {obj}._unknown_tags")
            g.emit(ind, f"if {unk}:")
            g.emit(ind + 1, f"{known} = {{t for t, _ in {items}}}")
            g.emit(ind + 1, f"{items}.extend((t, b) for t, b in {unk}.items() if t not in {known})")
            g.emit(ind + 1, f"{items}.sort(key=lambda item: item[0])")
            g.emit(ind, f"_wuv(out, len({items}))")
            g.emit(ind, f"for {tag}, {payload} in {items}:")
            g.emit(ind + 1, f"_wuv(out, {tag}); _wuv(out, len({payload})); out += {payload}")


# --------------------------------------------------------------------------
# Messages


@dataclass(slots=True)
class MessageSchema:
    """A top-level message (request, response or embedded payload) and its versions."""

    name: str
    api_key: int | None
    valid: Versions
    flexible: Versions
    struct: Struct
    _cache: dict = dc_field(default_factory=dict)

    def codec(self, version: int) -> _Compiled:
        """The version's decoder and encoder: the build's generated ones where the build made them
        (`cohort.protocol.codegen`), else generated now from the declaration."""
        entry = self._cache.get(version)
        if entry is None:
            if version not in self.valid:
                raise ProtocolError(f"{self.name}: unsupported version {version}")
            entry = compile_struct(self.struct, version, version in self.flexible,
                                   self._cache.setdefault("structs", {}))
            built = _built_codecs().get((self.name, version))
            if built is not None:
                entry = _Compiled(built[0] or entry.decode, built[1] or entry.encode)
            self._cache[version] = entry
        return entry


    def interpreted_codec(self, version: int) -> _Compiled:
        """The version's codec generated from the declaration as Python code, never the build's compiled
        one: a decode of megabytes on a worker thread then lets the interpreter switch threads every few
        milliseconds, which one call of a compiled decoder does not (it holds the interpreter throughout)."""
        key = ("interpreted", version)
        entry = self._cache.get(key)
        if entry is None:
            if version not in self.valid:
                raise ProtocolError(f"{self.name}: unsupported version {version}")
            entry = self._cache[key] = compile_struct(self.struct, version, version in self.flexible,
                                                      self._cache.setdefault("structs", {}))
        return entry


_BUILT_CODECS: dict | None = None


def _built_codecs() -> dict:
    """(message name, version) -> (decoder, encoder) of the build's generated module; empty without one.

    A generated module made from other declarations than these (one edited after the build) is not
    used: its fingerprint differs, and the codecs are generated at import time instead.
    """
    global _BUILT_CODECS
    if _BUILT_CODECS is None:
        _BUILT_CODECS = {}
        try:
            from cohort.protocol import _generated_codecs as built
        except ImportError:
            return _BUILT_CODECS
        if built.FINGERPRINT == declarations_fingerprint():
            _BUILT_CODECS = built.CODECS
        else:
            logging.getLogger(__name__).warning(
                "%s was built from other declarations than these: codecs are generated at import time "
                "(reinstall to rebuild it)", built.__file__)
    return _BUILT_CODECS


def message(name: str, api_key: int | None, valid: str, flexible: str, fields: Iterable[Field]) -> type:
    """Declare a top-level message; returns its generated class.

    The class gets `encode(version) -> bytes` and `decode(data, version)`; nested
    struct classes hang off their parent under their struct name, as in Kafka's
    generated code.
    """
    struct_ = Struct(name, fields)
    cls = _build_class(struct_, name)
    schema = MessageSchema(name, api_key, Versions.parse(valid), Versions.parse(flexible), struct_)
    cls.SCHEMA = schema
    cls.API_KEY = api_key
    cls.MIN_VERSION = schema.valid.low
    cls.MAX_VERSION = schema.valid.high

    encoders: dict[int, Any] = {}

    def encode(self, version: int) -> bytes:
        enc = encoders.get(version)
        if enc is None:
            enc = encoders[version] = schema.codec(version).encode
        try:
            return bytes(enc(self, bytearray()))
        except EncodeError as exc:
            raise EncodeError(f"{name} v{version}: {exc}") from None
        except (struct.error, AttributeError, TypeError, UnicodeEncodeError) as exc:
            raise EncodeError(f"{name} v{version}: {exc}") from None

    def encode_into(self, version: int, out: bytearray) -> bytearray:
        try:
            return schema.codec(version).encode(self, out)
        except (struct.error, AttributeError, TypeError, UnicodeEncodeError) as exc:
            raise EncodeError(f"{name} v{version}: {exc}") from None

    decoders: dict[int, Any] = {}

    def decode(klass, data: bytes, version: int, pos: int = 0, with_end: bool = False):
        if type(data) is not bytes:
            data = bytes(data)
        dec = decoders.get(version)
        if dec is None:
            dec = decoders[version] = schema.codec(version).decode
        try:
            obj, end = dec(data, pos, len(data))
        except DecodeFailure as exc:
            raise ProtocolError(f"{name} v{version}: {exc.reason} at byte {exc.pos}") from None
        except RecursionError:
            raise ProtocolError(f"{name} v{version}: nesting too deep") from None
        return (obj, end) if with_end else obj

    cls.encode = encode
    cls.encode_into = encode_into
    cls.decode = classmethod(decode)
    return cls
