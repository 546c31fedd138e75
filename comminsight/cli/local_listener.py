"""Who listens on this host's loopback: the listening TCP sockets of /proc/net/tcp and
/proc/net/tcp6 (this network namespace's), with the uid owning each, and those among them a
connection to a URL's host and port would reach.

Only reads: bounded (`MAX_BYTES` a file), and a line that is not a well-formed row is skipped.
An empty answer means "no listener known", never "safe": the caller decides what that means.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import struct
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

PROC_NET_TCP = ("/proc/net/tcp", "/proc/net/tcp6")
MAX_BYTES = 16 << 20  # ~100,000 sockets; listening ones come first
LISTEN = "0A"
# "sl local_address rem_address st ... uid": local is the address's 32-bit words in hex, each
# as the kernel's native integer, then the port
LOCAL = re.compile(r"([0-9A-Fa-f]{8}|[0-9A-Fa-f]{32}):([0-9A-Fa-f]{4})")
UID = re.compile(r"[0-9]{1,10}")


@dataclass(frozen=True)
class Listener:
    address: Address
    port: int
    uid: int


def parse(text: str) -> list[Listener]:
    """The LISTEN rows of a /proc/net/tcp or /proc/net/tcp6 text; anything else is skipped."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8 or fields[3] != LISTEN:
            continue
        local, uid = LOCAL.fullmatch(fields[1]), UID.fullmatch(fields[7])
        if local is None or uid is None:
            continue
        words = local.group(1)
        raw = b"".join(
            struct.pack("=I", int(words[i : i + 8], 16)) for i in range(0, len(words), 8)
        )
        address = ipaddress.ip_address(raw)
        found.append(Listener(address, int(local.group(2), 16), int(uid.group())))
    return found


def read_listeners(paths: tuple[str, ...] = PROC_NET_TCP) -> list[Listener]:
    """The listening sockets of this network namespace; a file that cannot be read adds none."""
    found = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_BYTES)
        except OSError:
            continue
        found += parse(data.decode("ascii", "replace"))
    return found


def loopback_targets(host: str, port: int) -> list[Address]:
    """The loopback addresses a connection to `host` may go to: an address literal of
    127.0.0.0/8 or ::1 (0.0.0.0 and :: connect to loopback too), or what a name resolves to
    among them (`localhost`, a host name mapped to 127.0.1.1). Empty for anything else, and
    for a name that does not resolve (the request then fails on its own)."""
    try:
        addresses = [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            return []
        addresses = []
        for info in infos:
            try:
                addresses.append(ipaddress.ip_address(info[4][0]))
            except ValueError:  # a scoped IPv6 address ("fe80::1%eth0"): not loopback
                continue
    targets = []
    for address in addresses:
        address = _unmapped(address)
        if address.is_unspecified:
            address = ipaddress.ip_address("127.0.0.1" if address.version == 4 else "::1")
        if address.is_loopback and address not in targets:
            targets.append(address)
    return targets


def accepts(listener: Listener, address: Address, port: int) -> bool:
    """Whether `listener` takes a connection to `address`:`port`: bound to that address or to
    every address (a :: socket also takes IPv4 unless it is IPV6_ONLY, which /proc does not
    say: assumed it does)."""
    if listener.port != port:
        return False
    bound = _unmapped(listener.address)
    if bound.version != address.version:
        return bound.version == 6 and bound.is_unspecified
    return bound == address or bound.is_unspecified


def listeners_for(host: str, port: int) -> list[Listener]:
    """The listening sockets a connection to `host`:`port` may reach when `host` is this
    host's loopback; empty when it is not, or when nothing listens there as far as /proc says."""
    targets = loopback_targets(host, port)
    if not targets:
        return []
    return [
        listener
        for listener in read_listeners()
        if any(accepts(listener, target, port) for target in targets)
    ]


def _unmapped(address: Address) -> Address:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
