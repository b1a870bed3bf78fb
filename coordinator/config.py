"""Cohort's settings: one declaration each, with Kafka's names and defaults.

Every setting is declared exactly once, as a field of `CoordinatorConfig`: its
default, its doc line and the kind of value it takes. Everything else is
derived from that declaration: the Kafka-style dotted name (attribute with
``_`` → ``.``), the environment variable (``COHORT_`` + the name upper-cased
with dots → underscores), the ``--dotted.name`` command-line flag, TOML file
parsing, validation and the ``cohort config show`` table.

Where the values come from (defaults, a TOML file, ``COHORT_*`` variables, flags, with that
precedence, lowest first) is `config_sources`.

Anything wrong (unknown key, value of the wrong type or out of range, min
above max) raises one `ConfigError` whose message is a single line naming the
setting and where its value came from, so ``cohort serve`` can print it and
exit non-zero instead of showing a traceback.
"""
from __future__ import annotations

import abc
import dataclasses
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse
from typing import Any, NamedTuple

from cohort.protocol.compiled import PURE_PYTHON_ENV

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
ENV_PREFIX = "COHORT_"
# Names the config file itself rather than a setting, so it is not a setting.
CONFIG_FILE_ENV = "COHORT_CONFIG"
# Ours but not settings: the config file's path, and the pure-Python switch (read when the package is
# imported, before any configuration: protocol/compiled.py).
NOT_SETTINGS_ENV = frozenset({CONFIG_FILE_ENV, PURE_PYTHON_ENV})


class ConfigError(Exception):
    """A configuration the server must refuse to start with; str() is one line."""


