"""`bench.targets.free_port` never hands out a port twice: the kernel may offer the port it just gave
again once the probing socket is closed, and a server whose listener and metrics port came out equal
refused to start (a restart round of `bench compare` was lost to it)."""
from __future__ import annotations

import socket

from bench import targets


def test_a_port_offered_again_by_the_kernel_is_not_handed_out_twice(monkeypatch):
    offered = iter([41_000, 41_000, 41_000, 41_001])  # the kernel's choices, made repeatable
    monkeypatch.setattr(targets, "_HANDED_OUT", set())
    monkeypatch.setattr(targets, "_probe_port", lambda: next(offered))

    assert [targets.free_port(), targets.free_port()] == [41_000, 41_001]


def test_real_ports_are_free_and_distinct():
    ports = [targets.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    for port in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: nothing holds it
