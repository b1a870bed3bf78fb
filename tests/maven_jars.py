"""Jars from Maven Central for the tests that run Apache Kafka's and Spark's own Java code as peers.

`maven_jars(pom)` runs ``mvn dependency:copy-dependencies`` of a small pom kept under ``tests/`` into a
cache folder keyed by the pom's content (``~/.cache/cohort-tests/jars/<name>-<digest>``, or under
``$COHORT_TEST_JARS``): the first run downloads into ``~/.m2`` and copies, every later run with the same pom
reuses the folder without starting Maven. A missing ``mvn`` or a failed resolution is an error, never a
skip: these peers are part of what CI proves (``scripts/test`` installs Maven and a JDK).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CACHE_ROOT = Path(os.environ.get("COHORT_TEST_JARS") or Path.home() / ".cache" / "cohort-tests" / "jars")
COMPLETE = ".complete"


class MavenError(RuntimeError):
    """Maven is missing or could not resolve a pom's dependencies."""


def maven_jars(pom: Path, *, name: str | None = None, timeout: float = 1200) -> list[Path]:
    """The dependency jars of `pom` (its whole runtime closure), from the cache or Maven."""
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    folder = CACHE_ROOT / f"{name or pom.parent.name}-{digest}"
    if not (folder / COMPLETE).exists():
        CACHE_ROOT.mkdir(parents=True, exist_ok=True)
        with open(CACHE_ROOT / f"{folder.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes resolving the same pom copy it once
            if not (folder / COMPLETE).exists():
                _copy_dependencies(pom, folder, timeout)
    jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise MavenError(f"{folder} holds no jar; remove it to resolve {pom} again")
    return jars


def _copy_dependencies(pom: Path, folder: Path, timeout: float) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError("mvn is not installed (apt-get install -y maven; scripts/test installs it)")
    staging = Path(tempfile.mkdtemp(prefix=f"{folder.name}.", dir=folder.parent))
    command = [mvn, "-B", "-q", "-f", str(pom), "dependency:copy-dependencies",
               f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise MavenError(f"{' '.join(command)} did not finish in {timeout:.0f}s") from exc
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise MavenError(f"{' '.join(command)} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-4000:]}")
    (staging / COMPLETE).write_text(pom.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)


if __name__ == "__main__":  # scripts/test: resolve before the suite runs, so no test waits on a download
    import sys

    for argument in sys.argv[1:]:
        print(f"{argument}: {len(maven_jars(Path(argument).resolve()))} jars")
