"""SASL authentication of one connection, as a sans-IO state machine (Kafka's SaslServerAuthenticator).

Theory of operation. A connection on a SASL listener starts UNAUTHENTICATED:
it may send ApiVersions (any number of times) and one SaslHandshake naming a
mechanism. A v1 handshake moves to AUTHENTICATING, where each SASL token
arrives in a SaslAuthenticate request and the answer's token goes back in its
response. A v0 handshake (old clients) moves to AUTHENTICATING_RAW: tokens
then travel as bare size-prefixed frames without any Kafka header, and so do
the answers. When the mechanism completes, the connection is AUTHENTICATED
with a principal ("User:<name>") and every API is served from then on.

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` > 0 a
successful authentication tells the client its session lifetime (for
OAUTHBEARER at most what is left of its token's lifetime); before it
ends the client sends SaslHandshake (v1, same mechanism) and SaslAuthenticate
again on the same connection (REAUTHENTICATING, other requests still served),
and must come back as the same principal. A request other than those two
after the session expired closes the connection.

Anything else closes the connection: a request other than ApiVersions /
SaslHandshake / SaslAuthenticate before authentication, a SaslAuthenticate
before a handshake (ILLEGAL_SASL_STATE), an unsupported mechanism
(UNSUPPORTED_SASL_MECHANISM, answered first). A failed authentication answers
SASL_AUTHENTICATION_FAILED (v1; v0 has no way to say it) and the caller closes
the connection after ``connection.failed.authentication.delay.ms``.

A PLAIN password check costs a PBKDF2 (8-12 ms at Kafka's iteration counts),
too long for the event loop: the exchange stops at a `SaslStep` whose `verify`
is that check, the caller runs it where it likes (`password_checks`: a bounded
pool, throttled per client address) and feeds the answer to `verified`, which
returns the step the exchange would have returned. SCRAM's server side only
hashes and HMACs what the credential holds, so it stays inline.

This module does no IO: the connection feeds it decoded requests or raw
tokens and carries out the returned `SaslStep`. It never logs, and no message
it makes contains a password, salt or key.
"""
from __future__ import annotations

import enum
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cohort.coordinator.security.console_sign_ins import CONSOLE_AUTHZID_PREFIX
from cohort.coordinator.security.credentials import CredentialStore, ScramMechanism
from cohort.coordinator.security.oauthbearer import InvalidToken, JwtValidator, parse_client_response
from cohort.protocol.errors import ErrorCode
from cohort.protocol.messages import (
    ApiVersionsRequest, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
)

PLAIN = "PLAIN"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
OAUTHBEARER = "OAUTHBEARER"
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS, OAUTHBEARER)
ANONYMOUS = "User:ANONYMOUS"


class SaslState(enum.Enum):
    UNAUTHENTICATED = "unauthenticated"
    AUTHENTICATING = "authenticating"  # SaslAuthenticate requests carry the tokens (handshake v1)
    AUTHENTICATING_RAW = "authenticating_raw"  # bare frames carry the tokens (handshake v0)
    AUTHENTICATED = "authenticated"
    REAUTHENTICATING = "reauthenticating"  # KIP-368: a new exchange on an authenticated connection
    FAILED = "failed"


# The legal transitions; anything else is a bug in this module and raises.
VALID_PREVIOUS_STATES: dict[SaslState, frozenset[SaslState]] = {
    SaslState.AUTHENTICATING: frozenset({SaslState.UNAUTHENTICATED}),
    SaslState.AUTHENTICATING_RAW: frozenset({SaslState.UNAUTHENTICATED}),
    SaslState.AUTHENTICATED: frozenset({SaslState.AUTHENTICATING, SaslState.AUTHENTICATING_RAW,
                                        SaslState.REAUTHENTICATING}),
    SaslState.REAUTHENTICATING: frozenset({SaslState.AUTHENTICATED}),
    SaslState.FAILED: frozenset({SaslState.UNAUTHENTICATED, SaslState.AUTHENTICATING, SaslState.AUTHENTICATING_RAW,
                                 SaslState.AUTHENTICATED,  # a re-authentication refused at its handshake
                                 SaslState.REAUTHENTICATING}),
}

