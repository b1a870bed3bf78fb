"""How the console reaches the coordinator, and as whom.

The console never reaches into the group engine: it is a Kafka client of the coordinator(s), through
`cohort.client.admin.Admin`, so it answers from the same requests any admin tool sends (ListGroups to
every broker, the rest routed by FindCoordinator). One design serves every mode: a single node, the
workers of ``--workers N`` (the supervisor serves the console and bootstraps from every worker), and
a cluster node (it bootstraps from itself and lists the groups of every live node).

When the node has a SASL listener the console connects there, as each HTTP user: the user name and
password of the request's HTTP Basic header become that connection's SASL credentials, so the server
checks them against its own SCRAM credentials and its authorizer applies the same ACLs to what the
console asks on the user's behalf. A user's signed-in client is reused for a minute at most (SCRAM is
slow on purpose), so a deleted user or a changed password stops working within that minute, as an open
Kafka connection would until it re-authenticates; wrong credentials are never cached.
"""
from __future__ import annotations

import asyncio
import hashlib
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass

from cohort.client.admin import Admin
from cohort.client.errors import KafkaError
from cohort.client.security import ClientSecurity
from cohort.coordinator.console.sign_in_budget import SignInBudget
from cohort.coordinator.security.console_sign_ins import CONSOLE_SIGN_INS
from cohort.protocol.errors import ErrorCode

# The cheapest exchange first: PLAIN checks the password against the same SCRAM credentials.
SIGN_IN_ORDER = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SIGN_IN_REFUSALS = frozenset({ErrorCode.SASL_AUTHENTICATION_FAILED, ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                              ErrorCode.ILLEGAL_SASL_STATE})
SESSION_MAX_AGE_S = 60.0
REQUEST_TIMEOUT_MS = 10000


class SignInRequired(Exception):
    """The request has no (usable) HTTP Basic credentials, or the server refused them."""


@dataclass(frozen=True)
class ConsoleSecurity(ClientSecurity):
    """The console's PLAIN sign-ins carry its proof (`console_sign_ins`), so the node (or with ``--workers``
    each worker) counts their password checks against the console's budget, not this machine's address."""

    def plain_authzid(self, conn) -> str:
        return CONSOLE_SIGN_INS.authzid(conn.local_address or "", conn.peer_address or "", self.username or "")


@dataclass(frozen=True, slots=True)
class CoordinatorAccess:
    """Where the console connects and how: the bootstrap addresses and that listener's security."""

    bootstrap: tuple[str, ...]
    protocol: str = "PLAINTEXT"
    mechanisms: tuple[str, ...] = ()
    cluster: str | None = None  # cluster mode: the etcd URL, for what `cohort cluster status` shows

    @property
    def requires_sign_in(self) -> bool:
        return self.protocol.startswith("SASL")

    @classmethod
    def for_node(cls, config, ports: dict[str, int]) -> "CoordinatorAccess":
        """A single node or a cluster node: its SASL listener if it has one, else its first listener."""
        chosen = _console_listener(config)
        host = _reachable(chosen.host)
        return cls((f"{host}:{ports.get(chosen.name, chosen.port)}",), config.security_protocol(chosen.name),
                   config.enabled_mechanisms, config.cluster)

    @classmethod
    def for_workers(cls, config, ports: Sequence[Sequence[int]]) -> "CoordinatorAccess":
        """The workers of ``--workers N`` (``ports``: each worker's port per listener, in `config.endpoints`
        order): every worker's port of the listener a single node's console would use."""
        chosen = _console_listener(config)
        index = config.endpoints.index(chosen)
        return cls(tuple(f"{_reachable(chosen.host)}:{each[index]}" for each in ports),
                   config.security_protocol(chosen.name), config.enabled_mechanisms)

    def security(self, mechanism: str | None = None, username: str | None = None,
                 password: str | None = None) -> ClientSecurity | None:
        if self.protocol == "PLAINTEXT":
            return None
        context = None
        if self.protocol.endswith("SSL"):
            # The console connects to its own node's listener on this machine: the server's certificate
            # names its public address and need not chain to a CA this process trusts.
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return ConsoleSecurity(self.protocol, mechanism or "PLAIN", username, password, context)

    def sign_in_mechanisms(self) -> list[str]:
        return [m for m in SIGN_IN_ORDER if m in self.mechanisms]


