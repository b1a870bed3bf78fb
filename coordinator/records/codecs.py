"""Everything about a record type derived from its key and value declarations.

A `RecordType` takes a key and a value schema (`layouts`) and derives:

* the typed record and tombstone classes (key fields, then value fields, with
  the declared defaults) and the classes of nested structs;
* the generic codec: protocol/schema.py's generated per-version code, for
  every version (flexible ones, arrays of structs);
* for a record that is flat (fixed-width fields, strings, bytes, uuids; not
  flexible) a fast codec generated here from the same field lists.  Offset
  commits are encoded once per committed partition and decoded millions of
  times at start-up, and the generic codec's message object per key and per
  value costs more than the bytes.  The fast encoder takes the fields as
  positional arguments, packs each run of fixed-width fields and length
  prefixes with one `struct` call, caches the key's leading strings per value
  (a consumer commits the same group and topic again and again), and packs a
  value whose strings are all empty with a single call; the fast decoder
  builds the typed record straight from the bytes, sharing key strings
  through a caller's dict;
* `fixed_layout`: where each field of a value version sits when its strings
  are empty, which the column-wise loader reads.

Property tests hold the fast codec to the generic one.
"""
from __future__ import annotations

import struct
import sys
import uuid
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Callable

from cohort.protocol.errors import EncodeError, ProtocolError
from cohort.protocol.schema import BYTES, STRING, UUID, Array, Field
# The schema generator's failure signal, source writer and reader of one non-fixed field.
from cohort.protocol.schema import DecodeFailure, SourceWriter, gen_read_value
from cohort.protocol.schema import Struct as SchemaStruct

_MODULE = "cohort.coordinator.records.types"  # where the typed classes are published (pickling, reprs)
_KEY_PREFIX_CACHE_SIZE = 16384
_H = struct.Struct(">h")


class RecordDecodeError(ValueError):
    """A key or value that is not a record we know: unknown type or version, or bad bytes."""


# --------------------------------------------------------------------------------------
# Field kinds
# --------------------------------------------------------------------------------------
def _fixed_code(t: Any) -> str | None:
    """The struct code of a fixed-width type (construct's own format), else None."""
    fmt = getattr(t, "fmtstr", None)
    return fmt[1:] if isinstance(fmt, str) and fmt[:1] == ">" else None


def _kind(t: Any) -> str | None:
    if _fixed_code(t) is not None:
        return "fixed"
    if t is STRING:
        return "string"
    if t is BYTES:
        return "bytes"
    if t is UUID:
        return "uuid"
    return None


def _present(fields: list[Field], version: int) -> list[Field]:
    return [f for f in fields if version in f.versions]


def is_flat(schema: Any, version: int) -> bool:
    """True if `version` of the message `schema` has only fixed-width, string, bytes and uuid fields."""
    s = schema.SCHEMA
    return (version in s.valid and version not in s.flexible
            and all(_kind(f.type) is not None and f.tag is None for f in _present(s.struct.fields, version)))


@dataclass(frozen=True, slots=True)
class FixedLayout:
    """A flat value version with every string and bytes field empty: its size and byte positions.

    `markers` are (position, byte) pairs that identify it (the version and the
    zero lengths); `fields` maps each fixed-width field to (position, width).
    """

    size: int
    markers: tuple[tuple[int, int], ...]
    fields: dict[str, tuple[int, int]]


def fixed_layout(schema: Any, version: int) -> FixedLayout:
    """The `FixedLayout` of a flat value version (ValueError if it is not flat)."""
    if not is_flat(schema, version):
        raise ValueError(f"{schema.SCHEMA.name} v{version} is not flat")
    markers = list(enumerate(_H.pack(version)))
    fields: dict[str, tuple[int, int]] = {}
    pos = 2
    for f in _present(schema.SCHEMA.struct.fields, version):
        kind = _kind(f.type)
        if kind == "fixed":
            width = struct.calcsize(">" + _fixed_code(f.type))
            fields[f.name] = (pos, width)
            pos += width
        elif kind == "uuid":
            pos += 16
        else:
            width = 2 if kind == "string" else 4
            markers += [(pos + i, 0) for i in range(width)]
            pos += width
    return FixedLayout(pos, tuple(markers), fields)


