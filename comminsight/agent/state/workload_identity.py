"""Which Kubernetes pod, namespace and container a profiled process belongs to, for the labels
Kubernetes users join on (`pod`, `namespace`, `container`, as kube-state-metrics and cAdvisor
name them). Read from files on the node, without the API server:

- `/proc/<pid>/cgroup` places the process: the kubelet names a pod's cgroup after its UID and
  the runtime names the container's after its id. Both drivers and both cgroup versions:

      cgroupfs:  /kubepods[/burstable|/besteffort]/pod<uid-with-dashes>/<container id>
      systemd:   /kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid_with_underscores>
                 .slice/<cri-containerd-|crio-|docker-><container id>.scope

  (a guaranteed pod has no QoS level; cgroup v1 gives one such line per hierarchy, v2 one
  `0::` line). CRI-O puts each container's monitor in a sibling `crio-conmon-<id>`: that
  process is of the pod but in no container. A static pod's UID is 32 hex digits (an md5 the
  kubelet computes), not a dashed UUID. A reader in a cgroup namespace of its own sees another
  pod's path relative to its own root (`0::/../../kubepods-...`): the pod and container
  segments are found wherever they are, so that reads the same. A runtime left on cgroupfs
  under a kubelet on systemd makes `<pod slice>:cri-containerd:<id>` one literal segment.
- The kubelet's log tree names them: `/var/log/containers/<pod>_<namespace>_<container>-<id>
  .log` (a symlink, never followed here) gives a container id's three names, and
  `/var/log/pods/<namespace>_<pod>_<uid>/` a pod UID's two (the container then stays "").
  Namespaces and container names are DNS labels and pod names DNS subdomains: none holds `_`,
  so a name splits at its two underscores, and the container id is the 64 hex digits after
  the last `-`. The kubelet cuts a symlink's name at 255 bytes, so a very long pod name loses
  its container id: such a container is named by its pod only.

This needs the Agent in the host's PID namespace (`hostPID: true`, so that /proc shows the
node's processes) and `/var/log/pods` and `/var/log/containers` mounted read-only. Without them
the labels are empty, never wrong: an unreadable or unknown process, an id the log tree does
not name, a name that does not parse, or sources that disagree, all give "".

A producer in a pod of its own (no hostPID) records its pid in its own PID namespace, a number
that names another process, or none, in the Agent's /proc. Given the namespace the producer
recorded (its SHM header's `pid_namespace`), `of_pid` finds the node's pid of that process
(`/proc/<n>/ns/pid` is the namespace, the last `NSpid` of `/proc/<n>/status` the pid inside it)
and, given its start time, checks that the process found started when the producer did. A
producer in a time namespace of its own (a restored checkpoint) records a start time on its
own clock: it is not matched, so it gets no labels. Finding it costs a stat of every
process's ns/pid (once per `relist_after_s` at most, and only while a namespace is not found).
Without a namespace the pid is taken as one of the Agent's own: the caller passes the
recorded one whenever there is one, or another namespace's pid 7 would be named after this
node's process 7.

The listing of the log tree is cached: a container id or UID names the same thing for as long
as it exists, so the listing is read again only when a lookup misses, at most once every
`relist_after_s`. A process's answer is kept per (pid, start time, namespace), for at most
`max_processes` processes (the least recently asked dropped first).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# A process's cgroup file is a line per hierarchy, ~200 bytes each; more is not one
MAX_CGROUP_BYTES = 64 * 1024
# a node runs hundreds of containers; a listing past this is not a kubelet's
MAX_LOG_ENTRIES = 100_000
MAX_PROC_ENTRIES = 1_000_000  # pid_max is at most 4M; a node runs far fewer processes

_HEX = "[0-9a-f]"
_UUID_DASHED = "-".join(f"{_HEX}{{{n}}}" for n in (8, 4, 4, 4, 12))
_UUID_UNDERSCORED = "_".join(f"{_HEX}{{{n}}}" for n in (8, 4, 4, 4, 12))
_STATIC_POD_UID = f"{_HEX}{{32}}"  # the kubelet's md5 of a static pod's manifest
_CONTAINER_ID = f"{_HEX}{{64}}"

# The pod's cgroup segment. cgroupfs: the kubelet's name as is; systemd: its parent slices'
# names joined by "-", and "-" in the UID escaped to "_" (kubelet's escapeSystemdCgroupName).
_CGROUPFS_POD = re.compile(f"pod({_UUID_DASHED}|{_STATIC_POD_UID})")
_SYSTEMD_POD_SLICE = f"(?:[-a-z0-9_.]*-)?pod({_UUID_UNDERSCORED}|{_STATIC_POD_UID})\\.slice"
_SYSTEMD_POD = re.compile(_SYSTEMD_POD_SLICE)
# A runtime left on cgroupfs under a kubelet on systemd takes the kubelet's systemd name
# "<pod slice>:<prefix>:<id>" as one literal cgroup (a misconfiguration seen in the wild).
_SLICE_LITERAL = re.compile(
    f"{_SYSTEMD_POD_SLICE}:(?:cri-containerd|crio|docker):({_CONTAINER_ID})"
)
# The container's segment, a child of the pod's: containerd, CRI-O and docker under systemd
# (a scope named by the runtime), CRI-O under cgroupfs, and containerd or docker under
# cgroupfs (the bare id). CRI-O's crio-conmon-<id> is none of these: the id is the container's
# that conmon watches, but conmon runs outside it.
_CONTAINER_SEGMENT = re.compile(
    f"cri-containerd-({_CONTAINER_ID})\\.scope|crio-({_CONTAINER_ID})(?:\\.scope)?"
    f"|docker-({_CONTAINER_ID})\\.scope|({_CONTAINER_ID})"
)

# Kubernetes names (k8s.io/apimachinery validation): namespaces and containers are DNS labels,
# pods DNS subdomains.
_DNS_LABEL = re.compile("[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(
    "[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
)
_POD_UID = re.compile(f"{_UUID_DASHED}|{_STATIC_POD_UID}")
_CONTAINER_ID_RE = re.compile(_CONTAINER_ID)


@dataclass(frozen=True)
class Workload:
    """A process's Kubernetes names; "" where not known."""

    pod: str = ""
    namespace: str = ""
    container: str = ""


