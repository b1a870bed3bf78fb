"""A throwaway certificate authority made with `openssl` inside the test run: a CA, a server
certificate for localhost / 127.0.0.1 and a client certificate, all PEM."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TestCA:
    ca: Path  # the CA certificate (clients' truststore, the server's ssl.truststore.location)
    server: Path  # the server's private key + certificate chain (ssl.keystore.location)
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def make_ca(directory: Path) -> TestCA:
    d = directory
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=Cohort Test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    for name, subject, usage, san in (
        ("server", "/CN=localhost", "serverAuth", "subjectAltName=DNS:localhost,IP:127.0.0.1\n"),
        ("client", "/O=Cohort Tests/OU=eng/CN=carol", "clientAuth", ""),
    ):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", subject, cwd=d)
        (d / f"{name}.ext").write_text(f"{san}basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                                       f"extendedKeyUsage={usage}\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
    (d / "server.pem").write_text((d / "server.key").read_text() + (d / "server.crt").read_text())
    return TestCA(d / "ca.pem", d / "server.pem", d / "client.crt", d / "client.key")
