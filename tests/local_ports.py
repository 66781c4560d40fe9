"""Ports a test fixes for `lambda-idempotency local` (a cluster takes three in a row), picked
below the range the kernel hands out (ip_local_port_range): a free port there stays free, where
one in that range can go to any other server's free-port pick or any outgoing connection before
`local` binds it (as a loaded run once saw)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def bindable(*ports: int) -> bool:
    """Whether nothing holds any of `ports` on loopback, listening or merely bound."""
    for port in ports:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def three_free_ports() -> int:
    """The first of three free ports in a row, below the ephemeral range."""
    lowest_ephemeral = int(EPHEMERAL.read_text().split()[0]) if EPHEMERAL.exists() else 32768
    for _ in range(50):
        first = random.randrange(20000, min(30000, lowest_ephemeral - 3))
        if bindable(first, first + 1, first + 2):
            return first
    raise AssertionError("no three free ports in a row")
