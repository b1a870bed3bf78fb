"""An encrypted TLS key: `cohort serve` never lets OpenSSL ask for its password on the terminal; a missing or
wrong ``ssl.key.password`` is one line and a failed start. Run on a pseudo-terminal, where OpenSSL would ask."""
from __future__ import annotations

import fcntl
import os
import pty
import select
import subprocess
import termios
import time

import pytest

from cohort_process import clean_env, cohort_command, free_ports

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def encrypted_keystore(tmp_path_factory):
    d = tmp_path_factory.mktemp("encrypted")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-keyout", "key.pem", "-out", "cert.pem",
                    "-days", "2", "-subj", "/CN=localhost", "-passout", "pass:key-secret"],
                   cwd=d, check=True, capture_output=True, timeout=60)
    keystore = d / "server.pem"
    keystore.write_text((d / "key.pem").read_text() + (d / "cert.pem").read_text())
    assert "ENCRYPTED" in keystore.read_text()
    return keystore


def serve_on_a_terminal(tmp_path, keystore, *settings: str, within: float = 20.0) -> tuple[int | None, str]:
    """Start `cohort serve` with a pseudo-terminal as its controlling terminal and stdio: (exit code, or
    None if it was still running after `within` seconds, and everything it wrote)."""
    port, metrics = free_ports(2)
    command = cohort_command("serve", "--data-dir", str(tmp_path / "data"), "--metrics", f"127.0.0.1:{metrics}",
                             "--listeners", f"SSL://127.0.0.1:{port}", "--ssl.keystore.location", str(keystore),
                             *settings)
    controller, terminal = pty.openpty()

    def take_the_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    process = subprocess.Popen(command, stdin=terminal, stdout=terminal, stderr=terminal, env=clean_env(),
                               start_new_session=True, preexec_fn=take_the_terminal)
    os.close(terminal)
    output = b""
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline and process.poll() is None:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if ready:
                try:
                    output += os.read(controller, 4096)
                except OSError:
                    break
        try:
            code = process.wait(timeout=max(0.0, deadline - time.monotonic()) + 1)
        except subprocess.TimeoutExpired:
            code = None  # still waiting (on the terminal, say)
        return code, output.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        os.close(controller)


def test_an_encrypted_key_without_its_password_is_one_line_never_a_terminal_prompt(tmp_path, encrypted_keystore):
    code, output = serve_on_a_terminal(tmp_path, encrypted_keystore)
    assert "PEM pass phrase" not in output
    assert code not in (0, None), output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "set ssl.key.password" in lines[0], output


def test_a_wrong_key_password_says_so_in_one_line(tmp_path, encrypted_keystore):
    code, output = serve_on_a_terminal(tmp_path, encrypted_keystore, "--ssl.key.password", "not-the-secret")
    assert code not in (0, None), output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "ssl.key.password does not decrypt" in lines[0] and "wrong password" in lines[0]
    assert "not-the-secret" not in output
