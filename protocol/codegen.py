"""Write the hot APIs' per-version codecs into one module at build time, so Cython compiles them.

The declarations (`cohort.protocol.messages`) stay the one source: `schema.py` generates a decoder and
an encoder per (message, version) from them, as Python source. At import time that source is run with
`exec`, which Cython never sees. `setup.py` calls `write_module()` before it compiles, which writes
the same source for the APIs every client sends (`HOT_APIS`) into `_generated_codecs.py` beside this
file, plus a `.pxd` (in the build's Cython include folder) that types its positions, lengths and
counts as C integers and its buffers as `bytes`/`bytearray`; `compiled.py` lists the module, so it
is built like the other compiled modules and `COHORT_PURE_PYTHON=1` runs its `.py`.

The module is a build artifact, not part of the source tree (`.gitignore` lists it): a committed copy
would be a second spelling of every declaration, and another branch's declaration change would make
it stale. It carries `declarations_fingerprint()` of the files it was made from; `schema.py` uses it
only while that still matches (a declaration edited after the build falls back to the import-time
codecs, with a warning), and without it every codec is generated at import time as before.

    python -m cohort.protocol.codegen [INCLUDE]   # (re)write the module (and its .pxd under INCLUDE)
"""
from __future__ import annotations

import importlib
import math
import pkgutil
import re
import struct
import sys
import uuid
from pathlib import Path

from cohort.protocol import schema
from cohort.protocol.errors import EncodeError
from cohort.protocol.fingerprint import declarations_fingerprint

MODULE = "_generated_codecs"

# The APIs on a consumer's request path (connecting, group membership, offsets), every version, in the
# server's direction: request decoders and response encoders. The client's direction and the other
# APIs keep their import-time codecs: compiling everything took 3 min of C compiler CPU per build, and
# Metadata (a fifth of the module, asked once a connection and then every few minutes) 30 s of it.
HOT_APIS = ("ApiVersions", "FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup",
            "OffsetCommit", "OffsetFetch", "ConsumerGroupHeartbeat")

_HERE = Path(__file__).resolve().parent


class NotWritable(Exception):
    """A generated function refers to a value that has no spelling in a module (it keeps its
    import-time codec)."""


# Names every generated function may use, and their spelling in the module.
_SHARED = {
    "DecodeFailure": (schema.DecodeFailure, "DecodeFailure"),
    "read_uvarint": (schema.read_uvarint, "read_uvarint"),
    "_wuv": (schema._write_uvarint, "_write_uvarint"),
    "_h": (None, "_struct.Struct('>h').unpack_from"),
    "_i": (None, "_struct.Struct('>i').unpack_from"),
    "_ph": (None, "_struct.Struct('>h').pack"),
    "_pi": (None, "_struct.Struct('>i').pack"),
    "_UUID": (uuid.UUID, "_UUID"),
    "_struct_error": (struct.error, "_struct.error"),
    "_new": (object.__new__, "object.__new__"),
    "_Enc": (EncodeError, "EncodeError"),
    "_struct_pack": (struct.pack, "_struct.pack"),
    "_struct_unpack": (struct.unpack_from, "_struct.unpack_from"),
}

# Decoder locals that only ever hold positions, lengths, counts, tags and bytes of the buffer.
_DECODER_INTS = re.compile(r"\b(_n|_e|_m|_nt_\d+|_tag_\d+|_size_\d+|_tend_\d+|_end_\d+)\b")
_ENCODER_INTS = re.compile(r"\b(_k)\b")


def _message_classes() -> dict[str, tuple[str, type]]:
    """Message class name -> (defining module, class), for every module of `cohort.protocol.messages`."""
    import cohort.protocol.messages as package
    found: dict[str, tuple[str, type]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, type) and issubclass(value, schema.MessageBase) and hasattr(value, "SCHEMA"):
                found.setdefault(name, (module.__name__, value))
    return found


def _class_paths(top: type, path: str, into: dict[type, str]) -> None:
    """`top` and the struct classes nested in it, each by its attribute path (`Request.Topic.Partition`)."""
    into.setdefault(top, path)
    for name, value in vars(top).items():
        if isinstance(value, type) and issubclass(value, schema.MessageBase) and value is not top:
            _class_paths(value, f"{path}.{name}", into)


def _spelling(value, classes: dict[type, str]) -> str:
    """Module source that makes `value` (a constant of the generated code)."""
    owner = getattr(value, "__self__", None)
    if isinstance(owner, struct.Struct):
        return f"_struct.Struct({owner.format!r}).{value.__name__}"
    if isinstance(value, type) and value in classes:
        return classes[value]
    if isinstance(value, schema.MessageBase) and type(value) in classes and value == type(value)():
        return classes[type(value)] + "()"
    if isinstance(value, uuid.UUID):
        return f"_UUID({str(value)!r})"
    if value is None or type(value) in (bool, int, str, bytes) or (type(value) is float and math.isfinite(value)):
        return repr(value)
    raise NotWritable(repr(value))


