"""Files that survive a crash or power loss: atomic replacement and private directories.

Shared by everything the Agent keeps on disk (archive ledger and uploads, hang reports).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_private_dirs(path: Path) -> None:
    """mkdir -p with every created level 0700 (what the Agent keeps is for its user alone);
    Path.mkdir(parents=True) would give the missing parents the default mode."""
    if path.is_dir():
        return
    make_private_dirs(path.parent)
    path.mkdir(mode=0o700, exist_ok=True)


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace path with data so that a crash leaves the old or the new content, never a mix:
    write a temporary file, fsync, rename over, fsync the directory. The temporary file is
    created anew (a link planted under its name is removed, never followed) and removed
    again when the write fails (a full disk leaves no half-written file behind). `mode`: the
    file's, whatever the umask (0600 unless others must read it)."""
    make_private_dirs(path.parent)
    temp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)  # a leftover of a crash, or a planted link: never written through
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        if mode != 0o600:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    fsync_directory(path.parent)