class HostPort(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


# --------------------------------------------------------------------------
# Value kinds: how a setting's value is parsed from text and checked.
# `check` is applied to every value, whatever its source (including keyword
# arguments in tests) and returns the normalised value; `parse_text` turns
# an env/flag string into the Python type first. Both raise ValueError with
# a short reason.
# --------------------------------------------------------------------------


class ValueKind(abc.ABC):
    metavar = "VALUE"

    def parse_text(self, text: str) -> Any:
        return text

    @abc.abstractmethod
    def check(self, value: Any) -> Any:
        """The value, normalised; ValueError with a short reason if unacceptable."""

    def describe(self) -> str:
        return self.metavar.lower()


@dataclass(frozen=True, slots=True)
class IntKind(ValueKind):
    minimum: int = 0
    maximum: int = INT32_MAX
    metavar = "INT"

    def parse_text(self, text: str) -> int:
        try:
            return int(text.strip().replace("_", ""), 10)
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None

    def check(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, str):
                value = self.parse_text(value)
            else:
                raise ValueError(f"{value!r} is not an integer")
        if value < self.minimum:
            raise ValueError(f"{value} must be >= {self.minimum}")
        if value > self.maximum:
            raise ValueError(f"{value} must be <= {self.maximum}")
        return value

    def describe(self) -> str:
        if self.maximum == INT32_MAX:
            return f"int >= {self.minimum}"
        return f"int in [{self.minimum}, {self.maximum}]"


@dataclass(frozen=True, slots=True)
class BoolKind(ValueKind):
    metavar = "BOOL"
    _TRUE = ("true", "yes", "on", "1")
    _FALSE = ("false", "no", "off", "0")

    def parse_text(self, text: str) -> bool:
        lowered = text.strip().lower()
        if lowered in self._TRUE:
            return True
        if lowered in self._FALSE:
            return False
        raise ValueError(f"{text!r} is not a boolean (true/false)")

    def check(self, value: Any) -> bool:
        if isinstance(value, str):
            return self.parse_text(value)
        if not isinstance(value, bool):
            raise ValueError(f"{value!r} is not a boolean (true/false)")
        return value

    def describe(self) -> str:
        return "true|false"


@dataclass(frozen=True, slots=True)
class ChoiceKind(ValueKind):
    choices: tuple[str, ...]
    aliases: tuple[tuple[str, str], ...] = ()
    upper: bool = False
    metavar = "CHOICE"

    def check(self, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"{value!r} must be one of {', '.join(self.choices)}")
        normal = value.strip().upper() if self.upper else value.strip().lower()
        normal = dict(self.aliases).get(normal, normal)
        if normal not in self.choices:
            raise ValueError(f"{value!r} must be one of {', '.join(self.choices)}")
        return normal

    def describe(self) -> str:
        return "|".join(self.choices)


@dataclass(frozen=True, slots=True)
class ListenerKind(ValueKind):
    """One ``host:port`` address; Kafka's ``PLAINTEXT://`` prefix is accepted.

    `nullable` settings may be None (unset). `bindable` addresses may use port 0
    (an ephemeral port) and the wildcard hosts; advertised ones may not.
    """

    nullable: bool = False
    bindable: bool = True
    unset_means: str = "same as listeners"
    metavar = "HOST:PORT"

    def check(self, value: Any) -> str | None:
        if value is None or (isinstance(value, str) and self.nullable and not value.strip()):
            if self.nullable:
                return None
            raise ValueError("an address HOST:PORT is required")
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not HOST:PORT")
        return str(parse_host_port(value, bindable=self.bindable))

    def describe(self) -> str:
        return "host:port" + (f" (unset: {self.unset_means})" if self.nullable else "")


@dataclass(frozen=True, slots=True)
class EndpointsKind(ValueKind):
    """Kafka's ``listeners`` / ``advertised.listeners``: ``NAME://host:port,…`` (a bare host:port is PLAINTEXT)."""

    nullable: bool = False
    bindable: bool = True
    metavar = "LISTENERS"

    def check(self, value: Any) -> str | None:
        if value is None or (isinstance(value, str) and self.nullable and not value.strip()):
            if self.nullable:
                return None
            raise ValueError("a listener NAME://HOST:PORT is required")
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not a listener list")
        return _normal_endpoints(parse_endpoints(value, bindable=self.bindable))

    def describe(self) -> str:
        return "[NAME://]host:port,…" + (" (unset: same as listeners)" if self.nullable else "")


@dataclass(frozen=True, slots=True)
class ProtocolMapKind(ValueKind):
    metavar = "MAP"

    def check(self, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not NAME:PROTOCOL,…")
        return ",".join(f"{k}:{v}" for k, v in parse_protocol_map(value).items())

    def describe(self) -> str:
        return "NAME:PROTOCOL,…"


class ConnectionOverridesKind(ValueKind):
    """Kafka's ``max.connections.per.ip.overrides``: ``host:count,host:count`` (a host name or an IP address)."""

    metavar = "HOST:COUNT,…"

    def check(self, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not HOST:COUNT,…")
        return ",".join(f"{host}:{count}" for host, count in parse_connection_overrides(value).items())

    def describe(self) -> str:
        return "HOST:COUNT,…"


def parse_connection_overrides(text: str) -> dict[str, int]:
    """``host:count,…`` -> {host: count}; ValueError on a malformed entry (an IPv6 host's last colon splits)."""
    overrides: dict[str, int] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"{entry!r} is not HOST:COUNT")
        overrides[host] = int(count)
    return overrides


@dataclass(frozen=True, slots=True)
class NameListKind(ValueKind):
    """A list of names in one string (Kafka's ``a,b`` or ``User:a;User:b``), each checked by `allowed`."""

    separator: str = ","
    allowed: tuple[str, ...] = ()  # empty: any name
    upper: bool = False
    metavar = "LIST"

    def check(self, value: Any) -> str:
        if isinstance(value, (list, tuple)):
            value = self.separator.join(map(str, value))
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not a {self.separator!r}-separated list")
        names = []
        for item in (part.strip() for part in value.split(self.separator)):
            if not item:
                continue
            if self.upper:
                item = item.upper()
            if self.allowed and item not in self.allowed:
                raise ValueError(f"{item!r} must be one of {', '.join(self.allowed)}")
            if item not in names:
                names.append(item)
        return self.separator.join(names)

    def describe(self) -> str:
        what = "|".join(self.allowed) if self.allowed else "name"
        return f"{what}{self.separator}…"


@dataclass(frozen=True, slots=True)
class TextKind(ValueKind):
    """Any text; empty means unset when `nullable`."""

    nullable: bool = True
    metavar = "TEXT"

    def check(self, value: Any) -> str | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            if self.nullable:
                return None
            raise ValueError("must not be empty")
        if not isinstance(value, str):
            raise ValueError("must be text")
        return value.strip()

    def describe(self) -> str:
        return "text (unset: none)" if self.nullable else "text"


@dataclass(frozen=True, slots=True)
class SecretKind(ValueKind):
    """A password: any text, or unset; `cohort config show` prints it as [hidden]."""

    metavar = "SECRET"

    def check(self, value: Any) -> str | None:
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise ValueError("must be text")
        return value

    def describe(self) -> str:
        return "text (unset: none)"


@dataclass(frozen=True, slots=True)
class AuthorizerKind(ValueKind):
    """``authorizer.class.name``: empty (no authorization) or Kafka's ACL authorizer, normalised to ``acl``."""

    metavar = "CLASS"

    def check(self, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"{value!r} must be empty or one of {', '.join(AUTHORIZER_NAMES)}")
        text = value.strip()
        if not text:
            return ""
        if text not in AUTHORIZER_NAMES:
            raise ValueError(f"{value!r} must be empty or one of {', '.join(AUTHORIZER_NAMES)}")
        return "acl"

    def describe(self) -> str:
        return "(empty)|acl|org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@dataclass(frozen=True, slots=True)
class FlushPolicyKind(ValueKind):
    """``always`` (fsync before every acknowledgement), ``never``, or N ms."""

    metavar = "POLICY"

    def check(self, value: Any) -> str:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise ValueError(f"{value!r} must be always, never or an interval in ms")
        normal = value.strip().lower()
        if normal in ("always", "never"):
            return normal
        if normal.isdigit() and normal.isascii() and 1 <= int(normal) <= INT32_MAX:
            return str(int(normal))
        raise ValueError(f"{value!r} must be always, never or an interval in ms (1..{INT32_MAX})")

    def describe(self) -> str:
        return "always|never|<ms>"


@dataclass(frozen=True, slots=True)
class PathKind(ValueKind):
    nullable: bool = False
    metavar = "PATH"

    def check(self, value: Any) -> Path | None:
        if value is None or (self.nullable and value == ""):
            if self.nullable:
                return None
            raise ValueError("a path is required")
        if not isinstance(value, (str, os.PathLike)) or str(value) == "":
            raise ValueError(f"{value!r} is not a path")
        return Path(value)

    def describe(self) -> str:
        return "path" + (" (unset: none)" if self.nullable else "")


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
WORKER_LINK_LISTENER = "COHORT_WORKER_LINK"  # `--workers`: the loopback listener the workers talk over
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# Kafka's names for its ACL authorizer (KRaft's and ZooKeeper's), and Cohort's short name.
AUTHORIZER_NAMES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                    "kafka.security.authorizer.AclAuthorizer", "acl")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener: its name (which picks the security protocol) and address."""

    name: str
    host: str
    port: int

    @property
    def address(self) -> HostPort:
        return HostPort(self.host, self.port)

    def __str__(self) -> str:
        return f"{self.name}://{self.address}"


def parse_endpoints(text: str, *, bindable: bool = True) -> list[Endpoint]:
    """Kafka's listener list: ``NAME://host:port`` entries, comma-separated; a bare ``host:port`` is PLAINTEXT."""
    endpoints: list[Endpoint] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise ValueError(f"{text!r} has an empty listener entry")
        name, sep, rest = item.partition("://")
        if not sep:
            name, rest = "PLAINTEXT", item
        name = name.strip().upper()
        if not name or not all(ch.isascii() and (ch.isalnum() or ch in "_-") for ch in name):
            raise ValueError(f"{item!r}: invalid listener name {name!r}")
        if any(e.name == name for e in endpoints):
            raise ValueError(f"listener name {name} appears more than once")
        address = parse_host_port(rest, bindable=bindable)
        endpoints.append(Endpoint(name, address.host, address.port))
    return endpoints


def _normal_endpoints(endpoints: list[Endpoint]) -> str:
    if len(endpoints) == 1 and endpoints[0].name == "PLAINTEXT":
        return str(endpoints[0].address)  # the plain form, as before listener names existed
    return ",".join(map(str, endpoints))


def parse_protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL`` pairs, comma-separated."""
    mapping: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise ValueError(f"{item!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"{item!r}: security protocol must be one of {', '.join(SECURITY_PROTOCOLS)}")
        if name in mapping:
            raise ValueError(f"listener name {name} is mapped twice")
        mapping[name] = protocol
    return mapping


@dataclass(frozen=True, slots=True)
class WorkersKind(ValueKind):
    """A number of worker processes, or ``auto`` (one per core)."""

    metavar = "N|auto"

    def parse_text(self, text: str) -> Any:
        return text

    def check(self, value: Any) -> int | str:
        if isinstance(value, str):
            text = value.strip().lower()
            if text == "auto":
                return "auto"
            if not (text.isascii() and text.isdigit()):
                raise ValueError(f"{value!r} must be a number of workers (1..{MAX_WORKERS}) or auto")
            value = int(text)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WORKERS:
            raise ValueError(f"{value!r} must be a number of workers (1..{MAX_WORKERS}) or auto")
        return value

    def describe(self) -> str:
        return "N|auto"


@dataclass(frozen=True, slots=True)
class EtcdClusterKind(ValueKind):
    """The etcd endpoints of cluster mode, ``etcd://HOST:PORT[,HOST:PORT...]``; unset = single node."""

    metavar = "etcd://HOST:PORT[,...]"

    def check(self, value: Any) -> str | None:
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not an etcd://HOST:PORT[,HOST:PORT...] list")
        parse_cluster_url(value)
        return value

    def describe(self) -> str:
        return "etcd://host:port[,host:port...] (unset: single node)"


def parse_cluster_url(url: str) -> list[str]:
    """``etcd://h1:2379,h2:2379`` -> ["h1:2379", "h2:2379"]; ValueError with a short reason."""
    if not url.startswith("etcd://"):
        raise ValueError(f"{url!r} must look like etcd://HOST:PORT[,HOST:PORT...]")
    endpoints = [e.strip() for e in url[len("etcd://"):].split(",") if e.strip()]
    if not endpoints:
        raise ValueError(f"{url!r} names no etcd endpoint")
    for endpoint in endpoints:
        host, sep, port = endpoint.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"etcd endpoint {endpoint!r} is not HOST:PORT")
    return endpoints


