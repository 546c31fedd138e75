"""The Agent's Unix socket: where the node's users (the CLI) reach it, each named by the kernel.

The socket is `<home>/agent.sock` unless COMMINSIGHT_AGENT_SOCKET names another path. It is
made in a directory that only the Agent's user or root can change (so nobody can put another
socket in its place), replacing a socket left by an earlier Agent of the same user (the
home's lock says no other Agent of it runs), never another kind of file or another user's.
Its mode is 0666 in a shared home (every user may ask; each sees what is theirs) and 0600 in
one user's own.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from pathlib import Path

from comminsight.agent.receivers.home_check import HomeError, check_ancestors

SOCKET_NAME = "agent.sock"
SUN_PATH_MAX = 107  # sockaddr_un's sun_path, less its NUL


class SocketError(OSError):
    """The socket cannot be made where it is configured; the message says why."""


def socket_path(settings) -> Path:
    return Path(settings.agent_socket or Path(settings.home) / SOCKET_NAME)


def bind_agent_socket(path: Path, shared: bool) -> socket.socket:
    """A listening-ready Unix socket bound at `path`; SocketError naming what is wrong."""
    if len(os.fsencode(path)) > SUN_PATH_MAX:
        raise SocketError(errno.ENAMETOOLONG, f"{path}: longer than {SUN_PATH_MAX} bytes")
    try:
        check_ancestors(path.parent / "x", os.geteuid())
    except HomeError as e:
        raise SocketError(errno.EPERM, f"{path}: {e}") from None
    _remove_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(os.fspath(path))
        # bound with this process's umask (022 leaves others no write, hence no connect);
        # the directory is ours alone, so nobody swaps the path before the change
        os.chmod(path, 0o666 if shared else 0o600)
    except OSError as e:
        sock.close()
        raise SocketError(e.errno, f"cannot make the Agent's socket {path}: {e.strerror}") from None
    return sock


def _remove_stale(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketError(
            errno.EEXIST, f"{path} exists and is no socket: move it away so the Agent can listen"
        )
    if st.st_uid != os.geteuid():
        raise SocketError(
            errno.EPERM, f"{path} is a socket of uid {st.st_uid}, not of this Agent's user"
        )
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def remove_agent_socket(path: Path) -> None:
    """At stop: the socket file goes (a socket of this user's only)."""
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.geteuid():
            os.unlink(path)
