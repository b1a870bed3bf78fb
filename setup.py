"""Build the hot modules (`protocol/compiled.py` names them) as Cython extension modules.

Pure-Python mode: the `.py` file is the source (a `.pxd` beside it may type it), and the wheel keeps
it beside the extension module. A module that fails to compile (no C compiler, no Python headers) is
left out with a warning and runs from its `.py`; `tests/test_compiled_path.py` fails where a
compiler exists and a module is missing, so that fallback is never silent in CI.
"""
import hashlib
import os
import runpy
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


# Compiled extension modules kept per checkout, by what they were compiled from: an install whose
# sources did not change (an editable reinstall, another extra) copies them instead of compiling again.
EXT_CACHE = os.path.join("build", "ext-cache")


def compiled_key(ext) -> str:
    """What decides an extension module's bytes: its C sources (Cython's output, which carries the .py,
    the .pxd and Cython's version), the compiler flags and this Python's ABI."""
    digest = hashlib.sha256()
    for name in [*ext.sources, *ext.depends]:
        with open(name, "rb") as f:
            digest.update(hashlib.sha256(f.read()).digest())
    digest.update(repr((ext.name, ext.extra_compile_args, sysconfig.get_config_var("EXT_SUFFIX"),
                        sys.version)).encode())
    return digest.hexdigest()[:32]


class BuildExtOrWarn(build_ext):
    """build_ext that reuses a module compiled before from the same sources (`EXT_CACHE`), and leaves out
    a module it cannot compile (setuptools' `optional` does not hold in a parallel build: one compiler
    failure failed the whole install)."""

    def run(self) -> None:
        if self.inplace:  # (an editable install: the modules sit beside their sources)
            for stale in compiled_list()["unlisted_extensions"](SOURCE_FOLDERS):
                stale.unlink()
                sys.stderr.write(f"{stale}: removed (a module no longer compiled runs from its .py)\n")
        super().run()

    def build_extension(self, ext) -> None:
        target = self.get_ext_fullpath(ext.name)
        try:
            cached = os.path.join(EXT_CACHE, compiled_key(ext), os.path.basename(target))
        except OSError:
            cached = None
        if cached is not None and os.path.isfile(cached):
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
            shutil.copy2(cached, target)
            # one write per line: the modules are built in parallel threads, and print's two writes interleave
            sys.stderr.write(f"{ext.name}: reusing the module compiled before from the same sources\n")
            return
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001 - any compiler failure: the module runs from its .py
            sys.stderr.write(f"warning: {ext.name} not compiled ({exc}); it runs from its .py\n")
            return
        if cached is not None and os.path.isfile(target):
            os.makedirs(os.path.dirname(cached), exist_ok=True)
            partial = f"{cached}.{os.getpid()}.part"
            shutil.copy2(target, partial)
            os.replace(partial, cached)  # whole or absent, even with parallel builds

def compiled_list() -> dict:
    """`protocol/compiled.py`'s names (the compiled modules' list and its helpers), read without importing
    the package."""
    return runpy.run_path(os.path.join("protocol", "compiled.py"))


# Installed package -> folder in this repository ([tool.setuptools.package-dir] in pyproject.toml).
SOURCE_FOLDERS = {"cohort.protocol": "protocol", "cohort.coordinator": "coordinator"}


def source_file(module: str) -> str:
    for package, folder in SOURCE_FOLDERS.items():
        if module.startswith(package + "."):
            return os.path.join(folder, *module[len(package) + 1:].split(".")) + ".py"
    raise ValueError(f"{module}: not in a compiled package")


# The generated codecs' .pxd, under their full module name (protocol/codegen.py).
CYTHON_INCLUDE = os.path.join("build", "cython", "include")


def generate_codecs() -> None:
    """Write `protocol/_generated_codecs.py` (and its `.pxd`) from the declarations, for Cython to
    compile (`protocol/codegen.py` says why); without it, the codecs are generated at import time."""
    import importlib.util
    import types
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        # this checkout's `cohort.protocol`, whatever else is installed
        sys.modules["cohort"] = types.ModuleType("cohort")
        sys.modules["cohort"].__path__ = []
        spec = importlib.util.spec_from_file_location(
            "cohort.protocol", os.path.join(here, "protocol", "__init__.py"),
            submodule_search_locations=[os.path.join(here, "protocol")])
        package = importlib.util.module_from_spec(spec)
        sys.modules["cohort.protocol"] = package
        spec.loader.exec_module(package)
        from cohort.protocol.codegen import write_module
        write_module(Path(here, CYTHON_INCLUDE))
    except Exception as exc:  # noqa: BLE001 - the import-time codecs run instead
        print(f"warning: codecs not generated ({exc!r}); they are generated at import time", file=sys.stderr)
    finally:
        for name in [n for n in sys.modules if n == "cohort" or n.startswith("cohort.")]:
            del sys.modules[name]


def optimization(module: str) -> str:
    """-O1 for the generated codecs (a 12 MB C file: half the compiler time of -O2, every codec within
    a few per cent of its -O2 speed in bench.compiled_bench), -O2 for the rest."""
    return "-O1" if module.endswith("._generated_codecs") else "-O2"


def extensions() -> list:
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("warning: Cython is not installed: no module is compiled (the pure-Python path runs)", file=sys.stderr)
        return []
    generate_codecs()
    modules = compiled_list()["COMPILED_MODULES"]
    return cythonize(
        # no debug info, -O2 (Python's flags say -g -O3): half the build's CPU (36 against 73 s here),
        # per call as fast (bench.compiled_bench: every step within 7 % of the -g -O3 build)
        [Extension(name, [source_file(name)], extra_compile_args=["-g0", optimization(name)]) for name in modules
         if os.path.isfile(source_file(name))],
        build_dir=os.path.join("build", "cython"),
        include_path=[CYTHON_INCLUDE],
        compiler_directives={"language_level": 3},
        nthreads=os.cpu_count() or 1,
        quiet=True,
    )


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExtOrWarn},
      options={"build_ext": {"parallel": os.cpu_count() or 1}})
