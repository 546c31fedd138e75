"""Where this process writes in a home: the home itself, or, in a node's shared home, its own
`users/<uid>/` directory (the same rule as the Profiler's, profiler/src/home.c).

A shared home is one node Agent's for every user of the node: it belongs to root (who runs
that Agent) and holds `users/`, a directory its owner made sticky so that each user may create
an entry but not remove or rename another's. A process of another user writes its metadata,
stacks, logs and regions under `users/<euid>/`, made here if missing (0700), never through a
link, and only when it is this user's alone: the Agent attributes what is in it to its owner.
The standard library only: this module ships in the dependency-free Inject wheel.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

USERS = "users"


class TenantHomeError(OSError):
    """A shared home whose `users/` or this user's entry cannot be trusted; says why."""


def tenant_dir_name(uid: int) -> str:
    return str(uid)


def users_dir_problem(st: os.stat_result, home_owner: int) -> str | None:
    """Why a `users/` directory cannot hold users' entries safely; None when it can: a
    directory its home's owner or root owns, which others may write only when it is sticky."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid not in (0, home_owner):
        return f"is owned by uid {st.st_uid}, not by its home's owner or root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        return f"mode {stat.filemode(st.st_mode)} lets others write it without the sticky bit"
    return None


def own_dir_problem(st: os.stat_result, uid: int) -> str | None:
    """Why an entry of `users/` is not `uid`'s alone; None when it is."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not by uid {uid}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"mode {stat.filemode(st.st_mode)} lets group or others write it"
    return None


def writable_home(home: str | os.PathLike, uid: int | None = None) -> Path:
    """The directory this process writes into: `home`, unless `home` is a node's shared one
    (another user's, with `users/`), then `home/users/<uid>`, created 0700 if missing.
    TenantHomeError when that shared home's `users/` or our entry is not safe to use; OSError
    passes through for a home that cannot be read at all."""
    home = Path(home)
    uid = os.geteuid() if uid is None else uid
    try:
        home_st = os.stat(home)
    except FileNotFoundError:
        return home  # made later by whoever writes first, as a plain home
    if home_st.st_uid == uid:
        return home
    users = home / USERS
    try:
        users_st = os.lstat(users)
    except FileNotFoundError:
        return home
    problem = users_dir_problem(users_st, home_st.st_uid)
    if problem:
        raise TenantHomeError(errno.EPERM, f"{users} {problem}")
    own = users / tenant_dir_name(uid)
    try:
        os.mkdir(own, 0o700)
    except FileExistsError:
        pass
    try:
        fd = os.open(own, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise TenantHomeError(e.errno, f"{own} is not a directory (a link?)") from None
        raise
    try:
        problem = own_dir_problem(os.fstat(fd), uid)
    finally:
        os.close(fd)
    if problem:
        raise TenantHomeError(errno.EPERM, f"{own} {problem}")
    return own