UNKNOWN = Workload()


@dataclass(frozen=True)
class PodIds:
    """Where a process's cgroup places it: its pod's UID (dashed) and its container's id ("" in
    no container of the pod, e.g. CRI-O's conmon)."""

    pod_uid: str
    container_id: str = ""


def pod_ids_of_cgroup(text: str) -> PodIds | None:
    """The pod and container a /proc/<pid>/cgroup file names; None for a process in no pod, or
    a file whose lines name different pods or containers."""
    found: set[PodIds] = set()
    for line in text.splitlines():
        fields = line.split(":", 2)  # hierarchy id : controllers : path (which may hold ':')
        if len(fields) != 3 or not fields[0].isdigit() or not fields[2].startswith("/"):
            continue
        ids = _pod_ids_of_path(fields[2])
        if ids is not None:
            found.add(ids)
    uids = {ids.pod_uid for ids in found}
    containers = {ids.container_id for ids in found if ids.container_id}
    if len(uids) != 1 or len(containers) > 1:
        return None
    return PodIds(uids.pop(), containers.pop() if containers else "")


def _pod_ids_of_path(path: str) -> PodIds | None:
    segments = path.split("/")
    # the innermost pod: a kubelet nested in a pod (kind) names its pods below the outer one's
    for i in range(len(segments) - 1, -1, -1):
        literal = _SLICE_LITERAL.fullmatch(segments[i])
        if literal is not None:
            return PodIds(literal.group(1).replace("_", "-"), literal.group(2))
        uid = _pod_uid_of_segment(segments[i])
        if uid is None:
            continue
        child = segments[i + 1] if i + 1 < len(segments) else ""
        match = _CONTAINER_SEGMENT.fullmatch(child)
        if match is None:
            return PodIds(uid)  # the pod's own cgroup, or a child of it that is no container
        return PodIds(uid, next(g for g in match.groups() if g))
    return None


def _pod_uid_of_segment(segment: str) -> str | None:
    match = _CGROUPFS_POD.fullmatch(segment)
    if match is not None:
        return match.group(1)
    match = _SYSTEMD_POD.fullmatch(segment)
    if match is not None:
        return match.group(1).replace("_", "-")
    return None


