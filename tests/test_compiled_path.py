"""The compiled request path is there where it can be, and COHORT_PURE_PYTHON=1 really runs the source.

The import check is explicit: where a C compiler exists, every module `protocol/compiled.py` names
must run from its extension module (a build that failed to compile one falls back to its `.py`
with only a build warning; this test is what makes that loud). The pure run of the suite
(COHORT_PURE_PYTHON=1) checks the opposite: every one of them runs from its `.py`.
"""
from __future__ import annotations

import importlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path


from bounded_wait import wait_until
from cohort_process import CohortServer, clean_env
from cohort.protocol.compiled import (
    COMPILED_MODULES, PURE_PYTHON_ENV, is_extension, missing_compiled_modules, pure_python_requested,
)


def _c_compiler() -> str | None:
    """The compiler the build would use (Python's configured CC), if this machine has it."""
    configured = shlex.split(sysconfig.get_config_var("CC") or "cc")
    return shutil.which(os.environ.get("CC", configured[0]) if configured else "cc")


def _pure_env() -> dict:
    return {**os.environ, PURE_PYTHON_ENV: "1"}


def test_every_named_module_runs_on_the_path_the_run_asked_for():
    """Compiled where a C compiler exists; from its source in the pure run (COHORT_PURE_PYTHON=1)."""
    modules = [importlib.import_module(name) for name in COMPILED_MODULES]
    if pure_python_requested() or _c_compiler() is None:
        assert [m.__name__ for m in modules if is_extension(m.__file__)] == []
        return
    assert missing_compiled_modules() == [], (
        "compiled modules are missing although a C compiler exists: reinstall (pip install -e .) "
        "and read the build's warnings")


def test_the_switch_loads_the_sources_even_beside_extension_modules():
    code = ("import importlib; from cohort.protocol.compiled import COMPILED_MODULES as names; "
            "print('\\n'.join(importlib.import_module(n).__file__ for n in names))")
    done = subprocess.run([sys.executable, "-c", code], env=_pure_env(), capture_output=True, text=True,
                          timeout=120, check=True)
    files = done.stdout.split()
    assert len(files) == len(COMPILED_MODULES)
    assert all(f.endswith(".py") for f in files), files


def test_cohort_version_names_the_path_that_runs():
    cohort = [sys.executable, "-m", "cohort.coordinator.cli.main"]
    pure = subprocess.run([*cohort, "--version"], env=_pure_env(), capture_output=True, text=True, timeout=120)
    assert pure.returncode == 0, pure.stderr
    assert pure.stdout.strip().endswith(f"(request path: pure Python ({PURE_PYTHON_ENV}=1))")
    if not pure_python_requested() and not missing_compiled_modules():
        default = subprocess.run([*cohort, "--version"], capture_output=True, text=True, timeout=120)
        assert f"(request path: compiled (Cython, {len(COMPILED_MODULES)} modules))" in default.stdout


def test_a_server_names_the_path_it_runs_in_its_started_line(tmp_path):
    """COHORT_PURE_PYTHON is no setting (config refuses unknown COHORT_* variables): the server starts."""
    for pure in (True, False):
        log_file = tmp_path / f"cohort-{pure}.log"
        env = clean_env(**{PURE_PYTHON_ENV: "1"}) if pure else \
            {k: v for k, v in clean_env().items() if k != PURE_PYTHON_ENV}
        server = CohortServer(tmp_path / f"data-{pure}", "--log-file", str(log_file), "--log-format", "json",
                              env=env).start()
        try:  # (ready to serve comes a moment before the line that says so is written)
            (started,) = wait_until(lambda: [line for line in map(json.loads, log_file.read_text().splitlines())
                                             if line["msg"] == "cohort started"], 30, "the started line")
        finally:
            assert server.stop() == 0
        if pure:
            assert started["request_path"] == f"pure Python ({PURE_PYTHON_ENV}=1)"
        elif _c_compiler() is not None:
            assert started["request_path"] == f"compiled (Cython, {len(COMPILED_MODULES)} modules)"


def test_without_a_c_compiler_the_wheel_holds_the_sources_and_runs_them(tmp_path):
    """A machine without a compiler still installs: every module is left out of the compiled set
    (a warning each), the wheel carries the .py files, and the pure path runs."""
    root = Path(__file__).resolve().parents[1]
    context = tmp_path / "context"
    context.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(root / name, context / name)
    for folder in ("protocol", "coordinator", "client"):
        shutil.copytree(root / folder, context / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "--no-index",
         "--wheel-dir", str(tmp_path / "wheels"), str(context)],
        env={**os.environ, "CC": "/bin/false"}, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    for name in COMPILED_MODULES:
        assert f"warning: {name} not compiled" in built.stdout + built.stderr, name
    (wheel,) = (tmp_path / "wheels").glob("cohort-*.whl")
    installed = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(installed)
    assert not [n for n in names if n.endswith(".so")]
    assert {name.replace(".", "/") + ".py" for name in COMPILED_MODULES} <= set(names)

    # -S: no site-packages .pth files, so no editable install's finder; the dependencies stay on the path
    path = [str(installed), *(p for p in sys.path if p)]
    code = f"import sys; sys.path[:] = {path!r}; from cohort.protocol.compiled import running_path; print(running_path())"
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_ENV}
    ran = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "pure Python (no compiled modules installed)"


def test_extension_modules_the_list_does_not_name_are_found(tmp_path):
    """What the in-place build removes: extensions beside sources whose module `COMPILED_MODULES` no longer names."""
    from importlib.machinery import EXTENSION_SUFFIXES
    from cohort.protocol.compiled import unlisted_extensions
    suffix = EXTENSION_SUFFIXES[0]
    listed = tmp_path / "coordinator" / "server" / f"connection{suffix}"
    stale = tmp_path / "coordinator" / "groups" / "offsets" / f"manager{suffix}"
    source = tmp_path / "coordinator" / "groups" / "offsets" / "manager.py"
    other_python = tmp_path / "coordinator" / "server" / "connection.cpython-399-x86_64-linux-gnu.so"
    for path in (listed, stale, source, other_python):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    # (a listed module built for another Python stays: the other versions' installs share the tree)
    assert unlisted_extensions({"cohort.coordinator": tmp_path / "coordinator"}) == [stale]