# --------------------------------------------------------------------------------------
# Code generation
# --------------------------------------------------------------------------------------
class _Source(SourceWriter):
    """The schema generator's source writer, plus compiling and struct packing."""

    def compile(self, name: str, label: str) -> Callable:
        exec(compile("\n".join(self.lines) + "\n", f"<{label}>", "exec"), self.ns)
        return self.ns[name]

    def value(self, v: Any) -> str:
        """Source for a constant: a literal when it is one (no name lookup at run time)."""
        return repr(v) if v is None or type(v) in (int, str, bytes, bool) else self.const(v, "d")

    def pack(self, fmt: str, args: list[str]) -> str:
        return f"{self.const(struct.Struct('>' + fmt).pack, 'p')}({', '.join(args)})"


def _local(name: str) -> str:
    """A decoder's local for a field (decoders have locals of their own: buf, pos, version...)."""
    return "f_" + name


def _emit_packing(src: _Source, ind: int, fields: list[Field], version: int, fmt: str, args: list[str],
                  label: str, empty: bool = False) -> list[str]:
    """Emit what serializes `fields` after a fixed-width head (fmt, args); return the pieces to join.

    With `empty`, every string and bytes field is known to be empty: its
    length is a constant 0 and nothing follows it.
    """
    pieces: list[str] = []
    for f in _present(fields, version):
        kind = _kind(f.type)
        name = f.name
        if kind == "fixed":
            fmt += _fixed_code(f.type)
            args.append(name)
        elif kind == "uuid":
            fmt += "16s"
            args.append(f"{name}.bytes")
        else:
            fmt += "h" if kind == "string" else "i"
            if empty:
                args.append("0")
                continue
            nullable = version in f.nullable
            data = name
            if kind == "string":
                data = src.tmp("b")
                src.emit(ind, f"{data} = None if {name} is None else {name}.encode('utf-8')" if nullable
                         else f"{data} = {name}.encode('utf-8')")
                guard = f"{data} is not None and len({data}) > 32767" if nullable else f"len({data}) > 32767"
                too_long = f"cannot encode {label}: {f.name} longer than 32767 bytes"
                src.emit(ind, f"if {guard}: raise ValueError({too_long!r})")
            args.append(f"(-1 if {data} is None else len({data}))" if nullable else f"len({data})")
            pieces.append(src.pack(fmt, args))
            pieces.append(f"({data} or b'')" if nullable else data)
            fmt, args = "", []
    if fmt:
        pieces.append(src.pack(fmt, args))
    return pieces


def _joined(pieces: list[str]) -> str:
    return pieces[0] if len(pieces) == 1 else f"b''.join(({', '.join(pieces)},))"