def parse_file_url(url: str) -> Path:
    """The file a ``file://`` URL names (``file:///path``, or ``file://localhost/path``); ValueError else."""
    parsed = urlparse(url)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost") or not parsed.path:
        raise ValueError(f"{url!r} is not a file:// URL (file:///path/to/file)")
    return Path(unquote(parsed.path))


@dataclass(frozen=True, slots=True)
class PortListKind(ValueKind):
    """Comma-separated TCP ports (unset: none)."""

    metavar = "PORT,PORT,..."

    def check(self, value: Any) -> str | None:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not a list of ports")
        ports = []
        for item in value.split(","):
            item = item.strip()
            if not (item.isascii() and item.isdigit()) or not 1 <= int(item) <= 65535:
                raise ValueError(f"{item!r} is not a port (1..65535)")
            ports.append(int(item))
        if len(set(ports)) != len(ports):
            raise ValueError(f"{value!r} names a port twice")
        return ",".join(str(p) for p in ports)

    def describe(self) -> str:
        return "port,port,... (unset: --listen's port and the ones after it)"


MAX_WORKERS = 50  # one offsets partition each at least (offsets.topic.num.partitions is 50 by default)


def parse_host_port(text: str, *, bindable: bool = True) -> HostPort:
    """Parse ``host:port`` / ``[v6]:port`` (optionally ``PLAINTEXT://``-prefixed)."""
    raw = text.strip()
    if "," in raw:
        raise ValueError(f"{text!r}: only one address is supported")
    if "://" in raw:
        scheme, _, raw = raw.partition("://")
        if scheme.upper() != "PLAINTEXT":
            raise ValueError(f"{text!r}: only PLAINTEXT listeners are supported")
    if raw.startswith("["):
        host, sep, port_text = raw[1:].partition("]:")
        if not sep:
            raise ValueError(f"{text!r} is not HOST:PORT")
    else:
        host, sep, port_text = raw.rpartition(":")
        if not sep or ":" in host:
            raise ValueError(f"{text!r} is not HOST:PORT")
    if not host or any(ch.isspace() for ch in host):
        raise ValueError(f"{text!r} has no valid host")
    if not (port_text.isascii() and port_text.isdigit()):
        raise ValueError(f"{text!r} has no valid port")
    port = int(port_text)
    lowest = 0 if bindable else 1
    if not lowest <= port <= 65535:
        raise ValueError(f"{text!r}: port must be in [{lowest}, 65535]")
    if not bindable and _is_wildcard(host):
        raise ValueError(f"{text!r}: clients cannot connect to the wildcard address {host}")
    return HostPort(host, port)


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


# --------------------------------------------------------------------------
# The declaration.
# --------------------------------------------------------------------------


def _setting(default: Any, kind: ValueKind, doc: str, *aliases: str) -> Any:
    """Declare one setting: its default, value kind, help line and short flags."""
    return field(default=default, metadata={"kind": kind, "doc": doc, "aliases": aliases})


