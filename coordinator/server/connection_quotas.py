"""How many connections a node holds, in all and per client address (Kafka's ConnectionQuotas).

A connection takes its slot at accept and gives it back when its socket closes,
whatever happened in between: a TLS handshake that never finishes holds a slot
as much as a signed-in client does, so silent sockets cannot hold more
descriptors than ``max.connections``. Per address, ``max.connections.per.ip``
(Kafka's default: 2^31-1) and its exceptions, ``max.connections.per.ip.overrides``
(``host:count,…``; a host name stands for the addresses it resolves to when the
node starts), bound what one client machine may hold; as in Kafka, a connection
beyond either limit is closed at once, before a byte is read.
"""
from __future__ import annotations

import ipaddress
import resource
import socket
from collections.abc import Iterable

from cohort.coordinator.config import parse_connection_overrides


def address_key(host: str) -> str:
    """One spelling per address (an IPv4-mapped IPv6 address is its IPv4 address), so counts and overrides agree."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.compressed


def resolve_overrides(text: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides` with host names resolved (Kafka resolves them too); OSError if one does not."""
    resolved: dict[str, int] = {}
    for host, count in parse_connection_overrides(text).items():
        try:
            addresses: Iterable[str] = [address_key(str(ipaddress.ip_address(host)))]
        except ValueError:
            addresses = {address_key(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
        for address in addresses:
            resolved[address] = count
    return resolved


class ConnectionSlot:
    """One accepted connection's place in the counts; `release` gives it back (once, however often called)."""

    __slots__ = ("_quotas", "address", "released")

    def __init__(self, quotas: "ConnectionQuotas", address: str) -> None:
        self._quotas = quotas
        self.address = address
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._quotas._release(self.address)


class ConnectionQuotas:
    """The counts behind ``max.connections`` and ``max.connections.per.ip`` (one event-loop thread)."""

    def __init__(self, max_connections: int, per_ip: int, overrides: dict[str, int] | None = None) -> None:
        self.max_connections = max_connections
        self.per_ip = per_ip
        self.overrides = dict(overrides or {})
        self.total = 0
        self._by_address: dict[str, int] = {}

    def acquire(self, host: str) -> ConnectionSlot | str:
        """A slot for a connection from `host`, or the name of the limit that refuses it."""
        address = address_key(host)
        held = self._by_address.get(address, 0)
        if held >= self.overrides.get(address, self.per_ip):
            return "max.connections.per.ip"
        if self.total >= self.max_connections:
            return "max.connections"
        self.total += 1
        self._by_address[address] = held + 1
        return ConnectionSlot(self, address)

    def _release(self, address: str) -> None:
        self.total -= 1
        left = self._by_address[address] - 1
        if left:
            self._by_address[address] = left
        else:
            del self._by_address[address]


def descriptor_bound(wanted: int, share: int) -> int:
    """`wanted`, or 1/`share` of RLIMIT_NOFILE when that is less: the Kafka listeners keep the rest."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return wanted
    return max(1, min(wanted, soft // share))
