"""Installing from a checkout: the Cython modules are built once per checkout and reused while their sources
do not change (setup.py's build/ext-cache), and `scripts/install` does nothing when nothing changed."""
from __future__ import annotations

import runpy
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODULES = runpy.run_path(str(REPO / "protocol" / "compiled.py"))["COMPILED_MODULES"]


def build_ext(into: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(into)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def test_a_build_from_unchanged_sources_reuses_every_compiled_module(tmp_path):
    first = build_ext(tmp_path / "first")  # compiles what this checkout never compiled (in CI: nothing)
    assert first.returncode == 0, first.stderr
    started = time.monotonic()
    second = build_ext(tmp_path / "second")
    assert second.returncode == 0, second.stderr
    reused = {line.split(":")[0] for line in second.stderr.splitlines() if "reusing the module compiled before" in line}
    assert reused == set(MODULES), second.stderr
    built = sorted(p.name for p in (tmp_path / "second").rglob("*.so"))
    assert len(built) == len(MODULES), built
    assert time.monotonic() - started < 60  # copies, not a compiler run (which takes minutes on 2 cores)


def test_scripts_install_does_nothing_when_nothing_changed():
    done = subprocess.run([str(REPO / "scripts" / "install")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr  # (its steps may run once: a venv made by hand lacks the stamps)
    again = subprocess.run([str(REPO / "scripts" / "install")], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "step" not in again.stderr, again.stderr
    assert again.stderr.strip().splitlines()[-1].startswith("scripts/install: Cohort is installed in ./.venv (cohort ")