_MS = IntKind(0)
_POSITIVE_MS = IntKind(1)
# Kafka's names of its server-side assignors (UniformAssignor, RangeAssignor)
CONSUMER_GROUP_ASSIGNORS = ("uniform", "range")
CONSUMER_GROUP_MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """The effective configuration of one Cohort server (immutable).

    Attribute names are Kafka's setting names with dots → underscores. Tests
    build one with keyword overrides; every value is checked on construction.
    """

    # -- network ------------------------------------------------------------
    listeners: str = _setting("127.0.0.1:9092", EndpointsKind(), "Addresses the Kafka protocol listeners bind, NAME://host:port comma-separated (a bare host:port is PLAINTEXT; port 0 = any free port).", "--listen")
    advertised_listeners: str | None = _setting(None, EndpointsKind(nullable=True, bindable=False), "Addresses given to clients in Metadata/FindCoordinator, per listener name; unset = listeners.", "--advertised")
    listener_security_protocol_map: str = _setting("PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL", ProtocolMapKind(), "Security protocol of each listener name.")
    data_dir: Path = _setting(Path("./data"), PathKind(), "Directory holding the offsets log and the data-dir lock.", "--data-dir")
    node_id: int = _setting(0, IntKind(0), "This node's broker id, as reported to clients (worker K of --workers is node.id + K).", "--node-id")
    workers: int | str = _setting(1, WorkersKind(), "Coordinator processes on this machine (auto = one per core); each is a broker with its own port and node id and owns a fixed share of the offsets partitions.", "--workers")
    worker_ports: str | None = _setting(None, PortListKind(), "Kafka ports of the workers, one each (unset: the listeners port and the ones after it).", "--worker-ports")
    cluster: str | None = _setting(None, EtcdClusterKind(), "Cluster mode: nodes share the offsets partitions through these etcd v3 endpoints and keep offsets there (no data dir); unset = one node on the local log.", "--cluster")
    cluster_lease_ttl_ms: int = _setting(6000, IntKind(1000, 3600000), "Cluster mode: TTL of this node's etcd lease; a node that stops refreshing it (dead, paused, cut off) loses its partitions this long after.")
    cluster_etcd_request_timeout_ms: int = _setting(1000, IntKind(100, 60000), "Cluster mode: deadline of one etcd request; a write past it is not answered as failed: its outcome is checked through another etcd member first (or the partition given up), so a short deadline moves past a stalled member quickly.")
    cluster_etcd_max_txn_ops: int = _setting(128, IntKind(16, 1_000_000), "Cluster mode: most operations (and compares) one etcd transaction may carry: set it to the etcd members' --max-txn-ops (etcd's default 128); higher lets a node write its queued commits in fewer transactions.")
    cluster_etcd_max_request_bytes: int = _setting(1536 * 1024, IntKind(256 * 1024, 2**31 - 1), "Cluster mode: largest etcd request a node sends: set it to the etcd members' --max-request-bytes (etcd's default 1.5 MiB).")
    cluster_etcd_load_page_keys: int = _setting(1000, IntKind(1, 100000), "Cluster mode: keys one etcd read of a partition's load fetches; smaller pages make each read lighter for etcd and the load longer.")
    # -- groups ---------------------------------------------------------------
    group_min_session_timeout_ms: int = _setting(6000, _MS, "Smallest session timeout a member may ask for.")
    group_max_session_timeout_ms: int = _setting(1800000, _MS, "Largest session timeout a member may ask for.")
    group_initial_rebalance_delay_ms: int = _setting(3000, _MS, "How long the first rebalance of an empty group waits for more members.")
    group_max_size: int = _setting(INT32_MAX, IntKind(1), "Most members one group may have (GROUP_MAX_SIZE_REACHED beyond).")
    group_new_member_join_timeout_ms: int = _setting(300000, _POSITIVE_MS, "How long a new member that has not rejoined is kept during a rebalance.")
    # KIP-848 consumer groups (Kafka's GroupCoordinatorConfig names and defaults)
    group_consumer_session_timeout_ms: int = _setting(45000, _POSITIVE_MS, "Consumer groups: a member that has not heartbeated for this long is removed.")
    group_consumer_min_session_timeout_ms: int = _setting(45000, _POSITIVE_MS, "Consumer groups: smallest session timeout (a lower group.consumer.session.timeout.ms is refused).")
    group_consumer_max_session_timeout_ms: int = _setting(60000, _POSITIVE_MS, "Consumer groups: largest session timeout.")
    group_consumer_heartbeat_interval_ms: int = _setting(5000, _POSITIVE_MS, "Consumer groups: how often members are told to heartbeat.")
    group_consumer_min_heartbeat_interval_ms: int = _setting(5000, _POSITIVE_MS, "Consumer groups: smallest heartbeat interval.")
    group_consumer_max_heartbeat_interval_ms: int = _setting(15000, _POSITIVE_MS, "Consumer groups: largest heartbeat interval.")
    group_consumer_assignment_interval_ms: int = _setting(1000, _MS, "Consumer groups: the assignor runs at most once per this long per group (changes in between are batched).")
    group_consumer_max_size: int = _setting(INT32_MAX, IntKind(1), "Consumer groups: most members one group may have (GROUP_MAX_SIZE_REACHED beyond).")
    group_consumer_assignors: str = _setting("uniform,range", NameListKind(",", CONSUMER_GROUP_ASSIGNORS), "Consumer groups: server-side assignors members may name; the first is the default.")
    group_consumer_migration_policy: str = _setting("bidirectional", ChoiceKind(CONSUMER_GROUP_MIGRATION_POLICIES), "Consumer groups: online conversion between classic and consumer groups (disabled, upgrade, downgrade, bidirectional).")
    group_overview_max_pages_per_second: int = _setting(50, IntKind(1, 100000), "GroupOverview (the console's group list) pages one principal may ask of a node per second; faster pages wait (up to a second) or answer THROTTLING_QUOTA_EXCEEDED.")
    group_journal_max_entries: int = _setting(100, IntKind(1, 100000), "Journal entries (rebalances, admin actions) kept per group (`cohort groups rebalances`).")
    group_health_window_commits: int = _setting(10, IntKind(2, 1000), "Group health (Burrow's rules): commits kept per partition in the sliding window it is judged over (Burrow's intervals).")
    group_health_window_min_distance_ms: int = _setting(5000, IntKind(100, 3600000), "Group health: the least time between two commits of a partition's window (Burrow's min-distance; a closer commit replaces the newest); groups are sampled this often.")
    # -- offsets --------------------------------------------------------------
    offset_metadata_max_bytes: int = _setting(4096, IntKind(0, 32767), "Largest commit metadata string (OFFSET_METADATA_TOO_LARGE beyond; the record format holds at most 32767 bytes).")
    offsets_retention_minutes: int = _setting(10080, IntKind(1), "How long committed offsets of an empty group are kept.")
    offsets_history_retention_ms: int = _setting(86400000, IntKind(0, INT64_MAX), "Compaction keeps every offset commit newer than this (`cohort groups history`, `--to-commit-at`); 0 keeps only the latest, as Kafka.")
    offsets_retention_check_interval_ms: int = _setting(600000, _POSITIVE_MS, "How often expired offsets are looked for.")
    offsets_topic_num_partitions: int = _setting(50, IntKind(1), "Offsets partitions groups are hashed onto (Kafka's rule).")
    offsets_topic_segment_bytes: int = _setting(104857600, IntKind(1), "Size at which an offsets log segment is rolled (it also rolls once it holds twice what the compacted segments before it hold, from 8 MiB up).")
    offsets_topic_segment_ms: int = _setting(604800000, IntKind(0, INT64_MAX), "Age at which an offsets log segment is rolled by its next write (0 = never; Kafka's log.roll.ms).")
    offsets_commit_timeout_ms: int = _setting(5000, _POSITIVE_MS, "Longest a commit waits for its write to become durable.")
    offsets_flush_policy: str = _setting("always", FlushPolicyKind(), "When the offsets log is fsynced: always (before acking), never, or every N ms.")
    delete_retention_ms: int = _setting(86400000, _MS, "How long compaction keeps tombstones.")
    log_cleaner_backoff_ms: int = _setting(15000, _MS, "Pause between compaction checks.")
    # -- topics ---------------------------------------------------------------
    auto_create_topics_enable: bool = _setting(True, BoolKind(), "Create unknown topics named in Metadata requests.")
    num_partitions: int = _setting(1, IntKind(1), "Partition count of auto-created topics.")
    fetch_max_wait_cap_ms: int = _setting(500, _MS, "Cap on how long an (always empty) Fetch is held.")
    # -- limits that protect the server ----------------------------------------
    socket_request_max_bytes: int = _setting(104857600, IntKind(1), "Largest request frame accepted; bigger ones close the connection.")
    small_request_max_bytes: int = _setting(2097152, IntKind(262144), "Largest request of an API whose requests are small by nature (every API but OffsetCommit, OffsetFetch, OffsetDelete, JoinGroup, SyncGroup, Fetch, ConsumerGroupHeartbeat and ConsumerGroupDescribe, which only socket.request.max.bytes bounds); a bigger one closes the connection before it is decoded.")
    max_connections: int = _setting(10000, IntKind(1), "Most client connections open at once, counted from accept (a TLS handshake holds a slot); more are refused.")
    max_connections_per_ip: int = _setting(INT32_MAX, IntKind(0), "Most connections open at once from one client address; more are closed at accept (Kafka's setting; 0 needs max.connections.per.ip.overrides).")
    max_connections_per_ip_overrides: str = _setting("", ConnectionOverridesKind(), "Per-address exceptions to max.connections.per.ip, host:count comma-separated (a host name or IP address).")
    connections_authentication_timeout_ms: int = _setting(10000, _POSITIVE_MS, "A connection on an SSL or SASL listener must finish its TLS handshake and SASL authentication within this long of its accept, or it is closed.")
    queued_max_requests_per_connection: int = _setting(500, IntKind(1), "Most requests in flight on one connection before reading pauses.")
    connections_max_idle_ms: int = _setting(600000, _POSITIVE_MS, "Idle connections are closed after this long.")
    queued_max_request_bytes: int = _setting(104857600, IntKind(1), "Bytes of partly received requests held for all connections together; a connection that would go beyond waits (reading paused) until others finish.")
    socket_request_read_timeout_ms: int = _setting(30000, _POSITIVE_MS, "A request must arrive whole within this long of its first byte, or its connection is closed (slow-sending clients).")
    # -- security -----------------------------------------------------------------
    sasl_enabled_mechanisms: str = _setting("SCRAM-SHA-256,SCRAM-SHA-512", NameListKind(",", SASL_MECHANISMS, upper=True), "SASL mechanisms offered on SASL_PLAINTEXT/SASL_SSL listeners.")
    connection_failed_authentication_delay_ms: int = _setting(100, _MS, "How long a connection that failed to authenticate is held before it is closed.")
    connections_max_reauth_ms: int = _setting(0, IntKind(0, INT64_MAX), "SASL sessions last this long (OAUTHBEARER: at most until the token expires); clients re-authenticate on the same connection before it ends (KIP-368), else it is closed. 0 = never.")
    sasl_oauthbearer_jwks_endpoint_url: str | None = _setting(None, TextKind(), "OAUTHBEARER: the JWKS with the keys tokens are signed with, as a file:// URL (read again when it changes).")
    sasl_oauthbearer_expected_audience: str = _setting("", NameListKind(","), "OAUTHBEARER: a token's aud must name one of these (comma-separated; empty = not checked).")
    sasl_oauthbearer_expected_issuer: str | None = _setting(None, TextKind(), "OAUTHBEARER: a token's iss must be this (unset = not checked).")
    sasl_oauthbearer_sub_claim_name: str = _setting("sub", TextKind(nullable=False), "OAUTHBEARER: the claim whose value is the principal name (User:<value>).")
    sasl_oauthbearer_clock_skew_seconds: int = _setting(30, IntKind(0, 3600), "OAUTHBEARER: leeway when checking a token's exp, nbf and iat.")
    authorizer_class_name: str = _setting("", AuthorizerKind(), "Kafka's ACL authorizer (org.apache.kafka.metadata.authorizer.StandardAuthorizer, or acl); empty = every client may do everything.")
    super_users: str = _setting("", NameListKind(";"), "Principals allowed everything, semicolon-separated (User:admin;User:ops).")
    allow_everyone_if_no_acl_found: bool = _setting(False, BoolKind(), "With an authorizer: allow actions on resources that have no ACL at all.")
    ssl_keystore_type: str = _setting("PEM", ChoiceKind(("PEM",), upper=True), "Format of ssl.keystore.location (PEM).")
    ssl_keystore_location: Path | None = _setting(None, PathKind(nullable=True), "PEM file with this server's private key and certificate chain (needed by SSL/SASL_SSL listeners).")
    ssl_key_password: str | None = _setting(None, SecretKind(), "Password of an encrypted private key in ssl.keystore.location.")
    ssl_truststore_type: str = _setting("PEM", ChoiceKind(("PEM",), upper=True), "Format of ssl.truststore.location (PEM).")
    ssl_truststore_location: Path | None = _setting(None, PathKind(nullable=True), "PEM file of CA certificates client certificates are checked against.")
    ssl_client_auth: str = _setting("none", ChoiceKind(("none", "requested", "required")), "Whether SSL listeners ask clients for a certificate (the principal is then its subject).")
    # -- operations -------------------------------------------------------------
    metrics_listen: str = _setting("127.0.0.1:9464", ListenerKind(), "Address of the Prometheus /metrics and /health HTTP server.", "--metrics")
    console_listen: str | None = _setting(None, ListenerKind(nullable=True, unset_means="no console"), "Address of the web console and its JSON API (HTTP; HTTPS with the listeners' keystore when a listener uses TLS); unset = no console.")
    console_allowed_hosts: str = _setting("", NameListKind(","), "Host names the console answers besides its listen address, localhost and IP addresses (names a proxy or DNS gives it); other Host headers get 421 (DNS rebinding).")
    console_allow_insecure_sign_in: bool = _setting(False, BoolKind(), "Let the console ask for passwords (HTTP Basic) over plain HTTP when no listener uses TLS; refused at start-up otherwise.")
    console_max_connections: int = _setting(64, IntKind(1, 100_000), "Most console (HTTP) connections open at once, counted from accept; more are closed at once. At most a quarter of the process's descriptor limit (RLIMIT_NOFILE) is used, so the Kafka listeners keep the rest.")
    console_max_connections_per_ip: int = _setting(16, IntKind(1, 100_000), "Most console connections open at once from one browser address; more are closed at once.")
    console_request_timeout_ms: int = _setting(5000, IntKind(100, 600_000), "A console request's header and body must arrive whole within this long of its first byte (of the accept, for a connection's first request; of the TLS handshake's start too), or its connection is closed.")
    console_connections_max_idle_ms: int = _setting(30000, IntKind(100, 3_600_000), "A console connection with no request under way is closed after this long (browsers open a new one).")
    console_sign_in_failures_per_ip: int = _setting(10, IntKind(1, 100_000), "Console sign-ins: wrong passwords one browser address may send at once; then one per console.sign.in.failure.interval.ms, and sign-ins beyond answer 429 without a password check.")
    console_sign_in_failures_per_user: int = _setting(20, IntKind(1, 100_000), "Console sign-ins: wrong passwords for one user name, from every address together, at once; then one per console.sign.in.failure.interval.ms / 4 (429 beyond).")
    console_sign_in_failure_interval_ms: int = _setting(1000, IntKind(1, 3_600_000), "Console sign-ins: the time in which one browser address earns back one wrong password (a user name earns back four).")
    console_trusted_proxies: str = _setting("", NameListKind(","), "IP addresses of reverse proxies whose X-Forwarded-For names the browser's address (for the console's sign-in budget and access log); from any other peer the header is ignored.")
    metrics_max_connections: int = _setting(16, IntKind(1, 100_000), "Most connections to the metrics port (/metrics, /health) open at once, counted from accept; more are closed at once. At most a sixteenth of the process's descriptor limit (RLIMIT_NOFILE) is used, so the Kafka listeners keep the rest.")
    metrics_max_connections_per_ip: int = _setting(8, IntKind(1, 100_000), "Most connections to the metrics port open at once from one address; more are closed at once.")
    metrics_request_timeout_ms: int = _setting(5000, IntKind(100, 600_000), "A request to the metrics port must arrive whole (its head) within this long of the accept, or its connection is closed.")
    metrics_group_id_labels_enable: bool = _setting(True, BoolKind(), "Name groups in /metrics (group health series; long ids cut and hashed); false = no group id in any series, health counted per status (nodes shared by tenants).")
    metrics_group_offsets_enable: bool = _setting(False, BoolKind(), "Export per-partition series in kafka-exporter's shape (cohort_consumergroup_current_offset and _lag{consumergroup,topic,partition}, _lag_sum, _members) and cohort_group_committed_offset: one series per group, topic and partition (high cardinality: see metrics.group.offsets.max.partitions).")
    metrics_group_offsets_max_partitions: int = _setting(10000, IntKind(0, 10_000_000), "Most group partitions the per-partition series cover per scrape; the rest are left out and counted in cohort_consumergroup_partition_series_dropped_total.")
    log_format: str = _setting("text", ChoiceKind(("text", "json")), "Log line format.", "--log-format")
    log_level: str = _setting("INFO", ChoiceKind(("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), aliases=(("WARN", "WARNING"),), upper=True), "Least severe level logged.", "--log-level")
    log_aggregation_interval_ms: int = _setting(60000, _POSITIVE_MS, "Failed logins, refused requests, malformed frames and failed TLS handshakes from one client address: the first is logged, the rest of this interval counted into one line.")
    log_file: Path | None = _setting(None, PathKind(nullable=True), "Write logs to this file instead of stderr (reopened on SIGHUP).", "--log-file")
    shutdown_timeout_ms: int = _setting(10000, _POSITIVE_MS, "Longest a graceful shutdown may take before the server exits anyway.")

    def __post_init__(self) -> None:
        for spec in SETTINGS:
            value = getattr(self, spec.attr)
            try:
                normal = spec.kind.check(value)
            except ValueError as exc:
                raise ConfigError(f"invalid {spec.name}: {exc}") from None
            if normal is not value:
                object.__setattr__(self, spec.attr, normal)
        _check_together(self)

    # -- derived views ---------------------------------------------------------
    @property
    def endpoints(self) -> list[Endpoint]:
        """Every listener, in the order given (the first one is the main one)."""
        return parse_endpoints(self.listeners)

    @property
    def listen_address(self) -> HostPort:
        """The first listener's address."""
        return self.endpoints[0].address

    def advertised_endpoint(self, name: str) -> HostPort:
        """What clients of listener `name` are told to connect to: its advertised entry, else its own address.

        With port 0 the server should substitute the port it actually bound.
        """
        if self.advertised_listeners:
            for e in parse_endpoints(self.advertised_listeners, bindable=False):
                if e.name == name:
                    return e.address
        for e in self.endpoints:
            if e.name == name:
                return e.address
        raise KeyError(name)

    @property
    def advertised_address(self) -> HostPort:
        """What clients of the first listener are told to connect to (falls back to `listeners`)."""
        return self.advertised_endpoint(self.endpoints[0].name)

    def security_protocol(self, listener_name: str) -> str:
        return parse_protocol_map(self.listener_security_protocol_map)[listener_name]

    @property
    def enabled_mechanisms(self) -> tuple[str, ...]:
        return tuple(m for m in self.sasl_enabled_mechanisms.split(",") if m)

    @property
    def super_user_principals(self) -> tuple[str, ...]:
        return tuple(p for p in self.super_users.split(";") if p)

    @property
    def worker_count(self) -> int:
        """`workers` as a number (auto = the cores this process may use, at most the offsets partitions)."""
        if self.workers == "auto":
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            return max(1, min(cores, MAX_WORKERS, self.offsets_topic_num_partitions))
        return int(self.workers)

    def worker_listen_addresses(self, listener: str | None = None) -> list[HostPort]:
        """Where each worker listens on `listener` (default the first): the first one's --worker-ports, else
        the listener's port and the ones after it (0 stays 0)."""
        endpoints = self.endpoints
        endpoint = next((e for e in endpoints if e.name == listener), endpoints[0])
        listen = endpoint.address
        if self.worker_ports is not None and endpoint is endpoints[0]:
            return [HostPort(listen.host, int(p)) for p in self.worker_ports.split(",")]
        step = 0 if listen.port == 0 else 1
        return [HostPort(listen.host, listen.port + k * step) for k in range(self.worker_count)]

    @property
    def metrics_address(self) -> HostPort:
        return parse_host_port(self.metrics_listen)

    @property
    def console_address(self) -> HostPort | None:
        return parse_host_port(self.console_listen) if self.console_listen else None

    @property
    def offsets_flush_interval_ms(self) -> int | None:
        """`offsets_flush_policy` as a number: 0 = always, None = never, else N ms."""
        policy = self.offsets_flush_policy
        if policy == "always":
            return 0
        if policy == "never":
            return None
        return int(policy)


def _check_bounded(config: CoordinatorConfig, name: str, low_name: str, high_name: str) -> None:
    """Kafka's rule for a consumer-group setting with min/max siblings: min <= value <= max."""
    value, low, high = (getattr(config, n.replace(".", "_")) for n in (name, low_name, high_name))
    if low > high:
        raise ConfigError(f"invalid {low_name}: {low} is above {high_name} ({high})")
    if not low <= value <= high:
        raise ConfigError(f"invalid {name}: {value} is outside [{low_name} {low}, {high_name} {high}]")


def _check_together(config: CoordinatorConfig) -> None:
    """Rules that involve more than one setting."""
    if config.group_min_session_timeout_ms > config.group_max_session_timeout_ms:
        raise ConfigError(
            f"invalid group.min.session.timeout.ms: {config.group_min_session_timeout_ms} is above "
            f"group.max.session.timeout.ms ({config.group_max_session_timeout_ms})"
        )
    _check_bounded(config, "group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
                   "group.consumer.max.session.timeout.ms")
    _check_bounded(config, "group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
                   "group.consumer.max.heartbeat.interval.ms")
    if config.group_consumer_heartbeat_interval_ms >= config.group_consumer_session_timeout_ms:
        raise ConfigError(
            f"invalid group.consumer.heartbeat.interval.ms: {config.group_consumer_heartbeat_interval_ms} must be "
            f"below group.consumer.session.timeout.ms ({config.group_consumer_session_timeout_ms})"
        )
    endpoints = config.endpoints
    metrics = config.metrics_address
    protocols = parse_protocol_map(config.listener_security_protocol_map)
    advertised = {e.name: e for e in parse_endpoints(config.advertised_listeners, bindable=False)} \
        if config.advertised_listeners else {}
    ports: set[int] = set()
    for e in endpoints:
        if e.port != 0 and e.address == metrics:
            raise ConfigError(f"invalid metrics.listen: {metrics} is also a Kafka listener (listeners)")
        if e.port != 0 and e.port in ports:
            raise ConfigError(f"invalid listeners: port {e.port} is used by two listeners")
        ports.add(e.port)
        if e.name not in protocols:
            raise ConfigError(f"invalid listeners: listener {e.name} has no entry in listener.security.protocol.map")
        if e.name not in advertised and _is_wildcard(e.host):
            raise ConfigError(
                f"advertised.listeners must be set when listeners binds the wildcard address "
                f"{e.host} (clients cannot connect to it)"
            )
    for name in advertised:
        if name not in {e.name for e in endpoints}:
            raise ConfigError(f"invalid advertised.listeners: listener {name} is not in listeners")
    used = {protocols[e.name] for e in endpoints}
    if used & {"SSL", "SASL_SSL"} and config.ssl_keystore_location is None:
        raise ConfigError("ssl.keystore.location must be set for SSL and SASL_SSL listeners")
    if config.ssl_client_auth != "none" and "SSL" in used and config.ssl_truststore_location is None:
        raise ConfigError(f"ssl.truststore.location must be set when ssl.client.auth is {config.ssl_client_auth}")
    if config.metrics_group_offsets_enable and not config.metrics_group_id_labels_enable:
        raise ConfigError("metrics.group.offsets.enable needs metrics.group.id.labels.enable (its series are "
                          "labelled with group ids)")
    if config.max_connections_per_ip == 0 and not config.max_connections_per_ip_overrides:
        raise ConfigError("invalid max.connections.per.ip: 0 refuses every client unless "
                          "max.connections.per.ip.overrides names the addresses allowed")
    if used & {"SASL_PLAINTEXT", "SASL_SSL"} and not config.enabled_mechanisms:
        raise ConfigError("sasl.enabled.mechanisms must name at least one mechanism for SASL listeners")
    if used & {"SASL_PLAINTEXT", "SASL_SSL"} and "OAUTHBEARER" in config.enabled_mechanisms:
        _check_oauthbearer(config)
    if config.workers != "auto" and config.workers > config.offsets_topic_num_partitions:
        raise ConfigError(f"invalid workers: {config.workers} is more than offsets.topic.num.partitions "
                          f"({config.offsets_topic_num_partitions}); each worker owns at least one")
    if config.worker_ports is not None:
        count = len(config.worker_ports.split(","))
        if config.workers != "auto" and count != config.workers:
            raise ConfigError(f"invalid worker.ports: {count} port(s) for {config.workers} worker(s) (--worker-ports needs one per worker)")
    elif config.workers != "auto" and config.listen_address.port + config.workers - 1 > 65535:
        raise ConfigError(f"invalid workers: ports {config.listen_address.port}..{config.listen_address.port + config.workers - 1} "
                          "go past 65535 (set --worker-ports)")
    if config.cluster is not None and config.workers != 1:
        raise ConfigError("invalid workers: cluster mode runs one coordinator process per node (drop --workers "
                          "or --cluster)")
    if config.workers != 1 and len(endpoints) > 1:
        _check_worker_listener_ports(config)
    if any(e.name == WORKER_LINK_LISTENER for e in endpoints):
        raise ConfigError(f"invalid listeners: {WORKER_LINK_LISTENER} is the name of the workers' own link")
    console = config.console_address
    if console is not None and console.port != 0:
        if console == metrics:
            raise ConfigError(f"invalid console.listen: {console} is also the metrics address (metrics.listen)")
        if any(e.address == console for e in endpoints):
            raise ConfigError(f"invalid console.listen: {console} is also a Kafka listener (listeners)")
    if console is not None and config.authorizer_class_name and not used & {"SASL_PLAINTEXT", "SASL_SSL"}:
        raise ConfigError("console.listen with an authorizer needs a SASL_PLAINTEXT or SASL_SSL listener "
                          "(the console signs its users in over SASL, so the same credentials and ACLs apply)")
    if (console is not None and used & {"SASL_PLAINTEXT", "SASL_SSL"} and not used & {"SSL", "SASL_SSL"}
            and not config.console_allow_insecure_sign_in):
        raise ConfigError("console.listen with a SASL listener would ask for passwords over plain HTTP (no listener "
                          "uses TLS, so the console cannot serve HTTPS): add an SSL or SASL_SSL listener, or set "
                          "console.allow.insecure.sign.in=true")


def _check_worker_listener_ports(config: CoordinatorConfig) -> None:
    """With --workers every listener takes a port per worker (its port, the next ones): no two may meet."""
    taken: dict[int, str] = {}
    for e in config.endpoints:
        for address in config.worker_listen_addresses(e.name):
            if address.port == 0:
                continue
            if address.port > 65535:
                raise ConfigError(f"invalid workers: listener {e.name}'s ports go past 65535")
            if address.port in taken:
                raise ConfigError(f"invalid listeners: with {config.worker_count} workers, listeners "
                                  f"{taken[address.port]} and {e.name} both need port {address.port} (each takes a "
                                  "port per worker)")
            taken[address.port] = e.name


def _check_oauthbearer(config: CoordinatorConfig) -> None:
    url = config.sasl_oauthbearer_jwks_endpoint_url
    if url is None:
        raise ConfigError("sasl.oauthbearer.jwks.endpoint.url must be set when sasl.enabled.mechanisms has "
                          "OAUTHBEARER")
    try:
        parse_file_url(url)
    except ValueError as exc:
        raise ConfigError(f"invalid sasl.oauthbearer.jwks.endpoint.url: {exc}: Cohort reads the JWKS from a file") \
            from None
    try:
        import jwt  # noqa: F401 - the oauthbearer extra
    except ImportError:
        raise ConfigError("OAUTHBEARER needs PyJWT: pip install 'cohort[oauthbearer]'") from None


@dataclass(frozen=True, slots=True)
class Setting:
    """One row of the settings table, derived from a `CoordinatorConfig` field."""

    attr: str
    name: str
    default: Any
    kind: ValueKind
    doc: str
    aliases: tuple[str, ...]

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.attr.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name


SETTINGS: tuple[Setting, ...] = tuple(
    Setting(
        attr=f.name,
        name=f.name.replace("_", "."),
        default=f.default,
        kind=f.metadata["kind"],
        doc=f.metadata["doc"],
        aliases=f.metadata["aliases"],
    )
    for f in dataclasses.fields(CoordinatorConfig)
)
SETTINGS_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
