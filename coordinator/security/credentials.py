"""SCRAM credentials (Kafka's `UserScramCredentialRecord`) and the checks made with them.

A credential never holds a password: only the salt, the iteration count and
the two keys RFC 5802 derives from the salted password (StoredKey =
H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword,
"Server Key")). SCRAM exchanges themselves are run by `scramp`; this module
makes credentials (from a password, or from the salted password that
AlterUserScramCredentials carries) and checks a PLAIN password against them.

`repr()` of a credential shows the user, mechanism and iterations only, so a
credential that reaches a log line or an error message leaks nothing.
"""
from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field

from cohort.coordinator.records.types import ScramCredentialRecord, ScramCredentialTombstone

MIN_ITERATIONS = 4096  # Kafka's minimum for SCRAM-SHA-256/512
MAX_ITERATIONS = 16384  # Kafka's maximum (ScramMechanism.maxIterations)
DEFAULT_ITERATIONS = 8192
SALT_BYTES = 32


class ScramMechanism(enum.IntEnum):
    """Kafka's codes for SCRAM mechanisms (DescribeUserScramCredentials / AlterUserScramCredentials)."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"

    @classmethod
    def from_name(cls, name: str) -> "ScramMechanism":
        """SCRAM-SHA-256 / SCRAM-SHA-512 (any case); ValueError otherwise."""
        try:
            mechanism = cls[name.strip().upper().replace("-", "_")]
        except KeyError:
            raise ValueError(f"unknown SCRAM mechanism {name!r} (SCRAM-SHA-256 or SCRAM-SHA-512)") from None
        if mechanism is cls.UNKNOWN:
            raise ValueError(f"unknown SCRAM mechanism {name!r} (SCRAM-SHA-256 or SCRAM-SHA-512)")
        return mechanism


@dataclass(frozen=True, slots=True)
class ScramCredential:
    user: str
    mechanism: ScramMechanism
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def record(self) -> ScramCredentialRecord:
        return ScramCredentialRecord(self.user, int(self.mechanism), self.salt, self.stored_key, self.server_key,
                                     self.iterations)

    def matches_password(self, password: str) -> bool:
        """Whether `password` is the one this credential was made from (for SASL/PLAIN)."""
        salted = _salted_password(self.mechanism, password, self.salt, self.iterations)
        stored_key, _ = _keys(self.mechanism, salted)
        return hmac.compare_digest(stored_key, self.stored_key)


def iterations_problem(iterations: int) -> str | None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        return f"Iterations {iterations} must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}"
    return None


def credential_from_password(user: str, mechanism: ScramMechanism, password: str,
                             iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None) -> ScramCredential:
    """A new credential for `password`, with a random salt unless one is given."""
    problem = iterations_problem(iterations)
    if problem:
        raise ValueError(problem)
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    import scramp  # here, not at the top: scramp and asn1crypto take ~13 ms to import (`cohort serve` rarely needs it)

    salt, stored_key, server_key, iterations = scramp.ScramMechanism(mechanism.mechanism_name).make_auth_info(
        password, iteration_count=iterations, salt=salt)
    return ScramCredential(user, mechanism, bytes(salt), bytes(stored_key), bytes(server_key), iterations)


def credential_from_salted_password(user: str, mechanism: ScramMechanism, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredential:
    """The credential an AlterUserScramCredentials upsertion describes (the client salted the password)."""
    stored_key, server_key = _keys(mechanism, salted_password)
    return ScramCredential(user, mechanism, bytes(salt), stored_key, server_key, iterations)


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """What a client sends in an AlterUserScramCredentials upsertion (RFC 5802's Hi())."""
    return _salted_password(mechanism, password, salt, iterations)


def _salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def _keys(mechanism: ScramMechanism, salted: bytes) -> tuple[bytes, bytes]:
    name = mechanism.hash_name
    client_key = hmac.new(salted, b"Client Key", name).digest()
    return hashlib.new(name, client_key).digest(), hmac.new(salted, b"Server Key", name).digest()


_UNKNOWN_USER = ScramCredential("", ScramMechanism.SCRAM_SHA_512, bytes(SALT_BYTES), bytes(64), bytes(64),
                                DEFAULT_ITERATIONS)


class CredentialStore:
    """Every SCRAM credential of the node, rebuilt from the log's records (latest per user and mechanism)."""

    def __init__(self) -> None:
        self._credentials: dict[tuple[str, ScramMechanism], ScramCredential] = {}
        self._mock_key: bytes | None = None  # see `scram_credential`; None: to be derived again

    def __len__(self) -> int:
        return len(self._credentials)

    def __iter__(self) -> Iterator[ScramCredential]:
        return iter(sorted(self._credentials.values(), key=lambda c: (c.user, c.mechanism)))

    def apply(self, record: ScramCredentialRecord | ScramCredentialTombstone) -> None:
        try:
            mechanism = ScramMechanism(record.mechanism)
        except ValueError:
            return  # a mechanism this version does not know: never usable for authentication
        self._mock_key = None
        if isinstance(record, ScramCredentialTombstone):
            self._credentials.pop((record.user, mechanism), None)
        else:
            self._credentials[(record.user, mechanism)] = ScramCredential(
                record.user, mechanism, record.salt, record.stored_key, record.server_key, record.iterations)

    def replace(self, records: list[ScramCredentialRecord]) -> None:
        """Hold exactly these credentials (a snapshot of another store)."""
        self._credentials = {}
        self._mock_key = None
        for record in records:
            self.apply(record)

    def get(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self._credentials.get((user, mechanism))

    def scram_credential(self, user: str, mechanism: ScramMechanism) -> tuple[ScramCredential, bool]:
        """(the credential a SCRAM exchange runs with, whether the user has one).

        An unknown user gets a made-up credential (RFC 5802 §5.1): a salt and iteration count that are the
        same at every attempt, and keys no proof matches, so the exchange fails only at client-final, as a
        wrong password does, and server-first does not tell which user names exist. The salt comes from a
        key derived from the stored (secret) server keys: every node and worker holding the same credentials
        answers alike, and nobody without them can tell the salt from a real one."""
        credential = self._credentials.get((user, mechanism))
        if credential is not None:
            return credential, True
        if self._mock_key is None:
            digest = hashlib.sha256(b"cohort scram mock salt")
            for c in sorted(self._credentials.values(), key=lambda c: (c.user, c.mechanism)):
                digest.update(c.server_key)
            self._mock_key = digest.digest()
        derived = hmac.new(self._mock_key, f"{int(mechanism)}\0{user}".encode(), hashlib.sha512).digest()
        size = hashlib.new(mechanism.hash_name).digest_size
        return ScramCredential(user, mechanism, derived[:SALT_BYTES], derived[SALT_BYTES:][:size].ljust(size, b"\0"),
                               bytes(size), DEFAULT_ITERATIONS), False

    def users(self) -> list[str]:
        return sorted({user for user, _ in self._credentials})

    def of_user(self, user: str) -> list[ScramCredential]:
        return [c for (u, _), c in sorted(self._credentials.items()) if u == user]

    def check_plain(self, user: str, password: str) -> bool:
        """SASL/PLAIN: the password matches one of the user's SCRAM credentials (SHA-512 tried first)."""
        for mechanism in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256):
            credential = self._credentials.get((user, mechanism))
            if credential is not None:
                return credential.matches_password(password)
        # an unknown user costs the same work as a wrong password: timing does not tell which names exist
        _UNKNOWN_USER.matches_password(password)
        return False