def _emit_reading(src: _Source, ind: int, fields: list[Field], version: int, label: str,
                  names: bool = False) -> None:
    """Emit code reading `fields` of `version` from `buf` at `pos` into locals f_<name>.

    Absent fields get their declared defaults.  With `names`, strings are
    shared through the caller's `names` dict (their bytes -> one interned str).
    """
    run: list[Field] = []

    def flush(length: str = "") -> bool:
        """Read the pending run of fixed-width fields (and `length`, the next field's length, into _n)."""
        if not run:
            return False
        fmt = "".join(_fixed_code(f.type) for f in run) + length
        s = struct.Struct(">" + fmt)
        targets = ", ".join([_local(f.name) for f in run] + (["_n"] if length else []))
        src.emit(ind, f"{targets}, = {src.const(s.unpack_from, 'u')}(buf, pos); pos += {s.size}")
        run.clear()
        return True

    for f in fields:
        name = _local(f.name)
        if version not in f.versions:
            src.emit(ind, f"{name} = {src.value(f.default)}")
            continue
        kind = _kind(f.type)
        if kind == "fixed":
            run.append(f)
            continue
        if names and kind == "string" and version not in f.nullable:
            flush()
            # looked up by its bytes: a name seen before is not decoded again
            src.emit(ind, "_n, = _h(buf, pos); _e = pos + 2 + _n")
            src.emit(ind, "if _n < 0 or _e > end: "
                          f"raise DecodeFailure('invalid length ' + str(_n) + ' of {label}.{f.name}', pos)")
            src.emit(ind, "_s = buf[pos + 2:_e]; pos = _e")
            src.emit(ind, f"{name} = names.get(_s)")
            src.emit(ind, f"if {name} is None: {name} = names[_s] = _intern(_s.decode('utf-8'))")
            src.ns["_intern"] = sys.intern
        elif kind == "uuid":
            flush()
            gen_read_value(src, ind, f.type, name, False, False, {}, version, f"{label}.{f.name}")
        else:
            length_read = flush("h" if kind == "string" else "i")  # one struct call for the run and the length
            first = len(src.lines)
            gen_read_value(src, ind, f.type, name, version in f.nullable, False, {}, version, f"{label}.{f.name}")
            if length_read:  # drop the reader's own length read
                assert src.lines[first].lstrip().startswith("_n, = "), src.lines[first]
                del src.lines[first]
    flush()


# --------------------------------------------------------------------------------------
# Record types
# --------------------------------------------------------------------------------------
def _annotation(f: Field) -> Any:
    t = f.type
    if isinstance(t, Array):
        return list
    return {"fixed": int, "string": str, "bytes": bytes, "uuid": uuid.UUID}.get(_kind(t), Any)


def _struct_of(f: Field) -> SchemaStruct | None:
    """The struct a field holds (itself or as array elements), if any."""
    element = f.type.element if isinstance(f.type, Array) else f.type
    return element if isinstance(element, SchemaStruct) else None


def _key_head_and_tail(fields: list[Field], version: int) -> tuple[list[Field], list[Field]]:
    """A key's fields up to its last string or bytes field, and the fixed-width ones after it."""
    present = _present(fields, version)
    last = max((i for i, f in enumerate(present) if _kind(f.type) in ("string", "bytes")), default=-1)
    return present[: last + 1], present[last + 1 :]


def _typed_class(name: str, fields: list[Field], required: int = 0) -> type:
    """A slotted dataclass of `fields`: the first `required` have no default, the rest the declared one."""
    specs = []
    for i, f in enumerate(fields):
        if i < required:
            specs.append((f.name, _annotation(f)))
        elif isinstance(f.type, Array) and f.default is not None:
            specs.append((f.name, _annotation(f), field(default_factory=list)))
        else:
            specs.append((f.name, _annotation(f), field(default=f.default)))
    # The generic encoder of a flexible version writes back unknown tagged fields; a typed record has none.
    return make_dataclass(name, specs, slots=True, namespace={"_unknown_tags": None, "__module__": _MODULE})


