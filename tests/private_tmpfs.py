"""A tmpfs of a given size on a directory, mounted in a private mount namespace (`unshare
-rm`) for the commands that run there: a crowded container's /dev/shm, without root."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest


def skip_without_private_tmpfs(directory: Path) -> None:
    """Skip the test where this machine cannot mount one (no user namespaces)."""
    probe = subprocess.run(
        ["unshare", "-rm", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(directory)],
        capture_output=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private tmpfs here: {probe.stderr.decode().strip()}")


def in_private_tmpfs(directory: Path, size: str, script: str) -> list[str]:
    """The command line that runs the shell `script` with `size` of tmpfs on `directory`."""
    mount = f"mount -t tmpfs -o size={size},mode=0700 tmpfs {shlex.quote(str(directory))}"
    return ["unshare", "-rm", "sh", "-c", f"{mount} && {script}"]


def popen_in_private_tmpfs(directory: Path, size: str, argv: list[str], env: dict):
    """`argv` started with `size` of tmpfs on `directory`, its output captured as text."""
    return subprocess.Popen(
        in_private_tmpfs(directory, size, "exec " + shlex.join(argv)),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
