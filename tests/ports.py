"""Ports for the servers tests start (Agents, masters, a rendezvous), each worker in a range of
its own below the kernel's ephemeral range.

A port the kernel hands out for `bind(0)` is free only until something else takes it: a client
connection of another test gets its local port from the same ephemeral range, and did take one
between a test's choice and its Agent's bind ("address already in use", on a loaded run with
six workers). Below that range the kernel gives no port on its own; each pytest-xdist worker
takes ports from its own block, and a port something else holds is passed over.
"""

from __future__ import annotations

import itertools
import os
import random
import socket

BLOCK = 700  # ports per worker: 16 workers fit below the default range (32768-60999)
WORKERS = 16


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker() -> int:
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) % WORKERS if name[2:].isdigit() else 0


def _candidates():
    first = _ephemeral_low() - WORKERS * BLOCK + _worker() * BLOCK
    if first < 1024:  # an ephemeral range set unusually low: the kernel's choice, as before
        return None
    # a random start: two runs side by side (two clones' make test) rarely meet
    start = random.randrange(BLOCK)
    return itertools.cycle([first + (start + k) % BLOCK for k in range(BLOCK)])


_NEXT = _candidates()


def free_port() -> int:
    """A TCP port no one listens on, on every interface, now; not one this process gave before
    (until its worker's block wraps)."""
    if _NEXT is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    for _ in range(BLOCK):
        port = next(_NEXT)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in this worker's {BLOCK} ports below the ephemeral range")
