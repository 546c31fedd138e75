"""What the Agent publishes for the Profilers of its home: `<home>/metadata/agent-settings`,
KEY=VALUE lines in the configuration file's format.

One key: COMMINSIGHT_PROFILER_HANG_TIMEOUT_S. The Agent's value decides every verdict, and
each Profiler's watchdog follows it (profiler/src/agent_settings.c, from its next heartbeat)
unless the key is set in that process's own environment: one hang threshold per job, whichever
of the Agent or the ranks was started with it.

Written atomically (write, fsync, rename) when the Agent starts and removed when it stops, so
a Profiler that finds no file is on its own value again. An Agent killed outright leaves its
file behind; the next Agent of the home replaces it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from comminsight.durable_files import write_atomically
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.config_v1 import KEYS

AGENT_SETTINGS = home_names.AGENT_SETTINGS
HANG_TIMEOUT_KEY = next(k.name for k in KEYS if k.field == "profiler_hang_timeout_s")


def settings_path(home: str | Path) -> Path:
    return Path(home) / home_names.METADATA / AGENT_SETTINGS


def settings_text(hang_timeout_s: float) -> str:
    # repr: the shortest text that reads back as the same double, in C (strtod) as here, so
    # both sides compute the same milliseconds from it
    return (
        f"# Written by comminsight-agent (pid {os.getpid()}) for the Profilers of this home; "
        f"removed when it stops.\n{HANG_TIMEOUT_KEY}={float(hang_timeout_s)!r}\n"
    )


def publish(home: str | Path, hang_timeout_s: float, shared: bool = False) -> None:
    """Replace the file with the Agent's value; OSError when it cannot be written. In a
    shared home every user's Profilers read it: it is made readable by all (0644)."""
    mode = 0o644 if shared else 0o600
    write_atomically(settings_path(home), settings_text(hang_timeout_s).encode(), mode)


def withdraw(home: str | Path) -> None:
    """Remove the file: the Profilers go back to their own values."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(settings_path(home))
