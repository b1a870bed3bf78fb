"""TLS for SSL and SASL_SSL listeners: the server's `ssl.SSLContext` and the principal a client certificate names.

TLS 1.2 is the minimum. The keystore is a PEM file holding the private key and
the certificate chain (Kafka's ``ssl.keystore.type=PEM``); the truststore is a
PEM file of CA certificates, used to check client certificates when
``ssl.client.auth`` is ``requested`` or ``required`` (on SSL listeners; SASL_SSL
clients authenticate with SASL, as in Kafka since KIP-684). On an SSL listener a
client that presented a certificate is ``User:<subject>`` with the subject
written as Java writes an X.500 name (RFC 2253: most specific part first,
``CN=alice,OU=eng,O=example``); without one it is ``User:ANONYMOUS``.
"""
from __future__ import annotations

import ssl

from cohort.coordinator.config import ConfigError, CoordinatorConfig

ANONYMOUS = "User:ANONYMOUS"
_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
# RFC 2253 short names, as Java's X500Principal.getName() prints them
_SHORT_NAMES = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "localityName": "L",
                "stateOrProvinceName": "ST", "countryName": "C", "streetAddress": "STREET",
                "domainComponent": "DC", "userId": "UID"}


def server_context(config: CoordinatorConfig, protocol: str = "SSL") -> ssl.SSLContext:
    """The context an SSL or SASL_SSL listener serves with; ConfigError (one line) if unusable.

    Like Kafka (KIP-684), ``ssl.client.auth`` applies to SSL listeners; a SASL_SSL client
    authenticates with SASL and is not asked for a certificate.
    """
    if config.ssl_keystore_location is None:
        raise ConfigError("ssl.keystore.location must be set for SSL and SASL_SSL listeners")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    location = config.ssl_keystore_location
    asked = []

    def key_password() -> str:
        # Always a callback: given no password, OpenSSL would ask for one on the terminal and wait.
        asked.append(True)
        if not config.ssl_key_password:
            raise ConfigError(f"ssl.keystore.location: the private key in {location} is encrypted; "
                              "set ssl.key.password")
        return config.ssl_key_password
    try:
        context.load_cert_chain(str(location), password=key_password)
    except FileNotFoundError:
        raise ConfigError(f"ssl.keystore.location: {location} does not exist") from None
    except (ssl.SSLError, OSError, ValueError) as exc:
        if asked and config.ssl_key_password and isinstance(exc, ssl.SSLError):
            raise ConfigError(f"ssl.key.password does not decrypt the private key in {location} "
                              f"(wrong password)") from None
        raise ConfigError(f"ssl.keystore.location: cannot load the key and certificate chain from "
                          f"{location} ({_reason(exc)})") from None
    if config.ssl_truststore_location is not None:
        try:
            context.load_verify_locations(cafile=str(config.ssl_truststore_location))
        except FileNotFoundError:
            raise ConfigError(f"ssl.truststore.location: {config.ssl_truststore_location} does not exist") from None
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise ConfigError(f"ssl.truststore.location: cannot load CA certificates from "
                              f"{config.ssl_truststore_location} ({_reason(exc)})") from None
    context.verify_mode = _VERIFY[config.ssl_client_auth] if protocol == "SSL" else ssl.CERT_NONE
    return context


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__


def certificate_principal(peer_certificate: dict | None) -> str:
    """``User:<RFC 2253 subject>`` of a verified client certificate, or ``User:ANONYMOUS``."""
    if not peer_certificate or not peer_certificate.get("subject"):
        return ANONYMOUS
    parts = []
    for rdn in reversed(peer_certificate["subject"]):  # Python lists the subject most general first
        parts.append("+".join(f"{_SHORT_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return "User:" + ",".join(parts)


def _escape(value: str) -> str:
    out = "".join("\\" + ch if ch in ',+"\\<>;=' else ch for ch in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out
