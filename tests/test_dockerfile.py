"""Keep the Dockerfile honest without a Docker engine.

Every file it copies exists and survives .dockerignore, every command it runs
exists, the copied context builds the wheel, and its ENTRYPOINT (with its ENV)
serves /health — checked by its own HEALTHCHECK command — and exits 0 on
SIGTERM when run outside a container.
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from cohort_process import free_ports
from cohort.protocol.compiled import COMPILED_MODULES

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
SHELL_BUILTINS = {"cd", "export", "set", "true", "false", "echo", "test", "[", ":"}


@dataclass
class Instruction:
    keyword: str
    args: str


def parse_dockerfile(text: str) -> list[Instruction]:
    instructions, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comments inside a continued instruction are dropped by Docker too
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip()))
    assert not pending, "Dockerfile ends inside a continued line"
    return instructions


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    out: list[list[Instruction]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            out.append([])
        assert out, f"{ins.keyword} before FROM"
        out[-1].append(ins)
    return out


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def env_of(stage: list[Instruction]) -> dict[str, str]:
    env = {}
    for ins in stage:
        if ins.keyword == "ENV":
            for token in shlex.split(ins.args):
                key, sep, value = token.partition("=")
                assert sep, f"ENV uses the key=value form: {token}"
                env[key] = value
    return env


def dockerignore_patterns() -> list[str]:
    path = ROOT / ".dockerignore"
    return [l.strip() for l in path.read_text().splitlines() if l.strip() and not l.startswith("#")]


def ignored(relative: str, patterns: list[str]) -> bool:
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.lstrip("!").strip("/")
        parts = relative.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pat) or fnmatch.fnmatch(p, pat.replace("**/", "")) for p in prefixes):
            result = not negate
    return result


@pytest.fixture(scope="module")
def dockerfile() -> list[list[Instruction]]:
    return stages(parse_dockerfile(DOCKERFILE.read_text()))


def test_image_is_slim_python_311_multi_stage_non_root(dockerfile):
    for stage in dockerfile:
        assert re.match(r"python:3\.11(\.\d+)?-slim", stage[0].args.split()[0]), stage[0].args
    final = dockerfile[-1]
    users = [ins.args for ins in final if ins.keyword == "USER"]
    assert users and users[-1] not in ("root", "0"), "the server must not run as root"
    created = " ".join(ins.args for ins in final if ins.keyword == "RUN")
    assert f"useradd" in created and users[-1].split(":")[0] in created.split()


def test_data_volume_ports_and_healthcheck_are_declared(dockerfile):
    final = dockerfile[-1]
    volumes = [v for ins in final if ins.keyword == "VOLUME" for v in exec_form(ins.args)]
    assert "/data" in volumes
    ports = {p for ins in final if ins.keyword == "EXPOSE" for p in ins.args.split()}
    assert {"9092", "9464"} <= ports
    (health,) = [ins for ins in final if ins.keyword == "HEALTHCHECK"]
    assert " CMD " in f" {health.args} "
    entry = exec_form([ins for ins in final if ins.keyword == "ENTRYPOINT"][-1].args)
    assert entry[:2] == ["cohort", "serve"]
    assert "0.0.0.0:9092" in entry and "/data" in entry
    assert "COHORT_ADVERTISED_LISTENERS" in env_of(final), "the advertised address must be overridable by env"


def test_every_copied_path_exists_and_is_not_dockerignored(dockerfile):
    patterns = dockerignore_patterns()
    for stage in dockerfile:
        for ins in stage:
            if ins.keyword not in ("COPY", "ADD") or ins.args.startswith("--from"):
                continue
            *sources, _dest = shlex.split(ins.args)
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: missing from the build context"
                assert not ignored(source, patterns), f"COPY {source}: excluded by .dockerignore"


def test_every_command_the_dockerfile_runs_exists(dockerfile):
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])
    commands = []
    for stage in dockerfile:
        for ins in stage:
            if ins.keyword == "RUN":
                for piece in re.split(r"&&|\|\||;|\|", ins.args):
                    words = [w for w in shlex.split(piece) if "=" not in w.split("/")[0]]
                    if words:
                        commands.append(words)
            elif ins.keyword == "HEALTHCHECK":
                commands.append(exec_form(ins.args.split(" CMD ", 1)[1]))
            elif ins.keyword in ("ENTRYPOINT", "CMD"):
                commands.append(exec_form(ins.args))
    assert commands
    for words in commands:
        program = words[0]
        if program in SHELL_BUILTINS:
            continue
        if program == "python":
            program = sys.executable
        elif program == "cohort":
            program = str(Path(sys.executable).with_name("cohort"))
        assert shutil.which(program, path=path), f"{words[0]} (used by the Dockerfile) not found"
        if words[:3] == ["python", "-m", "pip"]:
            subprocess.run([sys.executable, "-m", "pip", "--version"], check=True, capture_output=True, timeout=60)


def test_copied_context_builds_the_wheel_with_the_cohort_script(dockerfile, tmp_path):
    """What stage one does (`pip wheel .`), on exactly the files it copies."""
    context = tmp_path / "context"
    context.mkdir()
    patterns = dockerignore_patterns()
    for ins in dockerfile[0]:
        if ins.keyword == "COPY":
            *sources, _ = shlex.split(ins.args)
            for source in sources:
                src = ROOT / source
                if src.is_dir():
                    shutil.copytree(
                        src, context / source,
                        ignore=lambda d, names: [n for n in names if ignored(
                            str((Path(d) / n).relative_to(ROOT)), patterns)],
                    )
                else:
                    shutil.copy2(src, context / source)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--wheel-dir", str(tmp_path / "wheels"), str(context)],
        capture_output=True, text=True, timeout=600,  # it compiles the request path (setup.py)
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (wheel,) = (tmp_path / "wheels").glob("cohort-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert "cohort/coordinator/cli/main.py" in names and "cohort/coordinator/server/node.py" in names
        assert {f"cohort/coordinator/console/static/{f}" for f in ("index.html", "console.js", "console.css")} <= set(names)
        assert not any(name.startswith(("coordinator/", "protocol/", "client/")) for name in names)
        if shutil.which("gcc"):  # the image's build stage installs it: the wheel carries both paths
            for module in COMPILED_MODULES:
                path = module.replace(".", "/")
                assert f"{path}.py" in names, module
                assert any(n.startswith(f"{path}.") and n.endswith(".so") for n in names), f"{module} not compiled"
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "cohort = cohort.coordinator.cli.main:main" in archive.read(entry_points).decode()


def test_entrypoint_serves_health_and_stops_cleanly_outside_a_container(dockerfile, tmp_path):
    final = dockerfile[-1]
    entry = exec_form([ins for ins in final if ins.keyword == "ENTRYPOINT"][-1].args)
    health = exec_form([ins for ins in final if ins.keyword == "HEALTHCHECK"][-1].args.split(" CMD ", 1)[1])
    port, metrics_port = free_ports(2)
    data_dir = tmp_path / "data"

    def localise(word: str) -> str:
        """Same command, but a temp data dir and free ports instead of the container's."""
        return (word.replace("/data", str(data_dir)).replace(":9092", f":{port}")
                .replace(":9464", f":{metrics_port}"))

    entry = [str(Path(sys.executable).with_name("cohort"))] + [localise(w) for w in entry[1:]]
    health = [sys.executable] + health[1:]  # as Docker runs it: in the container's environment
    env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    env.update({k: localise(v) for k, v in env_of(final).items()})
    env["COHORT_METRICS_LISTEN"] = f"127.0.0.1:{metrics_port}"
    env["COHORT_GROUP_INITIAL_REBALANCE_DELAY_MS"] = "0"

    log_path = tmp_path / "stderr"
    with open(log_path, "w") as stderr:
        server = subprocess.Popen(entry, env=env, stdout=subprocess.DEVNULL, stderr=stderr, cwd=tmp_path)
        try:
            deadline = time.monotonic() + 60
            while True:
                assert server.poll() is None, f"entrypoint exited {server.returncode}: {log_path.read_text()}"
                if subprocess.run(health, env=env, capture_output=True, timeout=10).returncode == 0:
                    break
                assert time.monotonic() < deadline, "HEALTHCHECK never passed: " + log_path.read_text()
                time.sleep(0.1)
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass  # the Kafka listener accepts on 0.0.0.0
            server.send_signal(signal.SIGTERM)
            assert server.wait(30) == 0, log_path.read_text()
        finally:
            if server.poll() is None:
                server.kill()
                server.wait(10)
    assert (data_dir / ".lock").exists()
    assert "Traceback" not in log_path.read_text()
