"""Inject's optimizer-step markers as the node Agent keeps them for its live Semantic Engine.

The Agent's loop adds each `step` line it reads (inject_names); the engine's thread asks for a
process's markers at every cut, hence the lock. Memory is bounded however long the node runs
and whatever a user writes: the newest MARKERS_KEPT times of each optimizer class, at most
MARKER_CLASSES classes per process (a GAN has two; lines of more are not kept), and the
markers of at most MARKER_PROCESSES processes per owner (the user whose directory the lines
were in), those that stepped least recently let go first: a user who floods the node with
processes lets go of their own markers only. The class that stepped most often over all
its lines marks the Steps, as the offline reader takes it (step_markers): a count per class
is kept beside the newest times, so a class whose times were cut to MARKERS_KEPT still
counts every step.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Hashable

import numpy as np

# far more Steps than the live engine's window of ops spans
MARKERS_KEPT = 1024
MARKER_CLASSES = 8
MARKER_PROCESSES = 512


class _Class:
    __slots__ = ("count", "times")

    def __init__(self) -> None:
        self.count = 0
        self.times: deque[int] = deque(maxlen=MARKERS_KEPT)


class StepMarkerStore:
    def __init__(self) -> None:
        self._by_process: dict[Hashable, dict[str, _Class]] = {}
        self._owned: dict[Hashable, OrderedDict[Hashable, None]] = {}  # owner -> its processes
        self._owner_of: dict[Hashable, Hashable] = {}
        self._lock = threading.Lock()

    def add(self, owner: Hashable, process: Hashable, optimizer: str, mono_ns: int) -> None:
        with self._lock:
            by_class = self._by_process.get(process)
            owned = self._owned.setdefault(owner, OrderedDict())
            if by_class is None:
                by_class = self._by_process[process] = {}
                self._owner_of[process] = owner
                owned[process] = None
                while len(owned) > MARKER_PROCESSES:
                    gone, _ = owned.popitem(last=False)
                    del self._by_process[gone], self._owner_of[gone]
            elif process in owned:
                owned.move_to_end(process)
            kept = by_class.get(optimizer)
            if kept is None:
                if len(by_class) >= MARKER_CLASSES:
                    return
                kept = by_class[optimizer] = _Class()
            kept.count += 1
            kept.times.append(mono_ns)

    def forget(self, process: Hashable) -> None:
        with self._lock:
            if self._by_process.pop(process, None) is not None:
                owner = self._owner_of.pop(process)
                self._owned[owner].pop(process, None)

    def markers(self, process: Hashable) -> np.ndarray | None:
        """The sorted host times of the class that stepped most often (ties: the first
        name), each once; None without any."""
        with self._lock:
            by_class = self._by_process.get(process)
            if not by_class:
                return None
            name = min(by_class, key=lambda n: (-by_class[n].count, n))
            times = list(by_class[name].times)
        return np.unique(np.array(times, np.int64))

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_process)

    def owned(self, owner: Hashable) -> int:
        with self._lock:
            return len(self._owned.get(owner, ()))
