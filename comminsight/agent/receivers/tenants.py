"""The users a node Agent serves in a shared home, each by the directory they write into.

In a shared home (COMMINSIGHT_AGENT_SHARED_HOME) every user's Profilers and Inject write under
`<home>/users/<uid>/` (comminsight.inject.tenant_home, profiler/src/home.c). An entry counts
as user N's when its name is N, it is a directory and no link, N owns it, and nobody else can
write it; everything found in it (regions, logs, the hang-event FIFO, Inject's metadata) is
then N's, and a file in it that another user owns is refused. An entry that breaks the rule
(planted by another user, a link, a name that is no uid) is named and never read.

`prepare_shared_home` gives the home the modes that let users in without letting them see
each other: the home and its etc/ and metadata/ readable (the node's configuration and the
Agent's published settings are for every Profiler), users/ sticky and writable but not
listable, the Agent's own data 0700 as before.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from comminsight.agent.receivers.dir_listing import DirectoryListing
from comminsight.inject.tenant_home import USERS, own_dir_problem, users_dir_problem
from comminsight_gen import home_v1_names as home_names

log = logging.getLogger(__name__)

# Users served at once at most: a node runs jobs of a few users, and each costs a FIFO's two
# descriptors and a listing per pass. Past it, the rest are named as waiting.
MAX_TENANTS = 256
MAX_REFUSED_NAMED = 64
# what users of the node may read or enter in a shared home, and what they may not
HOME_MODE = 0o755
USERS_MODE = 0o1733  # enter and create an entry; neither list nor remove another's
PUBLIC_DIRS = (
    home_names.ETC,
    home_names.METADATA,
)  # the node's config, the Agent's settings for Profilers


@dataclass(frozen=True)
class Tenant:
    """One user's directory in the shared home."""

    uid: int
    gid: int  # the directory's group: what the Agent creates there gets it
    home: Path


def _entry(entry: os.DirEntry) -> tuple[str, int] | None:
    return (entry.name, entry.inode())


class TenantDirs:
    """`scan()`: the tenants of the shared home `home`, and the refused entries by name."""

    def __init__(self, home: Path) -> None:
        self.users = Path(home) / USERS
        self.listing = DirectoryListing(self.users, _entry, sort_key=lambda e: e)
        self.tenants: dict[int, Tenant] = {}
        self.refused: dict[str, str] = {}  # entry name -> why (the latest MAX_REFUSED_NAMED)
        self.refused_total = 0
        self.waiting = 0  # entries past MAX_TENANTS
        self.problem: str | None = None  # users/ itself cannot be used
        self._judged: dict[tuple[str, int], Tenant | None] = {}

    def scan(self) -> dict[int, Tenant]:
        """The tenants now; a directory unchanged since the last scan is not listed again."""
        try:
            home_owner = os.stat(self.users.parent).st_uid
            problem = users_dir_problem(os.lstat(self.users), home_owner)
            entries = self.listing.entries()
        except FileNotFoundError:
            self.problem = f"{self.users} does not exist: no user's Profilers are served"
            return self._keep({})
        except OSError as e:
            self.problem = f"{self.users} cannot be read: {e.strerror}"
            return self._keep(self.tenants)
        if problem:
            self.problem = f"{self.users} {problem}: no user's directory in it is read"
            return self._keep({})
        self.problem = None
        found: dict[int, Tenant] = {}
        judged: dict[tuple[str, int], Tenant | None] = {}
        waiting = 0
        for key in entries:
            tenant = self._judged[key] if key in self._judged else self._judge(*key)
            judged[key] = tenant
            if tenant is None:
                continue
            if len(found) >= MAX_TENANTS:
                waiting += 1
                continue
            found[tenant.uid] = tenant
        self._judged = judged
        self.waiting = waiting
        return self._keep(found)

    def _keep(self, found: dict[int, Tenant]) -> dict[int, Tenant]:
        for uid in self.tenants.keys() - found.keys():
            log.info("user %d's directory in the shared home is gone", uid)
        for uid in found.keys() - self.tenants.keys():
            log.info("serving user %d's Profilers in %s", uid, found[uid].home)
        self.tenants = found
        return found

    def _judge(self, name: str, inode: int) -> Tenant | None:
        path = self.users / name
        if not name.isdigit() or name != str(int(name)) or int(name) >= 2**32 - 1:
            return self._refuse(name, "its name is no uid")
        try:
            st = os.lstat(path)
        except OSError as e:
            return self._refuse(name, f"cannot be examined: {e.strerror}")
        if stat.S_ISLNK(st.st_mode):
            return self._refuse(name, "is a symbolic link")
        problem = own_dir_problem(st, int(name))
        if problem:
            return self._refuse(name, problem)
        return Tenant(int(name), st.st_gid, path)

    def _refuse(self, name: str, why: str) -> None:
        self.refused_total += 1
        self.refused.pop(name, None)
        self.refused[name] = why
        while len(self.refused) > MAX_REFUSED_NAMED:
            del self.refused[next(iter(self.refused))]
        log.error("refusing %s/%s: %s; nothing in it is read", self.users, name, why)
        return None

    def problems(self) -> list[str]:
        out = [self.problem] if self.problem else []
        out += [f"{self.users}/{name} refused: {why}" for name, why in self.refused.items()]
        if self.waiting:
            out.append(
                f"{self.waiting} users' directories in {self.users} are not served: at most "
                f"{MAX_TENANTS} users at once"
            )
        return out


def prepare_shared_home(home: Path) -> None:
    """Give a shared home the modes its users need (HOME_MODE, PUBLIC_DIRS, USERS_MODE),
    creating users/ and the public directories if missing. Only directories this Agent owns
    are changed, each through a descriptor opened without following links; OSError names the
    one that cannot be made or changed."""
    _set_mode(home, HOME_MODE)
    for name in PUBLIC_DIRS:
        _make(home / name, 0o755)
    _make(home / USERS, USERS_MODE)


def _make(path: Path, mode: int) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    _set_mode(path, mode)


def _set_mode(path: Path, mode: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise PermissionError(
                f"{path} is owned by uid {st.st_uid}, not by this Agent's: its mode is not set"
            )
        if stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)
