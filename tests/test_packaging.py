"""The wheel installs our code under one `cohort.` namespace: a user's own modules can't shadow it."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_installed_under_the_cohort_namespace():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {
        "cohort." + ".".join(init.parent.relative_to(REPO).parts)
        for top in ("coordinator", "protocol", "client")
        for init in (REPO / top).rglob("__init__.py")
    }
    assert set(setuptools["packages"]) == folders
    assert setuptools["package-dir"] == {f"cohort.{top}": top for top in ("coordinator", "protocol", "client")}


def test_a_users_own_protocol_and_client_modules_do_not_shadow_cohorts(tmp_path):
    (tmp_path / "protocol.py").write_text("NAME = 'the user s protocol'\n")
    (tmp_path / "client.py").write_text("NAME = 'the user s client'\n")
    script = tmp_path / "app.py"
    script.write_text(
        "import protocol, client\n"
        "from cohort.client.blocking import BlockingAdmin\n"
        "from cohort.coordinator.cli.main import main\n"
        "print(protocol.NAME, '|', client.NAME, '|', BlockingAdmin.__module__)\n"
    )
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "the user s protocol | the user s client | cohort.client.blocking"
