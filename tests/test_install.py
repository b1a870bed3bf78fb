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


def test_a_finished_build_does_not_look_changed_to_the_next_install(tmp_path):
    """The build writes protocol/_generated_codecs.py; the next install must not take it for a change of the
    sources (it ran step 2 again, for every extra added later), while a changed source is one."""
    tree = tmp_path / "tree"
    archive = subprocess.run(["git", "archive", "HEAD", "pyproject.toml", "setup.py", "protocol", "coordinator"],
                             cwd=REPO, capture_output=True, timeout=60, check=True).stdout
    tree.mkdir()
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, timeout=60, check=True)

    def fingerprint(what: str) -> str:
        done = subprocess.run([sys.executable, str(REPO / "scripts" / "install_fingerprint.py"), what], cwd=tree,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    before = fingerprint("build"), fingerprint("deps")
    (tree / "protocol" / "_generated_codecs.py").write_text("# what the build generates\n")
    assert (fingerprint("build"), fingerprint("deps")) == before
    framing = tree / "protocol" / "framing.py"
    framing.write_text(framing.read_text() + "\n# changed\n")
    assert fingerprint("build") != before[0] and fingerprint("deps") == before[1]


def test_an_in_place_build_removes_the_extension_of_a_module_no_longer_compiled():
    """An extension module whose name left `COMPILED_MODULES` would shadow its `.py` (edits to the source
    would change nothing): the editable install's in-place build removes it, and keeps the listed ones."""
    from importlib.machinery import EXTENSION_SUFFIXES
    stale = REPO / "coordinator" / "groups" / f"no_longer_compiled{EXTENSION_SUFFIXES[0]}"
    stale.write_bytes(b"not a module")
    try:
        done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=REPO,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert not stale.exists(), done.stderr
        assert f"{stale.relative_to(REPO)}: removed" in done.stderr
        built = [p for folder in ("protocol", "coordinator") for p in (REPO / folder).rglob(f"*{EXTENSION_SUFFIXES[0]}")]
        assert len(built) == len(MODULES), built  # (the listed ones stay)
    finally:
        stale.unlink(missing_ok=True)
