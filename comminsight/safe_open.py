"""Open a file another process hands the Agent (an SHM region, a FIFO, Inject's metadata)
without trusting its path: never follow a symbolic link, never block, and check what was
opened, on the descriptor itself (a check of the path before opening it could be raced).

The Agent reads these files with its own privileges; a file that another user owns or can
write could feed it forged data, and a FIFO where a regular file belongs would block a plain
open() for ever. `open_checked` refuses both with an `UntrustedFile` error naming the path
and the reason, a short word for counters (`reason`) and a sentence for logs and health.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import BinaryIO

# what a file must be, by the test fstat's mode passes
KINDS: dict[str, Callable[[int], bool]] = {
    "regular file": stat.S_ISREG,
    "FIFO": stat.S_ISFIFO,
    "directory": stat.S_ISDIR,
}


class UntrustedFile(OSError):
    """A file that is not what it must be, or not the Agent's; `reason` is a short label."""

    def __init__(self, path: str | os.PathLike, reason: str, why: str, err: int = errno.EPERM):
        super().__init__(err, f"{path}: {why}")
        self.path = str(path)
        self.reason = reason
        self.why = why

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def kind_of(mode: int) -> str:
    for name, test in KINDS.items():
        if test(mode):
            return name
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def check_fd(
    fd: int, path: str | os.PathLike, kind: str, owner: int | None, shared_ok: bool = False
) -> os.stat_result:
    """fstat fd: the right kind, owned by `owner` (None: anyone), not writable by group or
    others (unless shared_ok). Raises UntrustedFile."""
    st = os.fstat(fd)
    if not KINDS[kind](st.st_mode):
        raise UntrustedFile(
            path, "not_" + kind.split()[-1].lower(), f"is a {kind_of(st.st_mode)}, not a {kind}"
        )
    if owner is not None and st.st_uid != owner:
        raise UntrustedFile(
            path, "other_owner", f"is owned by uid {st.st_uid}, not by this Agent's uid {owner}"
        )
    if not shared_ok and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UntrustedFile(
            path,
            "writable_by_others",
            f"mode {stat.filemode(st.st_mode)} lets group or others write it",
        )
    return st


def open_checked(
    path: str | os.PathLike,
    kind: str,
    flags: int = os.O_RDONLY,
    owner: int | None = -1,
    shared_ok: bool = False,
) -> tuple[int, os.stat_result]:
    """An fd of path opened O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC and checked (check_fd).
    owner -1: the Agent's effective uid. OSError for a path that cannot be opened at all;
    UntrustedFile (an OSError) for one that is not what it must be."""
    if owner == -1:
        owner = os.geteuid()
    try:
        # O_NOCTTY: a terminal put where a file belongs never becomes the Agent's own
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as e:
        if e.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
            raise UntrustedFile(path, "symlink", "is a symbolic link", errno.ELOOP) from None
        raise
    try:
        st = check_fd(fd, path, kind, owner, shared_ok)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def open_regular(path: str | os.PathLike, max_bytes: int) -> BinaryIO:
    """A file the Agent or a tool reads back from a home (its own stores, step files, log
    segments, certificates) opened for reading: a regular file, not a link, of at most
    max_bytes. A FIFO planted there would block a plain open() or read() for ever and a sparse
    file of terabytes would exhaust memory; both are refused with an UntrustedFile (reasons
    `not_file`, `symlink`, `too_large`). Anyone may own the file: the home's own checks decide
    who may write there."""
    fd, st = open_checked(path, "regular file", owner=None, shared_ok=True)
    if st.st_size > max_bytes:
        os.close(fd)
        raise UntrustedFile(
            path,
            "too_large",
            f"is {st.st_size} bytes, more than the {max_bytes} allowed",
            errno.EFBIG,
        )
    return os.fdopen(fd, "rb")


READ_CHUNK_BYTES = 1 << 20


def read_regular(path: str | os.PathLike, max_bytes: int) -> bytes:
    """The whole of a file open_regular accepts (and still within max_bytes once read: it
    may grow while it is read)."""
    # read in chunks: one read(max_bytes + 1) would allocate the whole cap up front
    chunks: list[bytes] = []
    total = 0
    with open_regular(path, max_bytes) as f:
        while total <= max_bytes:
            chunk = f.read(min(READ_CHUNK_BYTES, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise UntrustedFile(
            path, "too_large", f"grew past the {max_bytes} bytes allowed while read", errno.EFBIG
        )
    return data
