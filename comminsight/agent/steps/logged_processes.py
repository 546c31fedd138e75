"""The processes whose inspector_logs show they ran after a given time.

An Agent that stops before its engine's first checkpoint names a process (killed, or before
the process placed its first op) leaves no state for it, and a process that starts and ends
while no Agent runs is never seen live at all. Their logs hold every op they ran; the next
Agent finds them here and recovers their Steps from them (ended_processes), as an Agent that
never stopped would have written them.

Segments are `ci-<host>-<pid>-<start_mono_ns>-<index>.jsonl[.partial]`, a sealed one possibly
stored compressed as `.jsonl.zst` (one file per index is kept: log_records.keep_segment): one
process is one (pid, start_mono_ns), and its first segment's segment_start line says who it
is. A process counts as having run after `since_real_ns` when one of its segments was written
or renamed (sealed) after it. A compressed copy's times are those of its compression, later
than the seal: the answer stays the same, since the process's own log writer compresses its
segments while it runs (at its end too, and never after): a copy made after `since_real_ns`
was made by a process still running then, and one whose segment was sealed after it was
compressed later still.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from msgspec import UnsetType

from comminsight.agent.steps.log_records import (
    ProcessSegments,
    keep_segment,
    segment_forms,
    segment_start,
)
from comminsight.shm_reader import REGION_NAME
from comminsight_gen.models.inspector_log_v1 import CiSegmentStart

log = logging.getLogger(__name__)

SEGMENT_NAME = re.compile(r"ci-.+-(\d+)-(\d+)-(\d{1,9})\.jsonl(\.partial|\.zst)?$")


@dataclass(frozen=True)
class LoggedProcess:
    pid: int
    start_real_ns: int
    segments: ProcessSegments
    first: CiSegmentStart  # its first segment's first line: who the process is

    @property
    def global_rank(self) -> int | None:
        return _opt(self.first.process.global_rank)

    @property
    def local_rank(self) -> int | None:
        return _opt(self.first.process.local_rank)

    @property
    def job_id(self) -> str | None:
        return _opt(self.first.process.job_id) or None


def logged_since(logs: Path, since_real_ns: int, limit: int) -> tuple[list[LoggedProcess], int]:
    """The processes of `logs` that ran after `since_real_ns`, oldest first (at most `limit`
    of them: the newest are kept), and how many more there were."""
    try:
        entries = list(os.scandir(logs))
    except OSError:
        return [], 0
    groups: dict[tuple[int, int], dict[int, Path]] = {}
    latest: dict[tuple[int, int], int] = {}
    for entry in entries:
        m = SEGMENT_NAME.match(entry.name)
        if m is None:
            continue
        listed = _stat(Path(entry.path), entry)
        if listed is None:
            continue  # removed while listed
        path, st = listed
        key = (int(m.group(1)), int(m.group(2)))
        # a sealed segment wins over its .partial, and over its compressed copy
        keep_segment(groups.setdefault(key, {}), int(m.group(3)), path)
        latest[key] = max(latest.get(key, 0), st.st_mtime_ns, st.st_ctime_ns)
    recent = sorted((t, key) for key, t in latest.items() if t >= since_real_ns)
    skipped = max(0, len(recent) - limit)
    found = []
    for _, (pid, start_mono) in recent[skipped:]:
        paths = [p for _, p in sorted(groups[(pid, start_mono)].items())]
        first = segment_start(paths[0])
        if first is None or first.process.pid != pid:
            log.warning("semantic engine: %s does not start with its segment_start", paths[0])
            continue
        found.append(
            LoggedProcess(
                pid, first.process.start_real_ns, ProcessSegments(start_mono, paths), first
            )
        )
    return found, skipped


def _stat(path: Path, entry: os.DirEntry) -> tuple[Path, os.stat_result] | None:
    """The segment listed as `path` and its stat: where it is gone, the form it took since
    (sealed, or compressed: segment_forms); None where there is none."""
    try:
        return path, entry.stat(follow_symlinks=False)
    except OSError:
        pass
    for later in segment_forms(path)[1:]:
        try:
            return later, os.stat(later, follow_symlinks=False)
        except OSError:
            continue
    return None


def running_pids(shm_files: frozenset[str] | set[str]) -> set[int]:
    """The pids the SHM files of running processes name."""
    return {int(m.group(1)) for name in shm_files if (m := REGION_NAME.fullmatch(name))}


def _opt(value):
    return None if value is None or isinstance(value, UnsetType) else value
