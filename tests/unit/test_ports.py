"""ports.free_port: ports below the kernel's ephemeral range, one block per xdist worker."""

from __future__ import annotations

import socket

import ports


def test_ports_are_below_the_ephemeral_range_distinct_and_bindable():
    low = ports._ephemeral_low()
    given = [ports.free_port() for _ in range(20)]
    assert len(set(given)) == 20
    assert all(1024 <= p < low for p in given), given
    for p in given:
        with socket.socket() as s:
            s.bind(("", p))


def test_a_port_someone_listens_on_is_passed_over(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    first = ports._candidates()
    taken = next(first)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        monkeypatch.setattr(ports, "_NEXT", ports._candidates())
        # a whole block's worth from a random start meets `taken` unless it is passed over
        # (ports other processes hold are passed over too: no count is asserted)
        seen = {ports.free_port() for _ in range(ports.BLOCK)}
    assert taken not in seen


def test_workers_take_ports_from_blocks_of_their_own(monkeypatch):
    blocks = []
    for worker in ("gw0", "gw1", "gw15"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        blocks.append(set(first_of(ports._candidates(), ports.BLOCK)))
    assert all(len(b) == ports.BLOCK for b in blocks)
    assert not (blocks[0] & blocks[1]) and not (blocks[1] & blocks[2])


def first_of(cycle, n):
    return [next(cycle) for _ in range(n)]
