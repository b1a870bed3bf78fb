"""The console's own sign-ins, told apart by the node that checks their passwords.

The console signs each browser's user in over the node's SASL listener, so every console sign-in
reaches the PLAIN check from this machine's address and would spend that address's budget of password
checks (`password_checks`): one browser guessing passwords would slow every other user's sign-in and
the Kafka clients on this machine. The console keeps its own budget, per browser address and per user
name, and proves its sign-ins to the node: its PLAIN authorization id is `CONSOLE_AUTHZID_PREFIX` and an
HMAC of the connection's two addresses and the user name under a key no client has. The key is made
at random per process; with ``--workers N``, where the console runs in the supervisor, supervisor and
workers derive it from the worker link's secret (made at each start, handed to the workers in their
environment, never on a command line). A proof is bound to its connection, so it cannot be replayed on
another; a prefixed authorization id with a wrong proof is refused as any other impersonation.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets

CONSOLE_AUTHZID_PREFIX = "cohort-console:"
_DERIVATION = b"cohort console sign-ins"


class ConsoleSignIns:
    """The key behind the console's proofs (one per process, or per supervisor and its workers)."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def share(self, secret: str) -> None:
        """Use the key every process that knows `secret` derives (the worker link's, with ``--workers``)."""
        self._key = hmac.new(secret.encode(), _DERIVATION, hashlib.sha256).digest()

    def authzid(self, client: str, server: str, user: str) -> str:
        """The proof for `user` signing in from `client` (``host:port``) to `server` (``host:port``)."""
        message = f"{client}|{server}|{user}".encode()
        return CONSOLE_AUTHZID_PREFIX + hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def proves(self, authzid: str, client: str, server: str, user: str) -> bool:
        return hmac.compare_digest(authzid.encode(), self.authzid(client, server, user).encode())


CONSOLE_SIGN_INS = ConsoleSignIns()
