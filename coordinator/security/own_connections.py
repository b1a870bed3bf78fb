"""Connections this process opened to its own Kafka listeners while they sign in (the console's), by address.

The console signs each browser's user in over the node's SASL listener, so every console sign-in
reached the PLAIN check from this machine's address and spent that address's budget of password
checks (`password_checks`): one browser guessing passwords slowed every other user's sign-in and the
Kafka clients on this machine. The console keeps its own budget, per browser address and per user
name; its connections are told apart here by their local address, which no other process can hold
while the console's socket does, and only for the length of their SASL exchange.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class OwnConnections:
    """Addresses (``host:port``, as the listener names its peers) of this process's signing-in sockets."""

    def __init__(self) -> None:
        self._signing_in: set[str] = set()  # (added on the console's thread, read on the Kafka loop's)

    @contextmanager
    def signing_in(self, address: str | None) -> Iterator[None]:
        if address is None:
            yield
            return
        self._signing_in.add(address)
        try:
            yield
        finally:
            self._signing_in.discard(address)

    def __contains__(self, peer: str) -> bool:
        return peer in self._signing_in


OWN_CONNECTIONS = OwnConnections()
