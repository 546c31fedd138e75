"""Who asks, and what of the node they may see.

Over the Agent's Unix socket the kernel names the caller (SO_PEERCRED): root and the Agent's
own user see everything; any other user sees only what is theirs, by the user whose directory
each process was found in (producers) and what was learned of them since (owners): their
processes and communicators, their operations, the Step summaries of their processes, the
hang reports of their communicators and the incidents of those reports. Over TCP the reader
is whoever holds the network path (and the token, where reads need it): everything.

A user's view must not be told apart from a node where others run nothing: what they may not
see is left out of lists and answered as unknown by name, never as forbidden. A job,
communicator or pid seen with two users (one named theirs as the other's) is shown to
neither: only root and the Agent's user see it.
"""

from __future__ import annotations

import os
import re
import socket
import struct
from dataclasses import dataclass

from aiohttp import web

from comminsight.agent.state.owners import Owners

_PEERCRED = struct.Struct("3i")  # pid, uid, gid (struct ucred)
_PID_IN_TEXT = re.compile(r"\bpids? ((?:\d+(?:, )?)+)")
_USER_DIR_IN_TEXT = re.compile(r"/users/(\d+)(?:/|\b)")
READER_KEY_NAME = "comminsight_reader"


@dataclass(frozen=True)
class Reader:
    """uid None: sees everything."""

    uid: int | None
    via: str  # "socket" or "tcp"

    @property
    def sees_all(self) -> bool:
        return self.uid is None

    def describe(self) -> str:
        return "everyone's" if self.uid is None else f"uid {self.uid}'s"


EVERYTHING_OVER_TCP = Reader(None, "tcp")
READER_KEY = web.RequestKey(READER_KEY_NAME, Reader)  # where a request keeps its reader


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix socket; None for another family."""
    if sock.family != socket.AF_UNIX:
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    return _PEERCRED.unpack(raw)[1]


def reader_for(uid: int | None, via: str, agent_uid: int | None = None) -> Reader:
    """Root and the Agent's own user see everything; anyone else, their own."""
    agent_uid = os.geteuid() if agent_uid is None else agent_uid
    if uid is None or uid in (0, agent_uid):
        return Reader(None, via)
    return Reader(uid, via)


class View:
    """What one reader may see, judged by the owners the Agent learned."""

    def __init__(self, reader: Reader, owners: Owners) -> None:
        self.reader = reader
        self.owners = owners

    def _mine(self, uids: frozenset[int]) -> bool:
        # a name seen with several users (a job id, a communicator id or a pid another user
        # chose to be this one's, or a pid the kernel reused) is shown to none of them: a
        # user must not read another's by naming something of theirs the same
        return uids == frozenset({self.reader.uid})

    def process(self, uid: int) -> bool:
        return self.reader.sees_all or uid == self.reader.uid

    def pid(self, pid: int | None, start_real_ns: int | None = None) -> bool:
        if self.reader.sees_all:
            return True
        return pid is not None and self._mine(self.owners.of_pid(pid, start_real_ns))

    def comm(self, comm_id_hex: str) -> bool:
        return self.reader.sees_all or self._mine(self.owners.of_comm(comm_id_hex))

    def report(self, report, node_name: str) -> bool:
        """A hang report of the reader's communicator whose culprits on this node are the
        reader's processes: a communicator id is NCCL's random hash, but a user who made one
        with another's id on purpose must not be shown the other's report by it."""
        if self.reader.sees_all:
            return True
        if not self.comm(report.comm.comm_id):
            return False
        for culprit in report.culprits:
            here = culprit.node_name in (None, node_name)
            if here and isinstance(culprit.pid, int) and self.owners.of_pid(culprit.pid):
                if not self._mine(self.owners.of_pid(culprit.pid)):
                    return False
        return True

    def job(self, job_id: str | None) -> bool:
        if self.reader.sees_all:
            return True
        return job_id is not None and self._mine(self.owners.of_job(job_id))

    def step_file(self, pid: int | None, job_id: str | None) -> bool:
        """A process's Step summaries: by its pid, else by its job."""
        if self.reader.sees_all:
            return True
        if pid is not None and self.owners.of_pid(pid):
            return self._mine(self.owners.of_pid(pid))
        return self.job(job_id)

    def health_reason(self, text: str) -> bool:
        """A health reason that names another user's directory or processes is theirs."""
        if self.reader.sees_all:
            return True
        for match in _USER_DIR_IN_TEXT.finditer(text):
            if int(match.group(1)) != self.reader.uid:
                return False
        for match in _PID_IN_TEXT.finditer(text):
            for pid in match.group(1).split(", "):
                if pid.isdigit() and not self.pid(int(pid)):
                    return False
        return True