class RecordType:
    """One record type of the offsets log, derived from its key and value declarations.

    `write_versions` are the value versions written, in order of preference:
    a record is written with the first one that holds every field differing
    from its default, else with the last (Kafka's offset commit: v3, or v1
    when an expire timestamp is set).  The key is written under the key
    schema's highest version (its record type).
    """

    def __init__(self, key: Any, value: Any, write_versions: tuple[int, ...], record: str, tombstone: str,
                 nested: dict[str, str] | None = None) -> None:
        self.key, self.value = key, value
        self.name = key.SCHEMA.name.removesuffix("Key")
        self.type_ids = tuple(range(key.SCHEMA.valid.low, key.SCHEMA.valid.high + 1))
        self.write_type = key.SCHEMA.valid.high
        self.write_versions = write_versions
        self.key_fields = list(key.SCHEMA.struct.fields)
        self.value_fields = list(value.SCHEMA.struct.fields)
        self.nested: dict[str, type] = {}  # nested struct's declared name -> its typed class
        pending = list(self.value_fields)
        while pending:
            element = _struct_of(pending.pop())
            if element is not None and element.name not in self.nested:
                self.nested[element.name] = _typed_class((nested or {}).get(element.name, element.name),
                                                         element.fields)
                pending += element.fields
        self.record = _typed_class(record, self.key_fields + self.value_fields, required=len(self.key_fields))
        self.tombstone = _typed_class(tombstone, self.key_fields, required=len(self.key_fields))
        self.flat = is_flat(key, self.write_type) and all(is_flat(value, v) for v in write_versions)
        # (key, value) from the fields as positional arguments, without building a record; flat types only.
        self.encode_fields: Callable[..., tuple[bytes, bytes]] | None = None
        if self.flat:
            self.encode_fields = self._compile_encoder()
            self.encode = self._compile_record_encoder()
        else:
            self.encode = self.encode_generic
        self._from_message = self._compile_converter(self.value_fields, self.record, keyed=True)
        self._decoders = {t: self._compile_decoder(t) for t in self.type_ids}

    # ---- encoding -------------------------------------------------------------------
    def write_version(self, rec: Any) -> int:
        """The value version `rec` is written with (see the class docstring)."""
        for version in self.write_versions[:-1]:
            if all(getattr(rec, f.name) == f.default for f in self.value_fields if version not in f.versions):
                return version
        return self.write_versions[-1]

    def encode_generic(self, rec: Any) -> tuple[bytes, bytes]:
        """(key, value) through the generic generated codec (the reference the fast encoder is held to)."""
        version = self.write_version(rec)
        try:
            key = _H.pack(self.write_type) + self.key.encode(rec, self.write_type)
            value = _H.pack(version) + self.value.encode(rec, version)
        except EncodeError as exc:  # it names the key or value declaration, version and field
            raise ValueError(f"cannot encode {exc}") from None
        return key, value

    def encode_tombstone(self, tomb: Any) -> tuple[bytes, None]:
        try:
            return _H.pack(self.write_type) + self.key.encode(tomb, self.write_type), None
        except EncodeError as exc:
            raise ValueError(f"cannot encode {exc}") from None

    def _compile_encoder(self) -> Callable[..., tuple[bytes, bytes]]:
        src = _Source()
        label = f"{self.name} record"
        params = [f.name for f in self.key_fields + self.value_fields]
        head, tail = _key_head_and_tail(self.key_fields, self.write_type)
        if head:
            cache = src.const({}, "cache")
            cache_key = head[0].name if len(head) == 1 else "(" + ", ".join(f.name for f in head) + ")"
            src.emit(0, f"def _key_prefix({', '.join(f.name for f in head)}):")
            pieces = _emit_packing(src, 1, head, self.write_type, "h", [str(self.write_type)], label)
            src.emit(1, f"_k = {_joined(pieces)}")
            src.emit(1, f"if len({cache}) >= {_KEY_PREFIX_CACHE_SIZE}: {cache}.clear()  # bounded; refilled by use")
            src.emit(1, f"{cache}[{cache_key}] = _k")
            src.emit(1, "return _k")
        src.emit(0, f"def encode({', '.join(params)}):")  # the field names; the code's own names start with _
        src.emit(1, "try:")
        if head:
            src.emit(2, f"_k = {cache}.get({cache_key})")
            src.emit(2, f"if _k is None: _k = _key_prefix({', '.join(f.name for f in head)})")
            if tail:
                src.emit(2, f"_k = _k + {_joined(_emit_packing(src, 2, tail, self.write_type, '', [], label))}")
        else:
            pieces = _emit_packing(src, 2, tail, self.write_type, "h", [str(self.write_type)], label)
            src.emit(2, f"_k = {_joined(pieces)}")
        for i, version in enumerate(self.write_versions):
            ind = 2
            if i < len(self.write_versions) - 1:
                absent = [f for f in self.value_fields if version not in f.versions]
                cond = " and ".join(f"{f.name} == {src.value(f.default)}" for f in absent) or "True"
                src.emit(2, f"if {cond}:")
                ind = 3
            variable = [f for f in _present(self.value_fields, version) if _kind(f.type) in ("string", "bytes")]
            if variable:
                empty = " and ".join(
                    f"{f.name} == {repr('' if _kind(f.type) == 'string' else b'')}" for f in variable)
                src.emit(ind, f"if {empty}:")
                pieces = _emit_packing(src, ind + 1, self.value_fields, version, "h", [str(version)], label, empty=True)
                src.emit(ind + 1, f"return _k, {_joined(pieces)}")
            pieces = _emit_packing(src, ind, self.value_fields, version, "h", [str(version)], label)
            src.emit(ind, f"return _k, {_joined(pieces)}")
        src.emit(1, "except (_struct_error, AttributeError, TypeError, UnicodeEncodeError) as _exc:")
        src.emit(2, f"raise ValueError('cannot encode {label}: ' + str(_exc)) from None")
        return src.compile("encode", f"encode {self.name}")

    def _compile_record_encoder(self) -> Callable[[Any], tuple[bytes, bytes]]:
        src = _Source()
        src.ns["_encode"] = self.encode_fields
        args = ", ".join(f"rec.{f.name}" for f in self.key_fields + self.value_fields)
        src.emit(0, "def encode(rec):")
        src.emit(1, f"return _encode({args})")
        return src.compile("encode", f"encode {self.name} record")

    # ---- decoding -------------------------------------------------------------------
    def decoder(self, type_id: int) -> Callable[[bytes, bytes | None, dict], Any]:
        """decode(key, value, names) -> the typed record of a key of `type_id`.

        `names` (bytes -> str) shares the key's strings across calls; bad bytes
        raise RecordDecodeError.
        """
        return self._decoders[type_id]

    def key_head_decoder(self, type_id: int) -> Callable[[bytes, dict], tuple | None]:
        """decode_head(key_head, names) -> the values of a key's head (`_key_head_and_tail`), None if invalid.

        For the column-wise loader, which reads the fixed-width tail of many
        keys at once and the head once per run of keys that share it.
        """
        head, _ = _key_head_and_tail(self.key_fields, type_id)
        src = _Source()
        src.emit(0, "def decode_head(buf, names):")
        src.emit(1, "end = len(buf); pos = 2")
        src.emit(1, "try:")
        _emit_reading(src, 2, head, type_id, self.key.SCHEMA.name, names=True)
        src.emit(1, "except (DecodeFailure, _struct_error, IndexError, UnicodeDecodeError):")
        src.emit(2, "return None")
        src.emit(1, f"return ({''.join(_local(f.name) + ', ' for f in head)}) if pos == end else None")
        return src.compile("decode_head", f"decode {self.name} key head type {type_id}")

    def _compile_decoder(self, type_id: int) -> Callable:
        src = _Source()
        src.ns.update(_Rec=self.record, _Tomb=self.tombstone, _Err=RecordDecodeError, _generic=self._decode_generic)
        value_name = self.value.SCHEMA.name
        key_args = ", ".join(_local(f.name) for f in self.key_fields)
        all_args = ", ".join(_local(f.name) for f in self.key_fields + self.value_fields)
        readable = range(self.value.SCHEMA.valid.low, self.value.SCHEMA.valid.high + 1)
        # the written versions first: they are what a log mostly holds
        flat_versions = [v for v in sorted(readable, key=lambda v: v not in self.write_versions)
                         if is_flat(self.value, v)]
        src.emit(0, "def decode(key, value, names):")
        src.emit(1, "buf = key; end = len(buf); pos = 2; where = 0")
        src.emit(1, "try:")
        _emit_reading(src, 2, self.key_fields, type_id, self.key.SCHEMA.name, names=True)
        src.emit(2, "if pos != end: raise DecodeFailure(str(end - pos) + ' unexpected trailing bytes', pos)")
        src.emit(2, f"if value is None: return _Tomb({key_args})")
        src.emit(2, "buf = value if type(value) is bytes else bytes(value); end = len(buf)")
        src.emit(2, f"if end < 2: raise _Err('{value_name}: value too short (' + str(end) + ' bytes)')")
        src.emit(2, "version, = _h(buf, 0); pos = 2; where = 1")
        for i, version in enumerate(flat_versions):
            src.emit(2, f"{'if' if i == 0 else 'elif'} version == {version}:")
            _emit_reading(src, 3, self.value_fields, version, value_name)
        if flat_versions:
            src.emit(2, "else:")
            src.emit(3, f"return _generic(({key_args},), value, version)")
            src.emit(2, "if pos != end: raise DecodeFailure(str(end - pos) + ' unexpected trailing bytes', pos)")
            src.emit(2, f"return _Rec({all_args})")
        else:
            src.emit(2, f"return _generic(({key_args},), value, version)")
        src.emit(1, "except DecodeFailure as exc:")
        src.emit(2, "reason, pos = exc.reason, exc.pos")
        src.emit(1, "except (_struct_error, IndexError):")
        src.emit(2, "reason = 'truncated'")
        src.emit(1, "except UnicodeDecodeError:")
        src.emit(2, "reason = 'invalid UTF-8'")
        src.emit(1, f"what = 'key of record type {type_id}' if where == 0 else '{value_name} v' + str(version)")
        src.emit(1, "raise _Err('bad ' + what + ': ' + reason + ' at byte ' + str(pos)) from None")
        return src.compile("decode", f"decode {self.name} type {type_id}")

    def decode_generic(self, key: bytes, value: bytes | None) -> Any:
        """The typed record of (key, value) through the generic generated codec (the fast decoder's reference)."""
        type_id = _H.unpack_from(key)[0]
        try:
            decoded, end = self.key.decode(key, type_id, pos=2, with_end=True)
        except ProtocolError as exc:
            raise RecordDecodeError(f"bad key: {exc}") from None
        if end != len(key):
            raise RecordDecodeError(f"bad key: {len(key) - end} unexpected trailing bytes")
        key_values = tuple(getattr(decoded, f.name) for f in self.key_fields)
        if value is None:
            return self.tombstone(*key_values)
        if len(value) < 2:
            raise RecordDecodeError(f"{self.value.SCHEMA.name}: value too short ({len(value)} bytes)")
        return self._decode_generic(key_values, value, _H.unpack_from(value)[0])

    def _decode_generic(self, key_values: tuple, value: bytes, version: int) -> Any:
        """A value version the fast decoder does not cover, through the generic generated codec."""
        name = self.value.SCHEMA.name
        if version not in self.value.SCHEMA.valid:
            raise RecordDecodeError(f"{name}: unsupported value version {version}")
        try:
            decoded, end = self.value.decode(bytes(value), version, pos=2, with_end=True)
        except ProtocolError as exc:
            raise RecordDecodeError(f"bad {exc}") from None
        if end != len(value):
            raise RecordDecodeError(f"bad {name} v{version}: {len(value) - end} unexpected trailing bytes")
        return self._from_message(key_values, decoded)

    def _compile_converter(self, fields: list[Field], cls: type, keyed: bool) -> Callable:
        """convert([key_values,] obj) -> `cls` from a decoded message object, nested structs included."""
        src = _Source()
        src.ns["_cls"] = cls
        args = ["*key_values"] if keyed else []
        for f in fields:
            element = _struct_of(f)
            if element is None:
                args.append(f"obj.{f.name}")
                continue
            nested = src.const(self._compile_converter(element.fields, self.nested[element.name], False), "conv")
            each = f"[{nested}(x) for x in obj.{f.name}]" if isinstance(f.type, Array) else f"{nested}(obj.{f.name})"
            args.append(f"None if obj.{f.name} is None else {each}")
        src.emit(0, f"def convert({'key_values, ' if keyed else ''}obj):")
        src.emit(1, f"return _cls({', '.join(args)})")
        return src.compile("convert", f"convert to {cls.__name__}")
