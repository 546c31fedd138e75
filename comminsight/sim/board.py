"""The rendezvous board: a small file every rank process maps, standing in for the wire.

It holds what real ranks learn from each other through the network: when each participant's
GPU reached an op (its arrival time, on the shared clock below), whether an op was poisoned by a
mismatched participant, and each rank's liveness for the launcher's hang detection. Every cell
is an aligned int64 written by one process only, so plain loads and stores are enough.
"""

from __future__ import annotations

import enum
import functools
import mmap
import os
import time
from pathlib import Path

import numpy as np

MAGIC = 0x31445241_4F424953  # "SIBOARD1"
HEADER_CELLS = 8
RANK_CELLS = 5  # state, state since (ns), last progress (ns), pid, rendezvous reached

H_MAGIC, H_WORLD, H_INSTANCES, H_ABORT, H_ABORT_NS = range(5)
R_STATE, R_SINCE, R_PROGRESS, R_PID, R_READY = range(RANK_CELLS)


def shared_clock_ns() -> int:
    """The clock the launcher and its ranks compare: CLOCK_MONOTONIC of the first time
    namespace, because a rank may run in a time namespace of its own, whose CLOCK_MONOTONIC is
    shifted. Exact, unlike the wall clock, which NTP slews apart from CLOCK_MONOTONIC while a
    run goes on (one process's conversion then disagrees with another's)."""
    return time.monotonic_ns() - monotonic_shift_ns()


@functools.cache
def monotonic_shift_ns() -> int:
    """How far this process's CLOCK_MONOTONIC is ahead of the first time namespace's: 0 on a
    kernel without time namespaces, where every process shares one clock."""
    try:
        with open("/proc/self/timens_offsets") as f:
            for line in f:
                name, seconds, nanoseconds = line.split()
                if name == "monotonic":
                    return int(seconds) * 1_000_000_000 + int(nanoseconds)
    except (OSError, ValueError):
        pass
    return 0


class RankState(enum.IntEnum):
    STARTING = 0
    RUNNING = 1  # the host thread is doing work (compute, calls, a fault's sleep)
    BLOCKED = 2  # the host thread waits for its GPU or for ever (a skipping rank)
    DONE = 3
    ABORTED = 4
    DEAD = 5  # set by the launcher when the process is gone without finishing


class RunAborted(Exception):
    """The launcher aborted the run (a hang held long enough, or the time limit)."""


class Board:
    def __init__(self, path: Path, world: int, instances: int):
        cells = self.cells(world, instances)
        # a plain array over the mapping: np.memmap's indexing costs ten times as much, and
        # every rank's proxy polls the board for each op's peers
        with open(path, "r+b") as f:
            self._map = mmap.mmap(f.fileno(), cells * 8)
        self._mem = np.frombuffer(self._map, dtype=np.int64, count=cells)
        self.world, self.n_instances = world, instances
        self.header = self._mem[:HEADER_CELLS]
        start = HEADER_CELLS
        self.ranks = self._mem[start : start + world * RANK_CELLS].reshape(world, RANK_CELLS)
        start += world * RANK_CELLS
        self.arrivals = self._mem[start : start + instances * world].reshape(instances, world)
        start += instances * world
        self.poisoned = self._mem[start : start + instances]

    @staticmethod
    def cells(world: int, instances: int) -> int:
        return HEADER_CELLS + world * RANK_CELLS + instances * world + instances

    @classmethod
    def create(cls, path: Path, world: int, instances: int) -> Board:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, cls.cells(world, instances) * 8)  # zero-filled
        finally:
            os.close(fd)
        board = cls(path, world, instances)
        board.header[H_WORLD], board.header[H_INSTANCES] = world, instances
        board.header[H_MAGIC] = MAGIC
        board._map.flush()
        return board

    @classmethod
    def attach(cls, path: Path, world: int, instances: int) -> Board:
        board = cls(path, world, instances)
        if int(board.header[H_MAGIC]) != MAGIC or int(board.header[H_WORLD]) != world:
            raise RuntimeError(f"{path} is not this run's rendezvous board")
        return board

    # ---- ranks ----

    def set_state(self, rank: int, state: RankState) -> None:
        self.ranks[rank, R_SINCE] = shared_clock_ns()
        self.ranks[rank, R_STATE] = int(state)

    def state(self, rank: int) -> RankState:
        return RankState(int(self.ranks[rank, R_STATE]))

    def set_pid(self, rank: int, pid: int) -> None:
        self.ranks[rank, R_PID] = pid

    def progress(self, rank: int) -> None:
        self.ranks[rank, R_PROGRESS] = shared_clock_ns()

    def ready(self, rank: int) -> None:
        self.ranks[rank, R_READY] = 1

    def not_ready(self) -> list[int]:
        """Ranks that have neither reached the rendezvous nor ended (dead ones do not hold
        the others back: their peers go on and wait in their first op, as in a real job)."""
        gone = (RankState.DONE, RankState.ABORTED, RankState.DEAD)
        return [
            rank
            for rank in range(self.world)
            if not self.ranks[rank, R_READY]
            and RankState(int(self.ranks[rank, R_STATE])) not in gone
        ]

    # ---- ops ----

    def arrive(self, instance: int, rank: int, gpu_ns: int) -> None:
        self.arrivals[instance, rank] = max(1, gpu_ns)

    def poison(self, instance: int) -> None:
        self.poisoned[instance] = 1

    def arrivals_of(self, instance: int, participants: tuple[int, ...]) -> list[int] | None:
        """Every participant's arrival, or None while one is missing or the op is poisoned."""
        row = self.arrivals[instance]
        values = [int(row[p]) for p in participants]
        if 0 in values:
            return None
        # read after the arrivals: a mismatched rank poisons before it arrives, so once its
        # arrival is seen its poison is too (x86 keeps stores, and loads, in order); read
        # before them, a peer could miss the poison and then see every rank arrived
        if self.poisoned[instance]:
            return None
        return values

    # ---- abort ----

    @property
    def aborted(self) -> bool:
        return bool(self.header[H_ABORT])

    def abort(self) -> None:
        self.header[H_ABORT_NS] = shared_clock_ns()
        self.header[H_ABORT] = 1