_PRE_AUTH_APIS = frozenset({ApiVersionsRequest.API_KEY, SaslHandshakeRequest.API_KEY,
                            SaslAuthenticateRequest.API_KEY})


class AuthenticationFailed(Exception):
    """A mechanism refused the client; str() is the message the client is told (no secrets)."""


@dataclass(slots=True)
class SaslStep:
    """What the connection must do after feeding one request or raw token.

    * `serve`: pass the request on to the normal handlers (ApiVersions, or anything once authenticated);
    * `response`: answer with this message (in the request's version);
    * `raw_reply`: write these bytes as a bare size-prefixed frame (v0 flow);
    * `close`: close the connection after the answer; `delay_close`: wait
      ``connection.failed.authentication.delay.ms`` first (a failed authentication);
    * `outcome`: "success" / "failure" when an authentication just ended (for metrics), with `mechanism`;
    * `verify`: a password check to run off the event loop (nothing else happens until its answer is
      fed to `SaslAuthenticator.verified`); `user`: the name a client tried (for the audit line).
    """

    serve: bool = False
    response: Any = None
    raw_reply: bytes | None = None
    close: bool = False
    delay_close: bool = False
    reason: str = ""
    outcome: str | None = None
    mechanism: str | None = None
    reauthentication: bool = False  # the outcome is that of a re-authentication (KIP-368)
    verify: "PasswordCheck | None" = None
    user: str | None = None


@dataclass(frozen=True, slots=True)
class PasswordCheck:
    """A SASL/PLAIN password to check against the credential store (pure CPU: safe on any thread)."""

    credentials: Any = field(repr=False)
    user: str
    password: str = field(repr=False)
    console_proof: str = field(default="", repr=False)  # the console's authzid, checked by the connection

    def run(self) -> bool:
        return self.credentials.check_plain(self.user, self.password)


class _Plain:
    """RFC 4616: one token, ``authzid NUL authcid NUL password``; its password check is handed out (`PasswordCheck`)."""

    def __init__(self, credentials: CredentialStore) -> None:
        self._credentials = credentials
        self.user: str | None = None
        self.attempted_user: str | None = None

    def step(self, token: bytes) -> PasswordCheck:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        self.attempted_user = user or None
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if authzid.startswith(CONSOLE_AUTHZID_PREFIX):
            # the console's proof (`console_sign_ins`): the connection checks it against its addresses
            return PasswordCheck(self._credentials, user, password, authzid)
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username")
        return PasswordCheck(self._credentials, user, password)

    def checked(self, check: PasswordCheck, matches: bool) -> tuple[bytes, bool]:
        if not matches:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.user = check.user
        return b"", True


class _Scram:
    """RFC 5802 (run by `scramp`): client-first -> server-first, client-final -> server-final."""

    def __init__(self, name: str, credentials: CredentialStore) -> None:
        # Imported here: scramp and asn1crypto take ~13 ms to import, and most nodes never run SCRAM.
        import scramp

        self._name = name
        self._mechanism = ScramMechanism.from_name(name)
        self._credentials = credentials
        self._server = scramp.ScramMechanism(name).make_server(self._lookup)
        self._round = 0
        self.user: str | None = None
        self.attempted_user: str | None = None

    def _lookup(self, user: str):
        self.attempted_user = user
        credential, known = self._credentials.scram_credential(user, self._mechanism)
        self.user = user if known else None  # an unknown user fails at client-final, like a wrong password
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def step(self, token: bytes) -> tuple[bytes, bool]:
        import scramp

        failed = AuthenticationFailed(
            f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
            f"{self._name}")
        try:
            text = token.decode("utf-8")
            if self._round == 0:
                self._round = 1
                self._server.set_client_first(text)
                return self._server.get_server_first().encode("utf-8"), False
            if self._round == 1:
                self._round = 2
                self._server.set_client_final(text)
                if self.user is None:  # a made-up credential: no proof may pass it
                    raise failed
                return self._server.get_server_final().encode("utf-8"), True
        except (scramp.ScramException, UnicodeDecodeError, ValueError, TypeError, KeyError, IndexError):
            self.user = None
            raise failed from None
        raise failed


