"""The README's CLI: the command `./scripts/serve` installs is where the README says, and every `cohort …`
command its examples name exists (its --help answers)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def test_the_readme_says_where_the_cli_is_after_scripts_serve():
    assert ".venv/bin/cohort" in README and "source .venv/bin/activate" in README
    assert (REPO / ".venv" / "bin" / "cohort").exists()  # what ./scripts/serve installs (and the tests run)


def test_every_cohort_command_the_readme_shows_exists():
    commands = set()
    for block in re.findall(r"```sh\n(.*?)```", README, flags=re.S):
        for line in block.splitlines():
            words = line.split("#")[0].split()
            if words[:1] == ["cohort"] and len(words) > 2 and re.fullmatch(r"[a-z-]+", words[1]):
                sub = [w for w in words[2:4] if re.fullmatch(r"[a-z][a-z-]*", w)]
                commands.add(tuple(words[1:2] + sub[:1]))
    assert ("topics", "end-offsets") in commands and ("groups", "describe") in commands
    for command in sorted(commands):
        done = subprocess.run([str(REPO / ".venv" / "bin" / "cohort"), *command, "--help"], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0 and "usage: cohort " + " ".join(command) in done.stdout, (command, done.stderr)
