"""Which modules run compiled (Cython), and the switch that runs their Python source instead.

The build (`setup.py`) compiles the modules named in `COMPILED_MODULES` with Cython 3 in pure-Python
mode: each stays a plain `.py` file (typed, where it pays, by a `.pxd` beside it) and the wheel
carries both. Python's import system prefers the extension module; `COHORT_PURE_PYTHON=1` installs a
finder that loads the `.py` beside it instead, so both paths run from one installation. A build
without a C compiler has no extension modules and runs the `.py` files as they are.

It lives in `protocol` because both packages import it first: `cohort.protocol` installs the switch
when it is imported, and `cohort.coordinator` imports `cohort.protocol` before anything else.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from pathlib import Path
from types import ModuleType

# Chosen by the profile in docs/compiled-path.md: the modules a request walks through.
COMPILED_MODULES = (
    "cohort.protocol.framing",
    "cohort.protocol._generated_codecs",  # written by the build (protocol/codegen.py)
    "cohort.coordinator.server.connection",
    "cohort.coordinator.groups.offsets.table",
    "cohort.coordinator.log.batch",
    "cohort.coordinator.log.commit_rounds",
    "cohort.coordinator.log.durable_future",
    "cohort.coordinator.log.journal",
    "cohort.coordinator.log.state",
)

PURE_PYTHON_ENV = "COHORT_PURE_PYTHON"


def pure_python_requested() -> bool:
    """`COHORT_PURE_PYTHON` set to anything but empty or 0."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


class PureSourceFinder:
    """A meta path finder that loads a compiled module's `.py` source, not its extension module."""

    @classmethod
    def find_spec(cls, fullname: str, path=None, target=None) -> ModuleSpec | None:
        if fullname not in COMPILED_MODULES or path is None:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for folder in path:
            source = Path(folder) / leaf
            if source.is_file():
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def install_pure_python_switch() -> None:
    """With `COHORT_PURE_PYTHON` set, compiled modules imported from now on load from their `.py`."""
    if pure_python_requested() and PureSourceFinder not in sys.meta_path:
        sys.meta_path.insert(0, PureSourceFinder)


def module_origin(name: str) -> str | None:
    """The file `name` was (or would be) loaded from."""
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__file__", None)
    spec = importlib.util.find_spec(name)
    return spec.origin if spec is not None else None


def is_extension(origin: str | None) -> bool:
    return origin is not None and origin.endswith(tuple(EXTENSION_SUFFIXES))


def missing_compiled_modules() -> list[str]:
    """The modules of `COMPILED_MODULES` that run (or would be imported) from their `.py`."""
    return [name for name in COMPILED_MODULES if not is_extension(module_origin(name))]


def source_twin(name: str) -> ModuleType:
    """A fresh run of compiled module `name`'s `.py`, as `<name>__pure`, beside the compiled one.

    For comparing the two paths in one process (tests/protocol/test_compiled_codecs.py,
    bench/compiled_bench.py); the twin imports the package's other modules as they are.
    """
    twin_name = f"{name}__pure"
    if twin_name in sys.modules:
        return sys.modules[twin_name]
    module = importlib.import_module(name)
    source = Path(module.__file__).with_name(name.rpartition(".")[2] + ".py")
    spec = importlib.util.spec_from_file_location(twin_name, source)
    twin = importlib.util.module_from_spec(spec)
    sys.modules[twin_name] = twin  # dataclasses look their module up while the class is made
    spec.loader.exec_module(twin)
    return twin


def unlisted_extensions(folders: dict[str, Path]) -> list[Path]:
    """Extension modules under `folders` (package name -> its source folder), built for any Python, that
    `COMPILED_MODULES` does not name: left beside a `.py` by a build from before the module left the list,
    Python would import them instead of the source (the in-place build removes them, `setup.py`)."""
    unlisted = []
    for package, folder in folders.items():
        for path in sorted(Path(folder).rglob("*")):
            if path.suffix not in (".so", ".pyd") or not path.is_file():
                continue
            leaf = path.name.partition(".")[0]  # (`leaf.cpython-311-x86_64-linux-gnu.so`, `leaf.abi3.so`, ...)
            parts = path.relative_to(folder).parent.parts
            if ".".join((package, *parts, leaf)) not in COMPILED_MODULES:
                unlisted.append(path)
    return unlisted


def running_path() -> str:
    """Which request path runs, in words (the start-up log line and `cohort --version`)."""
    if pure_python_requested():
        return f"pure Python ({PURE_PYTHON_ENV}=1)"
    missing = missing_compiled_modules()
    if not missing:
        return f"compiled (Cython, {len(COMPILED_MODULES)} modules)"
    if len(missing) == len(COMPILED_MODULES):
        return "pure Python (no compiled modules installed)"
    return f"partly compiled ({len(COMPILED_MODULES) - len(missing)} of {len(COMPILED_MODULES)} modules; " \
           f"pure: {', '.join(missing)})"