def read_pod_ids(proc_root: Path, pid: int) -> PodIds | None:
    """The pod and container of a process as its cgroup file says; None where it cannot be
    read, is larger than any real one or names no pod."""
    try:
        with open(proc_root / str(pid) / "cgroup", "rb") as f:
            data = f.read(MAX_CGROUP_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_CGROUP_BYTES:
        return None
    return pod_ids_of_cgroup(data.decode("utf-8", "replace"))


def container_of_log_link(name: str) -> tuple[str, Workload] | None:
    """(container id, names) of a /var/log/containers entry
    `<pod>_<namespace>_<container>-<id>.log`; None for a name that is not one."""
    if not name.endswith(".log"):
        return None
    parts = name[: -len(".log")].split("_")
    if len(parts) != 3:
        return None
    pod, namespace, rest = parts
    container, _, container_id = rest.rpartition("-")
    if not (
        _CONTAINER_ID_RE.fullmatch(container_id)
        and _is_pod_name(pod)
        and _DNS_LABEL.fullmatch(namespace)
        and _DNS_LABEL.fullmatch(container)
    ):
        return None
    return container_id, Workload(pod, namespace, container)


def pod_of_log_dir(name: str) -> tuple[str, Workload] | None:
    """(pod UID, names) of a /var/log/pods entry `<namespace>_<pod>_<uid>`; None for a name that
    is not one."""
    parts = name.split("_")
    if len(parts) != 3:
        return None
    namespace, pod, uid = parts
    if not (_POD_UID.fullmatch(uid) and _is_pod_name(pod) and _DNS_LABEL.fullmatch(namespace)):
        return None
    return uid, Workload(pod, namespace)


def _is_pod_name(name: str) -> bool:
    return len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name) is not None


class _Throttle:
    """Says when costly work (a listing, a scan of /proc) may run again: at once the first
    time, then at most once every `period_s`."""

    def __init__(self, period_s: float, clock: Callable[[], float]) -> None:
        self.period_s = period_s
        self.clock = clock
        self._last: float | None = None

    def take(self) -> bool:
        now = self.clock()
        if self._last is not None and now - self._last < self.period_s:
            return False
        self._last = now
        return True


class _LogNames:
    """The kubelet's log tree, listed: container id -> names, pod UID -> names."""

    def __init__(self, log_root: Path, throttle: _Throttle) -> None:
        self.log_root = log_root
        self.throttle = throttle
        self.listings = 0
        self._containers: dict[str, Workload] = {}
        self._pods: dict[str, Workload] = {}

    def workload_of(self, ids: PodIds) -> tuple[Workload, bool]:
        """Its names, and whether they are all there is to know (no relisting can add any)."""
        found = self._names(ids)
        if not found[1] and self.throttle.take():
            self._relist()
            found = self._names(ids)
        return found

    def _names(self, ids: PodIds) -> tuple[Workload, bool]:
        container = self._containers.get(ids.container_id) if ids.container_id else None
        pod = self._pods.get(ids.pod_uid)
        if container is not None:
            if pod is not None and (pod.pod, pod.namespace) != (
                container.pod,
                container.namespace,
            ):
                return UNKNOWN, False  # the two listings disagree: trust neither
            return container, True
        if pod is not None:
            return pod, not ids.container_id
        return UNKNOWN, False

    def _relist(self) -> None:
        self.listings += 1
        ambiguous: set[str] = set()
        containers = _listing(self.log_root / "containers", container_of_log_link, ambiguous)
        pods = _listing(self.log_root / "pods", pod_of_log_dir, ambiguous)
        for key in ambiguous:  # one id, two names: neither is told
            containers.pop(key, None)
            pods.pop(key, None)
        self._containers, self._pods = containers, pods


def _listing(directory: Path, parse, ambiguous: set[str]) -> dict[str, Workload]:
    """Id -> names of a directory's entries that `parse` reads; ids met with two different
    names are added to `ambiguous`."""
    found: dict[str, Workload] = {}
    for name in _entry_names(directory):
        parsed = parse(name)
        if parsed is None:
            continue
        key, names = parsed
        if found.setdefault(key, names) != names:
            ambiguous.add(key)
    return found


def _entry_names(directory: Path) -> list[str]:
    """A directory's entry names (at most MAX_LOG_ENTRIES), nothing followed or opened;
    none where it cannot be listed."""
    names = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                names.append(entry.name)
                if len(names) >= MAX_LOG_ENTRIES:
                    break
    except OSError:
        return []
    return names


