"""Ask a training process on this node where its Python is: `await StackCapture.request(host,
pid, rank)` returns a python-stack v1 document, `captured` with every thread's frames or
`unavailable` with the reason.

The only permission to send the stack signal is the process's own `stacks` line in
metadata/inject/ (Inject writes it when it took the signal). Before signalling, the process
must be on this host, its announcement must say `available`, name this Agent's stack
directory, and carry a start time equal to the one /proc shows for that pid now (a recycled
pid is another process, which the signal could kill). A process without Inject is never
signalled.

At most one signal per process per `interval_s`: a request while one is pending waits for the
same answer; a request after an answer and within the interval gets that answer again (or,
when the last one timed out, a late answer the process has written since) without a new
signal. The answer is waited for asynchronously, polling the stack directory, for at most
`timeout_s`; a file is read only up to `max_read_bytes`, through open_checked (no links, only
this Agent's user's regular files), and decoded against the protocol, so a huge, forged or
garbled file becomes an `unavailable` naming it, never an exception.

Every request ends in one of OUTCOMES, counted in `outcomes` (metrics.stacks exposes them with
`signals_sent` and `pending`): an operator sees how often stacks arrive, and why not.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

from comminsight.agent.core.liveness import process_uid
from comminsight.agent.receivers.acting_as import files_as
from comminsight.agent.receivers.inject_names import InjectNames
from comminsight.safe_open import open_checked
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.models.inject_metadata_v1 import Stacks
from comminsight_gen.models.python_stack_v1 import PythonStack, StackStatus

log = logging.getLogger(__name__)

SCHEMA = "comminsight.python-stack.v1"
MAX_READ_BYTES = 1 << 20  # four times what Inject writes at most
POLL_S = 0.02
MAX_TRACKED = 4096  # processes whose last signal is remembered
NOT_INJECTED = "Inject is not in this process"

# What became of a request. rate_limited: no signal of its own, because one went to the
# process within the interval; it got that signal's answer (captured or not).
CAPTURED = "captured"
RATE_LIMITED = "rate_limited"
NO_INJECT = "unavailable_no_inject"  # no Inject line names the process: never signalled
REFUSED = "refused"  # Inject is in, but its announcement does not allow the signal
PROCESS_GONE = "process_gone"  # ended (or its pid reused) before or after the signal
TIMEOUT = "timeout"  # signalled; no stacks written within timeout_s
ERROR = "error"  # the signal could not be sent, or the answer's file could not be used
OUTCOMES = (CAPTURED, RATE_LIMITED, NO_INJECT, REFUSED, PROCESS_GONE, TIMEOUT, ERROR)


def unavailable(host: str, pid: int, rank: int | None, reason: str) -> PythonStack:
    return PythonStack(
        schema=SCHEMA,
        status=StackStatus.unavailable,
        host=host,
        pid=pid,
        rank=rank,
        reason=reason[:1024],
        requested_real_ns=time.time_ns(),
    )


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat, the process's start time; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
        return int(text[text.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class _Asked:
    """The last signal sent to one process and what came of it."""

    sent_mono_ns: int
    sent_real_ns: int
    task: asyncio.Task  # -> (outcome, answer)


class StackCapture:
    def __init__(
        self,
        home: str | Path,
        *,
        inject_names: InjectNames | None = None,
        interval_s: float = 30.0,
        timeout_s: float = 2.0,
        host: str | None = None,
        max_read_bytes: int = MAX_READ_BYTES,
        poll_s: float = POLL_S,
    ) -> None:
        self.home = Path(home)
        self.dir = self.home / home_names.METADATA / home_names.STACKS
        self.own_uid = os.geteuid()
        # the home of each user whose processes may be asked (a shared home's users, serve())
        self.homes: dict[int, Path] = {self.own_uid: self.home}
        self.names = inject_names if inject_names is not None else InjectNames(self.home)
        self.interval_ns = int(interval_s * 1e9)
        self.timeout_s = timeout_s
        self.host = host or socket.gethostname()
        self.max_read_bytes = max_read_bytes
        self.poll_s = poll_s
        self.signals_sent = 0
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)  # requests by outcome
        self._asked: dict[tuple[int, int], _Asked] = {}  # (pid, start ticks) -> last signal

    @classmethod
    def from_settings(cls, settings, inject_names: InjectNames | None = None) -> StackCapture:
        return cls(
            settings.home,
            inject_names=inject_names,
            interval_s=settings.agent_stack_interval_s,
            timeout_s=settings.agent_stack_timeout_s,
        )

    def serve(self, homes: dict[int, Path]) -> None:
        """The users' homes (uid -> home) besides the Agent's own whose processes may be asked."""
        self.homes = {**homes, self.own_uid: self.home}

    def stack_dir(self, uid: int | None) -> Path | None:
        """Where a process of `uid` writes its stacks (None: no home of that user is served)."""
        home = self.homes.get(self.own_uid if uid is None else uid)
        return None if home is None else home / home_names.METADATA / home_names.STACKS

    # ---- the request -----------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Signals sent whose answer is still awaited (at most MAX_TRACKED processes')."""
        return sum(1 for asked in self._asked.values() if not asked.task.done())

    async def request(
        self, host: str, pid: int, rank: int | None = None, uid: int | None = None
    ) -> PythonStack:
        """The stack of `pid`, a process of user `uid` (default: the Agent's own, in its own
        home). Never raises for anything a process or a file can do; the reason is in the
        answer."""
        outcome, answer = await self._request(host, pid, rank, uid)
        self.outcomes[outcome] += 1
        return answer

    async def _request(
        self, host: str, pid: int, rank: int | None, uid: int | None
    ) -> tuple[str, PythonStack]:
        uid = self.own_uid if uid is None else uid
        refused = self._refusal(host, pid, uid)
        if refused is not None:
            outcome, reason = refused
            return outcome, unavailable(host, pid, rank, reason)
        ann = self.names.stacks_announcement(host, pid, uid)
        ticks = int(ann.start_ticks)
        key = (pid, ticks)
        asked = self._asked.get(key)
        now = time.monotonic_ns()
        due = asked is None or now - asked.sent_mono_ns >= self.interval_ns
        signalled = due and (asked is None or asked.task.done())
        if signalled:
            sent, sent_real = time.monotonic_ns(), time.time_ns()  # before: it may answer at once
            try:
                os.kill(pid, int(ann.stack_signal))
            except OSError as e:
                reason = f"cannot signal pid {pid}: {e.strerror}"
                return ERROR, unavailable(host, pid, rank, reason)
            self.signals_sent += 1
            task = asyncio.ensure_future(self._answer(host, pid, uid, ticks, sent))
            asked = self._asked[key] = _Asked(sent, sent_real, task)
            self._forget_old()
        outcome, answer = await asyncio.shield(asked.task)
        if answer.status is StackStatus.unavailable:
            late = self._find(host, pid, uid, asked.sent_mono_ns)  # written after the timeout
            if late is not None and late.status is StackStatus.captured:
                outcome, answer = CAPTURED, late
            else:
                left = (asked.sent_mono_ns + self.interval_ns - time.monotonic_ns()) / 1e9
                if left > 0:
                    reason = f"{answer.reason}; not signalled again for {left:.0f} s"
                    answer = msgspec.structs.replace(answer, reason=reason[:1024])
        return (outcome if signalled else RATE_LIMITED), self._finish(
            answer, rank, asked.sent_real_ns
        )

    def _refusal(self, host: str, pid: int, uid: int) -> tuple[str, str] | None:
        """(outcome, why) this process must not be signalled; None when it may."""
        if host != self.host:
            return REFUSED, (
                f"the process runs on {host}; this Agent on {self.host} signals its own host's"
            )
        stacks = self.stack_dir(uid)
        if stacks is None:
            return REFUSED, f"no home of uid {uid} is served by this Agent"
        self.names.refresh()
        if not self.names.has_inject(host, pid, uid):
            return NO_INJECT, f"{NOT_INJECTED}: no line of metadata/inject names {host} pid {pid}"
        ann = self.names.stacks_announcement(host, pid, uid)
        if ann is None:
            return REFUSED, (
                "Inject in this process announced no stack handler (it does when the process "
                "makes its first process group; an older Inject never does)"
            )
        if ann.stacks is not Stacks.available:
            return REFUSED, str(ann.reason or "Inject announced stacks unavailable")
        if not isinstance(ann.stack_signal, int) or not isinstance(ann.stack_dir, str):
            return REFUSED, "Inject's stacks line names no signal or directory"
        if Path(ann.stack_dir) != stacks:
            return (
                REFUSED,
                f"Inject writes stacks to {ann.stack_dir}, not to this Agent's {stacks}",
            )
        if not isinstance(ann.start_ticks, int):
            return REFUSED, (
                "Inject announced no start time, so this pid cannot be told from a later one"
            )
        now = start_ticks(pid)
        if now is None:
            return PROCESS_GONE, f"pid {pid} has ended"
        if now != ann.start_ticks:
            return PROCESS_GONE, (
                f"pid {pid} is now another process (its start time is not the one announced)"
            )
        owner = process_uid(pid)
        if owner != uid:
            # a user's lines speak for their own processes only: never signal another's
            return (
                REFUSED,
                f"pid {pid} runs as uid {owner}, not as uid {uid} whose Inject announced it",
            )
        return None

    async def _answer(
        self, host: str, pid: int, uid: int, ticks: int, sent_mono_ns: int
    ) -> tuple[str, PythonStack]:
        deadline = time.monotonic() + self.timeout_s
        while True:
            found = self._find(host, pid, uid, sent_mono_ns)
            if found is not None:
                outcome = CAPTURED if found.status is StackStatus.captured else ERROR
                return outcome, found
            if start_ticks(pid) != ticks:
                reason = f"pid {pid} ended before it answered"
                return PROCESS_GONE, unavailable(host, pid, None, reason)
            if time.monotonic() >= deadline:
                return TIMEOUT, unavailable(
                    host,
                    pid,
                    None,
                    f"timed out after {self.timeout_s:g} s: the process wrote no stacks (its "
                    "main thread may be inside a long C call, such as a CUDA synchronize)",
                )
            await asyncio.sleep(self.poll_s)

    def _finish(self, answer: PythonStack, rank: int | None, sent_real_ns: int) -> PythonStack:
        changes = {"requested_real_ns": sent_real_ns}
        if rank is not None and not isinstance(answer.rank, int):
            changes["rank"] = rank
        return msgspec.structs.replace(answer, **changes)

    # ---- reading the answer ----------------------------------------------------------------

    def _find(self, host: str, pid: int, uid: int, since_mono_ns: int) -> PythonStack | None:
        """The newest dump of pid written after since_mono_ns; an `unavailable` naming a file
        that cannot be used; None while there is none."""
        prefix = f"{pid}-"
        directory = self.stack_dir(uid)
        if directory is None:
            return None
        try:
            names = [e.name for e in os.scandir(directory) if e.name.startswith(prefix)]
        except OSError:
            return None
        seqs = []
        for name in names:
            seq = name[len(prefix) : -len(".json")] if name.endswith(".json") else ""
            if seq.isdigit():
                seqs.append(int(seq))
        if not seqs:
            return None
        document = self._read(directory / f"{pid}-{max(seqs)}.json", host, pid, uid)
        if document.status is StackStatus.unavailable:
            return document
        fresh = isinstance(document.captured_mono_ns, int)
        if fresh and document.captured_mono_ns >= since_mono_ns:
            return document
        return None  # the newest is older than the signal: no answer yet

    def _read(self, path: Path, host: str, pid: int, uid: int) -> PythonStack:
        try:
            fd, st = open_checked(path, "regular file", owner=uid)
        except OSError as e:
            return unavailable(host, pid, None, f"cannot read {path}: {e}")
        try:
            if st.st_size > self.max_read_bytes:
                return unavailable(
                    host,
                    pid,
                    None,
                    f"{path} is {st.st_size} bytes, over the {self.max_read_bytes}-byte limit "
                    "of a stack file; not read",
                )
            data = os.read(fd, self.max_read_bytes + 1)
        except OSError as e:
            return unavailable(host, pid, None, f"cannot read {path}: {e}")
        finally:
            os.close(fd)
        if len(data) > self.max_read_bytes:  # grew after fstat
            return unavailable(host, pid, None, f"{path} is over the stack file limit; not read")
        try:
            document = msgspec.json.decode(data, type=PythonStack)
        except NOT_JSON as e:
            return unavailable(host, pid, None, f"{path} is not a python-stack v1 document: {e}")
        if document.pid != pid or document.status is not StackStatus.captured:
            return unavailable(
                host, pid, None, f"{path} is not a capture of pid {pid} (pid {document.pid})"
            )
        return document

    # ---- bounds ----------------------------------------------------------------------------

    def _forget_old(self) -> None:
        """Keep what is remembered bounded: drop finished entries past their interval, then
        the oldest."""
        if len(self._asked) <= MAX_TRACKED:
            return
        now = time.monotonic_ns()
        for key, asked in list(self._asked.items()):
            if asked.task.done() and now - asked.sent_mono_ns >= self.interval_ns:
                del self._asked[key]
        while len(self._asked) > MAX_TRACKED:
            oldest = min(self._asked, key=lambda k: self._asked[k].sent_mono_ns)
            self._asked.pop(oldest)

    def prune(self) -> int:
        """Remove stack files of processes that have ended; returns how many. In a user's
        directory they are removed as that user (acting_as)."""
        removed = 0
        for uid, home in list(self.homes.items()):
            directory = home / home_names.METADATA / home_names.STACKS
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                pid = entry.name.lstrip(".").split("-", 1)[0]
                if pid.isdigit() and start_ticks(int(pid)) is None:
                    try:
                        with files_as(uid):
                            os.unlink(entry.path)
                        removed += 1
                    except OSError:
                        pass
        return removed
