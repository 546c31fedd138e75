"""Whether a process still runs: its pid exists and it is not a zombie.

`kill(pid, 0)` succeeds for a zombie, a process that has exited but that its parent has not
reaped yet (a launcher stuck itself, or one that polls its children lazily). A zombie runs
no code: for its peers it is gone. Linux says so in /proc/<pid>/stat; where that cannot be
read the pid's existence is all there is.
"""

from __future__ import annotations

import os


def process_runs(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        pass
    return _state(pid) not in ("Z", "X")


def _state(pid: int) -> str | None:
    """The one-letter state of /proc/<pid>/stat (after the command name, which may hold
    spaces and parentheses: the last ')' ends it); None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    after = stat.rfind(b")")
    fields = stat[after + 1 :].split()
    return fields[0].decode("ascii", "replace") if after >= 0 and fields else None
