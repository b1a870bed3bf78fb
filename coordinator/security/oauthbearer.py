"""SASL/OAUTHBEARER (KIP-255, RFC 7628): a JWT checked against keys from a JWKS file.

Kafka's broker-side settings, with Kafka's names and meanings:

* ``sasl.oauthbearer.jwks.endpoint.url`` -- where the verification keys are; Kafka accepts a ``file://``
  URL there, and that is what Cohort reads (the file is read again when it changes, so rotating keys
  needs no restart);
* ``sasl.oauthbearer.expected.audience`` -- comma-separated; when set, the token's ``aud`` must name one;
* ``sasl.oauthbearer.expected.issuer`` -- when set, the token's ``iss`` must be it;
* ``sasl.oauthbearer.sub.claim.name`` -- the claim naming the principal (default ``sub``): ``User:<it>``;
* ``sasl.oauthbearer.clock.skew.seconds`` -- leeway on ``exp``/``nbf``/``iat`` (default 30).

A token must be signed with an asymmetric algorithm by a key of the set (by ``kid`` when the token names
one), carry ``exp`` and the principal claim, and be unexpired. Its expiry bounds the SASL session when
re-authentication is on (`cohort.coordinator.security.sasl`). PyJWT (with `cryptography`) does the
checking: ``pip install 'cohort[oauthbearer]'``.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from cohort.coordinator.config import parse_file_url

# Kafka (jose4j) accepts RSA and EC signatures; never "none" nor a shared-secret HMAC.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")


class InvalidToken(Exception):
    """Why a token is refused (never contains the token)."""


def parse_client_response(token: bytes) -> str:
    """The bearer token of an RFC 7628 client initial response (``n,[a=authzid],^Aauth=Bearer T^A^A``)."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidToken("the client response is not UTF-8") from None
    header, sep, rest = text.partition("\x01")
    if not sep or not header.startswith("n,") or not header.endswith(",") or not rest.endswith("\x01\x01"):
        raise InvalidToken("the client response is not an OAUTHBEARER initial response")
    fields = dict(item.partition("=")[::2] for item in rest[:-2].split("\x01") if item)
    scheme, _, bearer = fields.get("auth", "").partition(" ")
    if scheme.lower() != "bearer" or not bearer.strip():
        raise InvalidToken("the client response carries no bearer token")
    return bearer.strip()


@dataclass(frozen=True, slots=True)
class ValidToken:
    principal_name: str
    expires_at: float  # seconds since the epoch


class JwtValidator:
    """Checks bearer tokens with the keys of a JWKS file and Kafka's expected-claims settings."""

    def __init__(self, jwks_url: str, audience: tuple[str, ...] = (), issuer: str | None = None,
                 sub_claim_name: str = "sub", clock_skew_s: int = 30, clock: Callable[[], float] = time.time) -> None:
        import jwt  # the `oauthbearer` extra; config refuses OAUTHBEARER without it

        self._jwt = jwt
        self.path = parse_file_url(jwks_url)
        self.audience = audience
        self.issuer = issuer
        self.sub_claim_name = sub_claim_name
        self.clock_skew_s = clock_skew_s
        self._clock = clock
        self._keys: dict[str | None, object] = {}
        self._stamp: tuple[int, int] | None = None
        self._load()  # a missing or unreadable file fails at start-up, not at the first client

    def _load(self) -> None:
        stat = os.stat(self.path)
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        try:
            keys = self._jwt.PyJWKSet.from_json(self.path.read_text(encoding="utf-8")).keys
        except (self._jwt.PyJWTError, json.JSONDecodeError, ValueError) as exc:
            raise ValueError(f"{self.path}: not a usable JWKS ({exc})") from None
        self._keys = {k.key_id: k for k in keys}
        self._stamp = stamp

    def _key_for(self, kid: str | None):
        try:
            self._load()
        except (OSError, ValueError):
            pass  # keep the keys read last (a file being rewritten, or removed by mistake)
        if kid is not None:
            key = self._keys.get(kid)
            if key is None:
                raise InvalidToken(f"no key with kid {kid!r} in the JWKS")
            return key
        if len(self._keys) != 1:
            raise InvalidToken("the token names no kid and the JWKS holds more than one key")
        return next(iter(self._keys.values()))

    def validate(self, token: str) -> ValidToken:
        jwt = self._jwt
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken("malformed JWT") from None
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise InvalidToken(f"signature algorithm {algorithm!r} is not accepted")
        key = self._key_for(header.get("kid"))
        try:
            claims = jwt.decode(
                token, key.key, algorithms=[algorithm], audience=list(self.audience) or None,
                issuer=self.issuer or None, leeway=self.clock_skew_s,
                options={"require": ["exp", self.sub_claim_name], "verify_aud": bool(self.audience)})
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"{type(exc).__name__}: {exc}") from None
        subject = claims.get(self.sub_claim_name)
        if not isinstance(subject, str) or not subject:
            raise InvalidToken(f"claim {self.sub_claim_name!r} is not a non-empty string")
        return ValidToken(subject, float(claims["exp"]))

    def remaining_s(self, valid: ValidToken) -> float:
        return valid.expires_at - self._clock()
