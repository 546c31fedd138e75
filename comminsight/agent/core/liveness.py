"""Whether a process still runs: its pid exists, it is not a zombie, and it is the process
that pid named when the SHM region was made (pids are reused).

`kill(pid, 0)` succeeds for a zombie, a process that has exited but that its parent has not
reaped yet (a launcher stuck itself, or one that polls its children lazily). A zombie runs
no code: for its peers it is gone. Linux says so in /proc/<pid>/stat, which also gives the
process's start time: a pid whose process started after the region was created (or whose
start time differs from the one the Profiler recorded) belongs to another process. A region
from an earlier boot belongs to no running process. A region from another pid namespace is
never judged by pid (its pids are not ours): it counts as running, so nothing of a live
process is ever removed. Where /proc cannot be read the pid's existence is all there is.

A producer may run in a time namespace of its own (a checkpoint-restored container): the
start time it recorded, like every clock it read, is on its namespace's clocks, while
/proc/<pid>/stat shows it on the reader's; /proc/<pid>/timens_offsets gives the difference.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import cache

# /proc/<pid>/stat fields after the command name: [0] is field 3 (state), [19] field 22
# (starttime, clock ticks since boot)
_STATE, _START_TICKS = 0, 19


@dataclass(frozen=True)
class ProcessIdentity:
    """What a region says of its producer beyond the pid; 0 / "" where unknown."""

    start_ticks: int = 0  # /proc/<pid>/stat starttime the Profiler recorded
    boot_id: str = ""
    pid_namespace: int = 0
    created_mono_ns: int = 0  # when the region was created (CLOCK_MONOTONIC)


def process_runs(pid: int, identity: ProcessIdentity | None = None) -> bool:
    if pid <= 0:
        return False
    if identity is not None:
        if identity.boot_id and identity.boot_id != _boot_id():
            return False
        if identity.pid_namespace and identity.pid_namespace != own_pid_namespace():
            return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        pass
    fields = _stat_fields(pid)
    if fields is None:
        return True
    if fields[_STATE] in ("Z", "X"):
        return False
    return identity is None or _same_process(pid, fields, identity)


def process_uid(pid: int) -> int | None:
    """The real uid of a running process (/proc/<pid>/status, `Uid:`); None when unknown."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f.read(8192).splitlines():
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def runs_as(pid: int, identity: ProcessIdentity) -> int | None:
    """The uid the region's producer runs as, where this Agent can tell it is that process
    (its pid in our namespace, running, and the process the region names, not a later one
    with its pid); None where it cannot be told."""
    if pid <= 0 or (identity.pid_namespace and identity.pid_namespace != own_pid_namespace()):
        return None
    fields = _stat_fields(pid)
    if fields is None or fields[_STATE] in ("Z", "X") or not _same_process(pid, fields, identity):
        return None
    return process_uid(pid)


def _same_process(pid: int, fields: list[str], identity: ProcessIdentity) -> bool:
    try:
        start_ticks = int(fields[_START_TICKS])
    except (IndexError, ValueError):
        return True
    shift = namespace_shift(pid)
    tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    if identity.start_ticks:
        if start_ticks == identity.start_ticks:
            return True
        # its own view of its start time: ours shifted by its namespace's boot-time offset
        # (offsets are whole nanoseconds, ticks are not: within a tick)
        return (
            shift is not None
            and abs(start_ticks * tick_ns + shift[1] - identity.start_ticks * tick_ns) < tick_ns
        )
    if identity.created_mono_ns:
        # The producer started before it created its region. starttime counts from boot
        # (CLOCK_BOOTTIME, which runs ahead of CLOCK_MONOTONIC by the time suspended, a gap
        # that only grows): a process that started after created + today's gap + one tick
        # started after the region was made, so it is not the region's producer.
        gap_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()
        created_ns = identity.created_mono_ns - (shift[0] if shift else 0)  # on our clock
        return start_ticks * tick_ns <= created_ns + gap_ns + tick_ns
    return True


def namespace_shift(pid: int) -> tuple[int, int] | None:
    """How far the clocks of `pid`'s time namespace are ahead of this process's, in ns:
    (CLOCK_MONOTONIC, CLOCK_BOOTTIME). (0, 0) for processes that share our namespace; None
    where it cannot be told (no such process, /proc unreadable, a kernel without time
    namespaces)."""
    theirs, ours = _timens_offsets(str(pid)), _own_timens_offsets()
    if theirs is None or ours is None:
        return None
    return theirs[0] - ours[0], theirs[1] - ours[1]


def _timens_offsets(pid: str) -> tuple[int, int] | None:
    """(monotonic, boottime) offsets of a process's time namespace from the host's."""
    try:
        with open(f"/proc/{pid}/timens_offsets", "rb") as f:
            text = f.read(256)
    except OSError:
        return None
    offsets = {}
    for line in text.decode("ascii", "replace").splitlines():
        parts = line.split()
        try:
            offsets[parts[0]] = int(parts[1]) * 1_000_000_000 + int(parts[2])
        except (IndexError, ValueError):
            return None
    if "monotonic" not in offsets or "boottime" not in offsets:
        return None
    return offsets["monotonic"], offsets["boottime"]


@cache
def _own_timens_offsets() -> tuple[int, int] | None:
    return _timens_offsets("self")


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces and
    parentheses: the last ')' ends it); None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    after = stat.rfind(b")")
    fields = stat[after + 1 :].decode("ascii", "replace").split()
    return fields if after >= 0 and fields else None


@cache
def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


@cache
def own_pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0
