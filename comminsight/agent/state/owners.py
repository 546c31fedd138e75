"""Whose each process, communicator and job of this node is: the user whose directory its
SHM region was found in (producers), remembered past the process's end.

The API shows a user only what is theirs (api.readers). Live answers are filtered by the
producers themselves; hang reports, incidents and Step summaries outlive their processes, so
the users of their communicators, jobs and pids are remembered here, learned every pass, at
most LIMIT of each (the oldest forgotten first). What this Agent never saw a user run (a
report written by an earlier Agent for a process gone before this one started), and a pid of a
region whose process the Agent could not see run as its directory's user (in another PID
namespace, or gone), belong to nobody it can name: only root and the Agent's own user see
them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable

from comminsight.agent.receivers.producers import Producer
from comminsight.agent.state.snapshot import NodeSnapshot
from comminsight.shm_reader import record_text

LIMIT = 65536  # entries of each kind remembered


class _Remembered:
    """key -> the set of uids seen with it, the least recently noted forgotten first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._uids: OrderedDict[Hashable, frozenset[int]] = OrderedDict()

    def note(self, key: Hashable, uid: int) -> None:
        held = self._uids.get(key)
        if held is None or uid not in held:
            self._uids[key] = (held or frozenset()) | {uid}
        self._uids.move_to_end(key)
        while len(self._uids) > self.limit:
            self._uids.popitem(last=False)

    def of(self, key: Hashable) -> frozenset[int]:
        return self._uids.get(key, frozenset())

    def __len__(self) -> int:
        return len(self._uids)


class Owners:
    def __init__(self, limit: int = LIMIT) -> None:
        self.pids = _Remembered(limit)  # (pid, start_real_ns) and pid alone
        self.comms = _Remembered(limit)  # comm id, 16 hex digits
        self.jobs = _Remembered(limit)

    def note(self, producers: Iterable[Producer], snapshot: NodeSnapshot | None = None) -> None:
        """What this pass shows: each producer's process and job, and, from the node's
        snapshot, each communicator its processes are members of."""
        uid_of_pid: dict[int, int] = {}
        for producer in producers:
            header = producer.region.header
            uid = producer.uid
            job = record_text(header["job_id"])
            if job:
                self.jobs.note(job, uid)
            # a pid the region's writer could not be seen to run names nobody's process
            if not producer.pid_verified:
                continue
            uid_of_pid[producer.pid] = uid
            self.pids.note(producer.pid, uid)
            self.pids.note((producer.pid, int(header["start_real_ns"])), uid)
        if snapshot is None:
            return
        for comm in (*snapshot.comms.values(), *snapshot.torn_down.values()):
            for member in (*comm.members, *comm.departed):
                uid = uid_of_pid.get(member.process.pid)
                if uid is not None and member.process.node_name in (None, snapshot.node_name):
                    self.comms.note(comm.comm_id_hex, uid)

    def of_pid(self, pid: int, start_real_ns: int | None = None) -> frozenset[int]:
        if start_real_ns is not None:
            exact = self.pids.of((pid, start_real_ns))
            if exact:
                return exact
        return self.pids.of(pid)

    def of_comm(self, comm_id_hex: str) -> frozenset[int]:
        return self.comms.of(comm_id_hex)

    def of_job(self, job_id: str) -> frozenset[int]:
        return self.jobs.of(job_id)