class _OAuthBearer:
    """RFC 7628 as Kafka's OAuthBearerSaslServer runs it: the client's one message carries a bearer token;
    a bad token is answered with an error challenge, the client acknowledges it (``\x01``), then it fails."""

    def __init__(self, validator: JwtValidator | None) -> None:
        self._validator = validator
        self._refused: str | None = None
        self.user: str | None = None
        self.lifetime_s: float | None = None  # what is left of the token's lifetime

    def step(self, token: bytes) -> tuple[bytes, bool]:
        if self._refused is not None:
            raise AuthenticationFailed(f"Authentication failed: {self._refused}")
        try:
            if self._validator is None:
                raise InvalidToken("no sasl.oauthbearer.jwks.endpoint.url is configured")
            valid = self._validator.validate(parse_client_response(token))
        except InvalidToken as exc:
            self._refused = str(exc)
            return json.dumps({"status": "invalid_token"}).encode(), False
        self.user, self.lifetime_s = valid.principal_name, self._validator.remaining_s(valid)
        return b"", True


class SaslAuthenticator:
    """The authentication state of one connection on a SASL listener."""

    def __init__(self, enabled_mechanisms: tuple[str, ...], credentials: CredentialStore,
                 max_reauth_ms: int = 0, clock: Callable[[], float] = time.monotonic,
                 oauthbearer: JwtValidator | None = None) -> None:
        """`max_reauth_ms`: Kafka's connections.max.reauth.ms (0: sessions never expire); `clock` in seconds;
        `oauthbearer`: what checks OAUTHBEARER tokens."""
        self.enabled_mechanisms = enabled_mechanisms
        self._oauthbearer = oauthbearer
        self._session_lifetime_ms = 0
        self._credentials = credentials
        self.max_reauth_ms = max_reauth_ms
        self._clock = clock
        self.session_expires_at: float | None = None  # clock time, when sessions expire
        self.state = SaslState.UNAUTHENTICATED
        self.principal: str | None = None
        self.mechanism: str | None = None
        self._exchange: _Plain | _Scram | _OAuthBearer | None = None
        self._pending: tuple[PasswordCheck, bool] | None = None  # a handed-out password check, and whether v0

    def _enter(self, state: SaslState) -> None:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise RuntimeError(f"illegal SASL state change {self.state.value} -> {state.value}")
        self.state = state

    @property
    def expects_raw_token(self) -> bool:
        """The next frame is a bare SASL token, not a Kafka request (after a v0 handshake)."""
        return self.state is SaslState.AUTHENTICATING_RAW

    @property
    def authenticated(self) -> bool:
        return self.state is SaslState.AUTHENTICATED

    def on_request(self, api_key: int, version: int, request: Any) -> SaslStep:
        state = self.state
        if state is SaslState.REAUTHENTICATING:
            if api_key == SaslAuthenticateRequest.API_KEY:
                return self._authenticate(request)
            if api_key == SaslHandshakeRequest.API_KEY:
                return self._handshake(version, request)  # a second one: illegal
            state = SaslState.AUTHENTICATED  # other requests are served meanwhile (until the session ends)
        if state is SaslState.AUTHENTICATED:
            if api_key == SaslHandshakeRequest.API_KEY:
                if self.max_reauth_ms > 0:
                    return self._reauthenticate(version, request)
                # Kafka's answer once authenticated when re-authentication is off
                return SaslStep(response=SaslHandshakeResponse(
                    error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=list(self.enabled_mechanisms)))
            if api_key == SaslAuthenticateRequest.API_KEY:
                return SaslStep(response=SaslAuthenticateResponse(
                    error_code=ErrorCode.ILLEGAL_SASL_STATE,
                    error_message="SaslAuthenticate request received after successful authentication",
                    auth_bytes=b""))
            if self.session_expires_at is not None and self._clock() >= self.session_expires_at:
                return SaslStep(close=True, reason="SASL session expired without re-authentication "
                                                   "(connections.max.reauth.ms)")
            return SaslStep(serve=True)
        if api_key not in _PRE_AUTH_APIS or state is SaslState.FAILED:
            return SaslStep(close=True, reason=f"API key {api_key} before SASL authentication completed")
        if api_key == ApiVersionsRequest.API_KEY:
            if state is SaslState.UNAUTHENTICATED:
                return SaslStep(serve=True)
            return SaslStep(close=True, reason="ApiVersions during a SASL exchange")
        if api_key == SaslHandshakeRequest.API_KEY:
            return self._handshake(version, request)
        return self._authenticate(request)

    def _reauthenticate(self, version: int, request: Any) -> SaslStep:
        """KIP-368: a v1 handshake with the same mechanism starts a new exchange; the principal stays."""
        if version < 1 or request.mechanism != self.mechanism:
            self._enter(SaslState.FAILED)
            return SaslStep(response=SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                                           mechanisms=list(self.enabled_mechanisms)),
                            close=True, reason="re-authentication must use SaslHandshake v1 and the same mechanism",
                            outcome="failure", mechanism=_metric_name(request.mechanism))
        self._exchange = self._new_exchange(self.mechanism)
        self._enter(SaslState.REAUTHENTICATING)
        return SaslStep(response=SaslHandshakeResponse(error_code=0, mechanisms=list(self.enabled_mechanisms)))

    def _handshake(self, version: int, request: Any) -> SaslStep:
        enabled = list(self.enabled_mechanisms)
        if self.state is not SaslState.UNAUTHENTICATED:
            self._enter(SaslState.FAILED)
            return SaslStep(response=SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                                           mechanisms=enabled),
                            close=True, reason="a second SaslHandshake")
        mechanism = request.mechanism
        if mechanism not in self.enabled_mechanisms:
            self._enter(SaslState.FAILED)
            return SaslStep(response=SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                                           mechanisms=enabled),
                            close=True, reason="unsupported SASL mechanism", outcome="failure",
                            mechanism=_metric_name(mechanism))
        self.mechanism = mechanism
        self._exchange = self._new_exchange(mechanism)
        self._enter(SaslState.AUTHENTICATING_RAW if version == 0 else SaslState.AUTHENTICATING)
        return SaslStep(response=SaslHandshakeResponse(error_code=0, mechanisms=enabled))

    def _new_exchange(self, mechanism: str) -> _Plain | _Scram | _OAuthBearer:
        if mechanism == PLAIN:
            return _Plain(self._credentials)
        if mechanism == OAUTHBEARER:
            return _OAuthBearer(self._oauthbearer)
        return _Scram(mechanism, self._credentials)

    def _authenticate(self, request: Any) -> SaslStep:
        if self.state not in (SaslState.AUTHENTICATING, SaslState.REAUTHENTICATING) or self._pending is not None:
            self._enter(SaslState.FAILED)
            return SaslStep(response=SaslAuthenticateResponse(
                error_code=ErrorCode.ILLEGAL_SASL_STATE,
                error_message="Unexpected SaslAuthenticate request before a SaslHandshake", auth_bytes=b""),
                close=True, reason="SaslAuthenticate before SaslHandshake")
        return self._framed_step(lambda: self._step(request.auth_bytes or b""))

    def _framed_step(self, step: Callable[[], "tuple[bytes, bool] | PasswordCheck"]) -> SaslStep:
        """One token's step of a v1 exchange (the answer goes in a SaslAuthenticate response)."""
        reauthentication = self.state is SaslState.REAUTHENTICATING
        try:
            result = step()
        except AuthenticationFailed as exc:
            return SaslStep(response=SaslAuthenticateResponse(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc), auth_bytes=b""),
                close=True, delay_close=True, reason="SASL authentication failed", outcome="failure",
                mechanism=self.mechanism, reauthentication=reauthentication, user=self._attempted_user())
        if type(result) is PasswordCheck:
            self._pending = (result, False)
            return SaslStep(verify=result, user=result.user)
        reply, done = result
        step = SaslStep(reauthentication=reauthentication, response=SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=reply,
                                                          session_lifetime_ms=self._session_lifetime_ms if done else 0))
        if done:
            step.outcome, step.mechanism, step.user = "success", self.mechanism, self.principal
        return step

    def on_raw_token(self, token: bytes) -> SaslStep:
        """One bare SASL token (the v0 flow); the reply, if any, goes back as a bare frame."""
        if self.state is not SaslState.AUTHENTICATING_RAW or self._pending is not None:
            raise RuntimeError("a raw SASL token outside the v0 flow")
        return self._raw_step(lambda: self._step(token))

    def _raw_step(self, step: Callable[[], "tuple[bytes, bool] | PasswordCheck"]) -> SaslStep:
        try:
            result = step()
        except AuthenticationFailed:
            # v0 has no way to carry an error: the connection is closed (after the delay)
            return SaslStep(close=True, delay_close=True, reason="SASL authentication failed", outcome="failure",
                            mechanism=self.mechanism, user=self._attempted_user())
        if type(result) is PasswordCheck:
            self._pending = (result, True)
            return SaslStep(verify=result, user=result.user)
        reply, done = result
        step = SaslStep(raw_reply=reply)
        if done:
            step.outcome, step.mechanism, step.user = "success", self.mechanism, self.principal
        return step

    @property
    def verifying(self) -> bool:
        """A password check handed out by the last step has not been answered yet."""
        return self._pending is not None

    def verified(self, matches: bool) -> SaslStep:
        """The answer of the `PasswordCheck` the last step handed out; the step that exchange goes on with."""
        if self._pending is None:
            raise RuntimeError("no password check is pending")
        check, raw = self._pending
        self._pending = None

        def finish() -> tuple[bytes, bool]:
            try:
                return self._finish_exchange(*self._exchange.checked(check, matches))
            except AuthenticationFailed:
                if self.state is not SaslState.FAILED:
                    self._enter(SaslState.FAILED)
                raise

        return self._raw_step(finish) if raw else self._framed_step(finish)

    def _attempted_user(self) -> str | None:
        exchange = self._exchange
        return getattr(exchange, "attempted_user", None) or getattr(exchange, "user", None)

    def _step(self, token: bytes) -> "tuple[bytes, bool] | PasswordCheck":
        assert self._exchange is not None
        try:
            result = self._exchange.step(token)
        except AuthenticationFailed:
            self._enter(SaslState.FAILED)
            raise
        if type(result) is PasswordCheck:
            return result
        return self._finish_exchange(*result)

    def _finish_exchange(self, reply: bytes, done: bool) -> tuple[bytes, bool]:
        if done:
            principal = f"User:{self._exchange.user}"
            token_lifetime_s = getattr(self._exchange, "lifetime_s", None)
            self._exchange = None
            if self.state is SaslState.REAUTHENTICATING and principal != self.principal:
                self._enter(SaslState.FAILED)
                raise AuthenticationFailed(
                    f"Cannot change principals during re-authentication from {self.principal}: {principal}")
            self.principal = principal
            self._enter(SaslState.AUTHENTICATED)
            if self.max_reauth_ms > 0:
                # Kafka: a session lasts connections.max.reauth.ms, or less if the credential expires sooner
                lifetime_ms = self.max_reauth_ms
                if token_lifetime_s is not None:
                    lifetime_ms = max(1, min(lifetime_ms, int(token_lifetime_s * 1000)))
                self._session_lifetime_ms = lifetime_ms
                self.session_expires_at = self._clock() + lifetime_ms / 1000
        return reply, done


def _metric_name(mechanism: str) -> str:
    """A mechanism name safe as a metric label: clients choose it, so unknown ones are one bucket."""
    return mechanism if mechanism in MECHANISMS else "unknown"
