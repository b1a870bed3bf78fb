"""How the client secures its connections: TLS and SASL (PLAIN, SCRAM-SHA-256/512), from Kafka client properties.

`ClientSecurity.from_properties` reads the file admin tools take as
``--command-config`` (``kafka-*.sh`` conventions): ``security.protocol``,
``sasl.mechanism``, the credentials either in ``sasl.jaas.config``
(``… required username="alice" password="…";``) or as librdkafka's
``sasl.username`` / ``sasl.password``, and for TLS a PEM CA file
(``ssl.truststore.location`` with ``ssl.truststore.type=PEM``, or librdkafka's
``ssl.ca.location``), an optional client certificate and key
(``ssl.keystore.location`` PEM holding both, or ``ssl.certificate.location`` +
``ssl.key.location``) and ``ssl.endpoint.identification.algorithm`` (empty
turns host name checking off). The SCRAM exchange is run by `scramp`.
The password is never part of a repr, a log line or an error message.
"""
from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from cohort.client.errors import kafka_error
from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL")

    @classmethod
    def from_properties(cls, path: str | Path) -> "ClientSecurity":
        """Read a Kafka client properties file; ValueError (one line, no secret) if it is unusable."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read --command-config {path}: {exc.strerror or exc}") from None
        return cls.from_mapping(parse_properties(text), str(path))

    @classmethod
    def from_mapping(cls, props: dict[str, str], where: str = "client properties") -> "ClientSecurity":
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"{where}: security.protocol must be one of {', '.join(SECURITY_PROTOCOLS)}")
        mechanism = props.get("sasl.mechanism", "GSSAPI" if protocol.startswith("SASL") else "PLAIN").strip().upper()
        username, password = props.get("sasl.username"), props.get("sasl.password")
        jaas = props.get("sasl.jaas.config")
        if jaas:
            options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(jaas)}
            username, password = options.get("username", username), options.get("password", password)
        if protocol.startswith("SASL"):
            if mechanism not in MECHANISMS:
                raise ValueError(f"{where}: sasl.mechanism must be one of {', '.join(MECHANISMS)}")
            if not username or password is None:
                raise ValueError(f"{where}: SASL needs a username and password (sasl.jaas.config, or "
                                 f"sasl.username and sasl.password)")
        context = _ssl_context(props, where) if protocol.endswith("SSL") else None
        return cls(protocol, mechanism, username, password, context)

    def plain_authzid(self, conn) -> str:
        """The PLAIN authorization id: none (the server takes the user name)."""
        return ""

    async def authenticate(self, conn, timeout_ms: int) -> int:
        """Run the SASL exchange on a freshly connected (and version-negotiated) connection, or again on an
        authenticated one (KIP-368); returns the session lifetime the server gave (ms, 0 = no limit)."""
        handshake = await conn.send_raw(SaslHandshakeRequest(mechanism=self.mechanism), 1, timeout_ms)
        if handshake.error_code:
            raise kafka_error(handshake.error_code, f"the server offers {', '.join(handshake.mechanisms) or 'no'} "
                                                    f"SASL mechanism(s), not {self.mechanism}")
        version = conn.version_for(SaslAuthenticateRequest.API_KEY)

        lifetime_ms = 0

        async def step(token: bytes) -> bytes:
            nonlocal lifetime_ms
            response = await conn.send_raw(SaslAuthenticateRequest(auth_bytes=token), version, timeout_ms)
            if response.error_code:
                raise kafka_error(response.error_code, response.error_message or "")
            lifetime_ms = response.session_lifetime_ms
            return response.auth_bytes

        if self.mechanism == "PLAIN":
            await step(self.plain_authzid(conn).encode() + b"\x00" + self.username.encode() + b"\x00"
                       + self.password.encode())
            return lifetime_ms
        import scramp  # here, not at the top: scramp and asn1crypto take ~13 ms to import, PLAIN never needs them

        client = scramp.ScramClient([self.mechanism], self.username, self.password)
        server_first = await step(client.get_client_first().encode())
        client.set_server_first(server_first.decode())
        server_final = await step(client.get_client_final().encode())
        try:
            client.set_server_final(server_final.decode())
        except scramp.ScramException:
            raise kafka_error(ErrorCode.SASL_AUTHENTICATION_FAILED,
                              "the server could not prove it knows the credential") from None
        return lifetime_ms


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties: ``key=value`` / ``key: value`` lines, ``#``/``!`` comments, ``\\`` continuations."""
    props: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        match = re.match(r"([^=:\s]+)\s*(?:[=:\s]\s*(.*))?$", logical)
        if match:
            props[match.group(1)] = (match.group(2) or "").strip()
        logical = ""
    return props


def _ssl_context(props: dict[str, str], where: str) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    ca = props.get("ssl.truststore.location") or props.get("ssl.ca.location")
    for name in ("ssl.truststore.type", "ssl.keystore.type"):
        if props.get(name, "PEM").upper() != "PEM":
            raise ValueError(f"{where}: only {name}=PEM is supported")
    asked = []

    def key_password() -> str:
        # Always a callback: given no password, OpenSSL would ask for one on the terminal and wait.
        asked.append(True)
        if not props.get("ssl.key.password"):
            raise ValueError(f"{where}: the private key is encrypted; set ssl.key.password")
        return props["ssl.key.password"]
    try:
        if ca:
            context.load_verify_locations(cafile=ca)
        keystore = props.get("ssl.keystore.location")
        certificate = props.get("ssl.certificate.location")
        if keystore:
            context.load_cert_chain(keystore, password=key_password)
        elif certificate:
            context.load_cert_chain(certificate, props.get("ssl.key.location"), password=key_password)
    except ssl.SSLError as exc:
        if asked:
            raise ValueError(f"{where}: ssl.key.password does not decrypt the private key (wrong password)") from None
        raise ValueError(f"{where}: cannot load TLS files: {exc}") from None
    except OSError as exc:
        raise ValueError(f"{where}: cannot load TLS files: {getattr(exc, 'strerror', None) or exc}") from None
    if props.get("ssl.endpoint.identification.algorithm", "https").strip() == "":
        context.check_hostname = False
    return context
