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
        if identity.pid_namespace and identity.pid_namespace != _pid_namespace():
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
    return identity is None or _same_process(fields, identity)


def _same_process(fields: list[str], identity: ProcessIdentity) -> bool:
    try:
        start_ticks = int(fields[_START_TICKS])
    except (IndexError, ValueError):
        return True
    if identity.start_ticks:
        return start_ticks == identity.start_ticks
    if identity.created_mono_ns:
        # The producer started before it created its region. starttime counts from boot
        # (CLOCK_BOOTTIME, which runs ahead of CLOCK_MONOTONIC by the time suspended, a gap
        # that only grows): a process that started after created + today's gap + one tick
        # started after the region was made, so it is not the region's producer.
        tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
        gap_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()
        return start_ticks * tick_ns <= identity.created_mono_ns + gap_ns + tick_ns
    return True


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
def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0