class _HostPids:
    """The pid on this node of a process known by its pid inside its own PID namespace."""

    def __init__(self, proc_root: Path, throttle: _Throttle) -> None:
        self.proc_root = proc_root
        self.throttle = throttle
        self.scans = 0
        self._members: dict[int, list[int]] = {}  # namespace inode -> its processes' pids here

    def find(self, pid: int, namespace: int) -> int | None:
        if not namespace:
            return pid  # no namespace recorded: the caller vouches the pid is this node's
        if self._is(pid, pid, namespace):  # the same number here (hostPID pods, the node)
            return pid
        found = self._among_members(pid, namespace)
        if found is None and self.throttle.take():
            self._scan()
            found = self._among_members(pid, namespace)
        return found

    def _among_members(self, pid: int, namespace: int) -> int | None:
        for host_pid in self._members.get(namespace, ()):
            if self._is(host_pid, pid, namespace):
                return host_pid
        return None

    def _is(self, host_pid: int, pid: int, namespace: int) -> bool:
        """Whether this node's process host_pid is the process pid of that namespace."""
        return (
            self._namespace_of(host_pid) == namespace
            and _innermost_pid(self.proc_root, host_pid) == pid
        )

    def _namespace_of(self, host_pid: int) -> int | None:
        try:
            return os.stat(self.proc_root / str(host_pid) / "ns" / "pid").st_ino
        except OSError:
            return None

    def _scan(self) -> None:
        self.scans += 1
        members: dict[int, list[int]] = {}
        try:
            with os.scandir(self.proc_root) as entries:
                for n, entry in enumerate(entries):
                    if n >= MAX_PROC_ENTRIES:
                        break
                    if not entry.name.isdigit():
                        continue
                    namespace = self._namespace_of(int(entry.name))
                    if namespace is not None:
                        members.setdefault(namespace, []).append(int(entry.name))
        except OSError:
            pass
        self._members = members


def _innermost_pid(proc_root: Path, host_pid: int) -> int | None:
    """The process's pid in its own PID namespace: the last of /proc/<pid>/status's NSpid
    (the pid in each namespace from the reader's down to the process's own)."""
    try:
        with open(proc_root / str(host_pid) / "status", "rb") as f:
            status = f.read(MAX_CGROUP_BYTES)
    except OSError:
        return None
    for line in status.decode("ascii", "replace").splitlines():
        if line.startswith("NSpid:"):
            fields = line.split()[1:]
            return int(fields[-1]) if fields and fields[-1].isdigit() else None
    return None


def _start_ticks(proc_root: Path, host_pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat, counted after the command name (which may hold spaces and
    parentheses: the last ')' ends it)."""
    try:
        with open(proc_root / str(host_pid) / "stat", "rb") as f:
            stat = f.read(4096)
    except OSError:
        return None
    after = stat.rfind(b")")
    fields = stat[after + 1 :].split()
    if after < 0 or len(fields) < 20 or not fields[19].isdigit():
        return None
    return int(fields[19])


@dataclass
class _Process:
    placed: bool = False  # its cgroup was read (or it was found not to be the producer)
    ids: PodIds | None = None
    workload: Workload = UNKNOWN
    final: bool = False  # nothing more to learn: answered from the cache alone


class WorkloadLookup:
    """Processes' Kubernetes names, cached (see the module's docstring)."""

    def __init__(
        self,
        proc_root: Path = Path("/proc"),
        log_root: Path = Path("/var/log"),
        relist_after_s: float = 5.0,
        *,
        max_processes: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.proc_root = Path(proc_root)
        self.max_processes = max_processes
        self._names = _LogNames(Path(log_root), _Throttle(relist_after_s, clock))
        self._host_pids = _HostPids(self.proc_root, _Throttle(relist_after_s, clock))
        self._processes: OrderedDict[tuple[int, int, int], _Process] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def listings(self) -> int:
        """How many times the log tree was listed."""
        return self._names.listings

    @property
    def scans(self) -> int:
        """How many times /proc was scanned for a process of another PID namespace."""
        return self._host_pids.scans

    def cached(self) -> int:
        return len(self._processes)

    def of_pid(self, pid: int, start_ticks: int = 0, pid_namespace: int = 0) -> Workload:
        """The names of the process `pid`: a pid of the Agent's PID namespace, or, given
        `pid_namespace` (the inode of /proc/<pid>/ns/pid the producer recorded, 0 if unknown),
        of that namespace. `start_ticks` (its /proc/<pid>/stat starttime, 0 if unknown) tells
        it from a later process that reuses the pid. The empty Workload when not known."""
        if pid <= 0:
            return UNKNOWN
        key = (pid, start_ticks, pid_namespace)
        with self._lock:
            process = self._processes.get(key)
            if process is None:
                process = self._processes[key] = _Process()
                while len(self._processes) > self.max_processes:
                    self._processes.popitem(last=False)
            else:
                self._processes.move_to_end(key)
            if process.final:
                return process.workload
            if not process.placed:
                host_pid = self._host_pids.find(pid, pid_namespace)
                if host_pid is None:
                    return UNKNOWN  # asked again later, at most a scan per relist_after_s
                process.placed = True
                if not start_ticks or _start_ticks(self.proc_root, host_pid) == start_ticks:
                    process.ids = read_pod_ids(self.proc_root, host_pid)
            if process.ids is None:  # in no pod, or not the producer: never will be
                process.final = True
                return UNKNOWN
            process.workload, process.final = self._names.workload_of(process.ids)
            return process.workload
