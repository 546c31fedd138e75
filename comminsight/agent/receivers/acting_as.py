"""The Agent's file operations in a user's directory of a shared home, done as that user.

A node Agent that runs as root and serves every user writes into their directories: the
records a dead process left only in SHM go to its logs, a refused file is moved aside, an
ended process's region is removed. Each directory belongs to its user, who may swap any
entry in it for a link between the Agent's check and its use; done as root, such a write
would follow the link anywhere. So these operations run with the thread's filesystem
identity set to the directory's owner (Linux setfsuid/setfsgid, which change only the calling
thread's, unlike setuid): the kernel then checks every path as it would for that user, and
what the Agent creates there is theirs. Reads need no such care: every file read is checked
on its descriptor (safe_open).

Changing the filesystem uid from 0 also drops the file capabilities of the thread for the
time, and restores them after. An Agent that is not root needs CAP_SETUID and CAP_SETGID for
this; without them the operation is refused (ActingAsError), never done with the Agent's own
rights.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_libc = ctypes.CDLL(None, use_errno=True)
_setfsuid = _libc.setfsuid
_setfsgid = _libc.setfsgid
_setfsuid.argtypes = _setfsgid.argtypes = [ctypes.c_uint]
_setfsuid.restype = _setfsgid.restype = ctypes.c_int

_NO_CHANGE = 0xFFFFFFFF  # (uid_t)-1: setfsuid changes nothing and returns the current one
_state = threading.local()


class ActingAsError(PermissionError):
    """This thread could not take a user's filesystem identity."""


def _current_fsuid() -> int:
    return _setfsuid(_NO_CHANGE) & 0xFFFFFFFF


def _current_fsgid() -> int:
    return _setfsgid(_NO_CHANGE) & 0xFFFFFFFF


def _switch(uid: int, gid: int) -> None:
    # group first: once the uid is the user's, the thread may no longer change its group
    _setfsgid(gid)
    _setfsuid(uid)
    if _current_fsuid() != uid or _current_fsgid() != gid:
        raise ActingAsError(
            errno.EPERM,
            f"cannot act as uid {uid} gid {gid} on files (setfsuid/setfsgid refused: the Agent "
            "needs root or CAP_SETUID and CAP_SETGID)",
        )


@contextmanager
def files_as(uid: int | None, gid: int | None = None) -> Iterator[None]:
    """Within the block, this thread's file operations are checked and owned as `uid` (and
    `gid`, default the uid's own number). None, or the Agent's own uid: nothing changes.
    Nested blocks must name the same user."""
    if uid is None or uid == os.geteuid():
        yield
        return
    gid = uid if gid is None else gid
    depth = getattr(_state, "depth", 0)
    if depth:
        if getattr(_state, "who", None) != (uid, gid):
            raise ActingAsError(errno.EPERM, "already acting as another user on this thread")
        _state.depth = depth + 1
        try:
            yield
        finally:
            _state.depth -= 1
        return
    before = (_current_fsuid(), _current_fsgid())
    try:
        _switch(uid, gid)
    except ActingAsError:
        _restore(*before)
        raise
    _state.depth, _state.who = 1, (uid, gid)
    try:
        yield
    finally:
        _state.depth, _state.who = 0, None
        _restore(*before)


def _restore(uid: int, gid: int) -> None:
    _setfsuid(uid)  # the uid first: back to root, the group may be changed again
    _setfsgid(gid)