def _function(writer: schema.SourceWriter, classes: dict[type, str], constants: dict[str, str]) -> str:
    """The writer's function source, its constants written in: literals as literals, the rest as module
    globals shared by every function (`constants`: source -> global name, extended here)."""
    renames: dict[str, str] = {}
    for name, value in writer.ns.items():
        if name in _SHARED:
            expected = _SHARED[name][0]
            if expected is not None and value is not expected:
                raise NotWritable(name)
        elif name.startswith(writer.scope) and writer.scope:
            spelled = _spelling(value, classes)
            if _is_literal(value):
                renames[name] = spelled
            else:
                renames[name] = constants.setdefault(spelled, f"_g{len(constants)}")
        else:
            raise NotWritable(name)
    source = "\n".join(writer.lines) + "\n"
    if renames:
        source = re.sub(r"\b(" + "|".join(map(re.escape, renames)) + r")\b", lambda m: renames[m.group(1)], source)
    return source


def _is_literal(value) -> bool:
    return value is None or type(value) in (bool, int, str, bytes, float)


def module_sources() -> tuple[str, str]:
    """(the `.py`, the `.pxd`) of the generated codec module."""
    from cohort.protocol.messages import API_SCHEMAS
    by_name = {api.name: api for api in API_SCHEMAS.values()}
    found = _message_classes()
    classes: dict[type, str] = {}
    imports: dict[str, list[str]] = {}
    functions: list[str] = []
    constants: dict[str, str] = {}
    declarations: list[str] = []
    entries: list[str] = []
    for api_name in HOT_APIS:
        api = by_name[api_name]
        for cls in (api.request, api.response):
            module, _ = found[cls.__name__]
            imports.setdefault(module, []).append(cls.__name__)
            _class_paths(cls, cls.__name__, classes)
    for api_name in HOT_APIS:
        api = by_name[api_name]
        for cls in (api.request, api.response):
            message = cls.SCHEMA
            for version in range(message.valid.low, message.valid.high + 1):
                flexible = version in message.flexible
                name = f"{message.name}_v{version}"
                more = dict(constants)
                try:
                    if cls is api.request:
                        source = _function(schema.decoder_source(
                            message.struct, version, flexible, {}, f"decode_{name}", f"{name}_"), classes, more)
                    else:
                        source = _function(schema.encoder_source(
                            message.struct, version, flexible, {}, f"encode_{name}", f"{name}_"), classes, more)
                except NotWritable as exc:  # e.g. a struct nested deeper than the generator inlines
                    print(f"codegen: {name} keeps its import-time codec ({exc})", file=sys.stderr)
                    continue
                constants = more
                functions.append(source)
                if cls is api.request:
                    ints = sorted(set(_DECODER_INTS.findall(source)))
                    declarations.append(_locals(ints) +
                                        f"cpdef tuple decode_{name}(bytes buf, Py_ssize_t pos, Py_ssize_t end)")
                    entries.append(f"    ({message.name!r}, {version}): (decode_{name}, None),")
                else:
                    if "lambda" not in source:  # Cython's cpdef functions take no closures (tagged fields' sort)
                        ints = sorted(set(_ENCODER_INTS.findall(source)))
                        declarations.append(_locals(ints) + f"cpdef bytearray encode_{name}(obj, bytearray out)")
                    entries.append(f"    ({message.name!r}, {version}): (None, encode_{name}),")
    head = [
        '"""Generated by `cohort.protocol.codegen` from `cohort.protocol.messages` (a build artifact: do not edit)."""',
        "import struct as _struct",
        "from uuid import UUID as _UUID",
        "",
        "from cohort.protocol.errors import EncodeError",
        "from cohort.protocol.schema import DecodeFailure, _write_uvarint, read_uvarint",
    ]
    head += [f"from {module} import {', '.join(names)}" for module, names in sorted(imports.items())]
    head += ["", f"FINGERPRINT = {declarations_fingerprint()!r}", ""]
    head += [f"{name} = {source}" for name, (_, source) in _SHARED.items() if name != source]
    head += [f"{name} = {source}" for source, name in constants.items()]
    body = "\n\n".join(functions)
    table = "\n# (message name, version) -> (decoder, encoder); None where the import-time one serves\nCODECS = {\n" + "\n".join(entries) + "\n}\n"
    pxd = ["# Generated by `cohort.protocol.codegen` (a build artifact: do not edit).", "cimport cython", ""]
    pxd += [d + "\n" for d in declarations]
    return "\n".join(head) + "\n\n\n" + body + table, "\n".join(pxd)


def _locals(ints: list[str]) -> str:
    if not ints:
        return ""
    return "@cython.locals(" + ", ".join(f"{name}=Py_ssize_t" for name in ints) + ")\n"


def write_module(include: Path | None = None) -> Path:
    """Write `_generated_codecs.py` beside this file and, with `include`, its `.pxd` under that Cython
    include folder (as `cohort/protocol/…`: Cython finds a module's `.pxd` by its full name, and the
    source folder is `protocol/`, not `cohort/protocol/`); only what changed. Returns the `.py`."""
    source, pxd = module_sources()
    target = _HERE / f"{MODULE}.py"
    files = [(target, source)]
    if include is not None:
        package = include / "cohort" / "protocol"
        package.mkdir(parents=True, exist_ok=True)
        files += [(include / "cohort" / "__init__.pxd", ""), (package / "__init__.pxd", ""),
                  (package / f"{MODULE}.pxd", pxd)]
    for path, text in files:
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
    return target


if __name__ == "__main__":
    print(write_module(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
