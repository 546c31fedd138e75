"""Whether the Agent may trust a COMMINSIGHT_HOME and its configuration file, checked before
it reads or creates anything there.

The Agent runs with the training user's privileges (often root) and acts on what the home
holds: the configuration, the Profilers' SHM files and FIFO, segments it archives. A home that
another user owns or can write lets that user plant a configuration, a symbolic link or a
forged event, so such a home is refused with an error that names the path and what is wrong;
so is one whose owner lacks rwx on it (mode 000), which would otherwise surface later as a
PermissionError deep inside the Agent.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from comminsight.safe_open import kind_of
from comminsight_gen import home_v1_names as home_names

# the home's own directories (architecture §7) and those the Agent keeps under them, checked
# where they exist before the Agent creates them: a link planted in any of their places would
# have the Agent write (hang reports, checkpoints, a slave's outbox) wherever it points
SUBDIRS = tuple(
    "/".join(parts)
    for parts in (
        (home_names.ETC,),
        (home_names.INSPECTOR_LOGS,),
        (home_names.SHMS,),
        (home_names.SHMS, home_names.QUARANTINE),
        (home_names.FIFOS,),
        (home_names.SEMANTICS,),
        (home_names.SEMANTICS, home_names.STEP),
        (home_names.SEMANTICS, home_names.STEP, home_names.OFFLINE),
        (home_names.METADATA,),
        *(
            (home_names.METADATA, name)
            for name in (
                home_names.ARCHIVE_LEDGER,
                home_names.HANGS,
                home_names.INCIDENTS,
                home_names.INJECT,
                home_names.MASTER,
                home_names.SLAVE,
                home_names.STACKS,
            )
        ),
        (home_names.ARCHIVES,),
        (home_names.LOGS,),
    )
)


class HomeError(Exception):
    """The home (or its configuration file) must not be used; the message names the path."""


def _user(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _trust_problem(st: os.stat_result, me: int) -> str | None:
    if st.st_uid != me:
        return f"is owned by {_user(st.st_uid)}, not by this user ({_user(me)})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return (
            f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); run: chmod go-w"
        )
    return None


def check_directory(path: Path, me: int, follow: bool) -> None:
    """One directory of the home: ours, not writable by others, usable by its owner."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        return  # the Agent creates it, 0700
    except OSError as e:
        raise HomeError(f"{path}: cannot be examined: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise HomeError(f"{path}: is a symbolic link; the home's directories must be its own")
    if not stat.S_ISDIR(st.st_mode):
        raise HomeError(f"{path}: is not a directory")
    problem = _trust_problem(st, me)
    if problem:
        raise HomeError(f"{path}: {problem}")
    if st.st_mode & stat.S_IRWXU != stat.S_IRWXU:
        raise HomeError(
            f"{path}: its owner cannot read, write and enter it (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); run: chmod u+rwx"
        )
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise HomeError(f"{path}: this Agent cannot read, write and enter it")


def check_home(home: Path, me: int | None = None) -> None:
    """Raise HomeError when the home or one of its directories must not be used. The home
    itself may be a symbolic link (an installation's choice, made by whoever owns its
    parent); the directories inside it may not."""
    me = os.geteuid() if me is None else me
    check_ancestors(home, me)
    _check_link_owner(home, me)
    check_directory(home, me, follow=True)
    for sub in SUBDIRS:
        check_directory(home / sub, me, follow=False)


def make_trusted_dirs(path: Path, me: int | None = None) -> Path:
    """`path` made ready to be written into, trusted as the home is: the way to it passes
    only directories and links of this user or root (check_ancestors); each missing level is
    created 0700 and, like the directory itself, must then be this user's own directory, not
    writable by others, and no symbolic link (the directory itself may be one this user or
    root made, as a home may). A HomeError names the path refused; nothing is created past
    it. Whatever runs with one user's privileges and writes where a path says (the Agent's
    recovery, the offline CLI run as root over another user's logs) goes through here, so
    that a link or directory another user planted never decides where it writes."""
    me = os.geteuid() if me is None else me
    path = Path(path) if Path(path).is_absolute() else Path.cwd() / path
    check_ancestors(path, me)
    # the levels are made along the path with ".." taken as written; where a link comes
    # before a "..", that is another way than the kernel's, so it is walked too
    normal = Path(os.path.normpath(path))
    if normal != path:
        check_ancestors(normal, me)
    path = normal
    existing, missing = path, []
    while True:
        try:
            os.lstat(existing)
            break
        except (FileNotFoundError, NotADirectoryError):  # the latter: a file on the way
            missing.append(existing.name)
            existing = existing.parent
        except OSError as e:
            raise HomeError(f"{existing}: cannot be examined: {e.strerror}") from None
    if missing and not os.path.isdir(existing):
        raise HomeError(f"{existing}: is not a directory")
    for name in reversed(missing):
        existing = existing / name
        try:
            os.mkdir(existing, 0o700)
        except FileExistsError:
            pass  # made meanwhile: checked as one made here
        check_directory(existing, me, follow=False)
    check_directory(path, me, follow=True)
    return path


MAX_LINKS = 40  # what the kernel follows in one path (Linux's MAXSYMLINKS)


def check_ancestors(path: Path, me: int) -> None:
    """Every directory and link the path passes through, resolved as the kernel resolves it
    (the last component too, when it is a link): a directory owned by another user (root
    aside), or one that group or others can write without the sticky bit, lets that user
    rename the home away and put another in its place; a link another user made sends the
    path wherever that user chose. Such a path is refused, naming the place. The directory
    the path ends in is the caller's to check; components that do not exist yet end the walk
    (the Agent creates them itself, 0700)."""
    path = Path(path) if Path(path).is_absolute() else Path.cwd() / path
    pending = list(path.parts[1:])
    current = Path("/")
    _check_ancestor_dir(current, os.lstat(current), path, me)
    links = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = current.parent
            continue
        candidate = current / part
        st = _lstat(candidate)
        if st is None:
            return
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (me, 0):
                where = f"{path}:" if candidate == path else f"{candidate} (on the way to {path})"
                raise HomeError(
                    f"{where} is a symbolic link owned by {_user(st.st_uid)}, not by this "
                    f"user ({_user(me)}) or root; not followed"
                )
            links += 1
            if links > MAX_LINKS:
                raise HomeError(f"{path}: more than {MAX_LINKS} symbolic links on the way")
            target = Path(os.readlink(candidate))
            if target.is_absolute():
                current = Path("/")
            pending[:0] = [p for p in target.parts if p != "/"]
            continue
        if not stat.S_ISDIR(st.st_mode) or not [p for p in pending if p not in ("", ".")]:
            return  # a file: opening fails there, with its own error; the end: the caller's
        _check_ancestor_dir(candidate, st, path, me)
        current = candidate


def _lstat(path: Path) -> os.stat_result | None:
    """The path's own status (a link not followed); None where it does not exist."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise HomeError(f"{path}: cannot be examined: {e.strerror}") from None


def _check_ancestor_dir(directory: Path, st: os.stat_result, path: Path, me: int) -> None:
    if st.st_uid not in (me, 0):
        raise HomeError(
            f"{directory} (a parent of {path}) is owned by {_user(st.st_uid)}, who could put "
            f"another directory in its place; use a directory whose parents belong to "
            f"{_user(me)}{' or root' if me else ''}"
        )
    loose = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if loose and not st.st_mode & stat.S_ISVTX:
        raise HomeError(
            f"{directory} (a parent of {path}) is writable by group or others without the "
            f"sticky bit (mode {stat.S_IMODE(st.st_mode):04o}): they could put another "
            "directory in its place; run: chmod go-w (or chmod +t)"
        )


def _check_link_owner(path: Path, me: int) -> None:
    """A path whose last component is a symbolic link is used only when this user or root
    made the link (as the Profiler decides): another user's link would send the Agent to
    read or write wherever that user chose."""
    st = _lstat(path)
    if st is not None and stat.S_ISLNK(st.st_mode) and st.st_uid not in (me, 0):
        raise HomeError(
            f"{path}: is a symbolic link owned by {_user(st.st_uid)}, not by this user "
            f"({_user(me)}) or root; not followed"
        )


def check_config_file(path: Path, me: int | None = None) -> None:
    """The configuration file, when there is one: a regular file owned by this user or root,
    writable by nobody else (it chooses where the Agent listens and what it archives where),
    reached through no symbolic link another user made."""
    me = os.geteuid() if me is None else me
    check_ancestors(path, me)
    _check_link_owner(path, me)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise HomeError(f"{path}: cannot be examined: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise HomeError(f"{path}: is a {kind_of(st.st_mode)}, not a regular file")
    if st.st_uid not in (me, 0):
        raise HomeError(
            f"{path}: is owned by {_user(st.st_uid)}, not by this Agent's user ({_user(me)}) "
            "or root"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise HomeError(
            f"{path}: is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
            "run: chmod go-w"
        )