def _console_listener(config):
    """The SASL listener if there is one (the console signs its users in over it), else the first."""
    return next((e for e in config.endpoints if config.security_protocol(e.name).startswith("SASL")),
                config.endpoints[0])


def _reachable(host: str) -> str:
    return "127.0.0.1" if host in ("", "0.0.0.0") else "::1" if host == "::" else host


class Sessions:
    """One signed-in `Admin` per user (one shared one when the listener needs no sign-in)."""

    def __init__(self, access: CoordinatorAccess, max_age_s: float = SESSION_MAX_AGE_S,
                 budget: SignInBudget | None = None) -> None:
        self.access = access
        self.max_age_s = max_age_s
        self.budget = budget or SignInBudget()
        self._admins: dict[tuple[str, str], tuple[Admin, float]] = {}  # signed-in client, when it signed in
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._anonymous: Admin | None = None
        self._retiring: dict[asyncio.Task, Admin] = {}

    def _new_admin(self, security: ClientSecurity | None, principal: str) -> Admin:
        return Admin(list(self.access.bootstrap), client_id=f"cohort-console/{principal}",
                     request_timeout_ms=REQUEST_TIMEOUT_MS, api_timeout_ms=REQUEST_TIMEOUT_MS,
                     connect_timeout_ms=REQUEST_TIMEOUT_MS, security=security)

    async def admin_for(self, credentials: tuple[str, str] | None, browser: str = "unknown") -> Admin:
        """The client acting for these HTTP Basic credentials; SignInRequired when they do not sign in,
        SignInThrottled when `browser` (its address) or the user has no budget left for a password check."""
        if not self.access.requires_sign_in:
            if self._anonymous is None:
                self._anonymous = self._new_admin(self.access.security(), "anonymous")
            return self._anonymous
        if credentials is None:
            raise SignInRequired("sign in with a user name and password known to the server")
        username, password = credentials
        key = (username, hashlib.sha256(password.encode()).hexdigest())
        self._retire_old()
        async with self._locks.setdefault(key, asyncio.Lock()):
            known = self._admins.get(key)
            if known is not None:
                return known[0]
            try:
                self.budget.take(browser, username)
            except BaseException:
                self._locks.pop(key, None)
                raise
            try:
                admin = await self._sign_in(username, password)
            except SignInRequired:
                self._locks.pop(key, None)  # nothing kept for credentials that did not sign in; the token is spent
                raise
            except BaseException:
                self._locks.pop(key, None)
                self.budget.give_back(browser, username)  # no answer about the password: nothing spent
                raise
            self.budget.give_back(browser, username)
            self._admins[key] = (admin, time.monotonic())
            return admin

    async def _sign_in(self, username: str, password: str) -> Admin:
        for mechanism in self.access.sign_in_mechanisms():
            admin = self._new_admin(self.access.security(mechanism, username, password), username)
            try:
                await admin.cluster.any_connection()
            except KafkaError as exc:
                await admin.close()
                if exc.code == ErrorCode.SASL_AUTHENTICATION_FAILED and mechanism == "PLAIN":
                    break  # PLAIN checks the password against every SCRAM credential of the user: no SCRAM retry
                if exc.code in SIGN_IN_REFUSALS:
                    continue
                raise
            except BaseException:
                await admin.close()
                raise
            return admin
        raise SignInRequired("the user name or password is not right")

    def _retire_old(self) -> None:
        """Sessions past their age sign in again; each old client is closed once requests using it are done."""
        now = time.monotonic()
        for key, (admin, signed_in) in list(self._admins.items()):
            if now - signed_in > self.max_age_s:
                del self._admins[key]
                self._locks.pop(key, None)
                task = asyncio.get_running_loop().create_task(self._close_later(admin))
                self._retiring[task] = admin
                task.add_done_callback(lambda done: self._retiring.pop(done, None))

    @staticmethod
    async def _close_later(admin: Admin) -> None:
        await asyncio.sleep(REQUEST_TIMEOUT_MS / 1000 * 2)  # a request that took it has had its time
        await admin.close()

    async def close(self) -> None:
        admins = [a for a, _ in self._admins.values()] + ([self._anonymous] if self._anonymous else [])
        for task, admin in list(self._retiring.items()):
            task.cancel()
            admins.append(admin)
        self._admins.clear()
        self._retiring.clear()
        self._anonymous = None
        await asyncio.gather(*(a.close() for a in admins), return_exceptions=True)
