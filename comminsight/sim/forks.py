"""Rank processes forked from one parent that has imported their code, not started as new
interpreters: a fresh interpreter imports numpy and the simulator and parses the plugin ABI's
C declarations again for every process (more CPU than a short rank's whole run; a test suite
starts thousands, a job of 64 ranks pays it 64 times over).

One parent serves every run a launching process starts (`ForkParent.shared`): it is started
once, with the launcher's environment, and lives until the launcher's end closes its stdin.
The launcher sends it one request per rank process (its arguments, environment, working
directory, umask and log) and reads back the child's pid and, once it has ended, its exit
status, as subprocess.Popen reports it (-N: killed by signal N).

The parent forks only while it runs no other thread (a child would inherit locks held by
threads that do not exist in it). Each child replaces its environment with the one it was
sent (the plugin reads it through getenv), writes to its own log, and runs the rank process's
main; it ends as that interpreter would, so buffers are flushed and exit handlers run.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from comminsight.sim import rank_process
from comminsight.sim.abi import abi_ffi, native_functions

# The parent imports numpy and the simulator before its first fork: seconds on a loaded
# machine, never minutes
START_DEADLINE_S = 120.0


# Variables read once, as a process starts: by the dynamic loader (LD_PRELOAD: a sanitizer's
# runtime), the C library, a sanitizer's runtime, or the interpreter
STARTUP_VARIABLES = ("LD_", "GLIBC_", "MALLOC_", "ASAN_", "TSAN_", "UBSAN_", "LSAN_", "PYTHON")


def startup_part(env: dict[str, str]) -> dict[str, str]:
    """What of `env` a process reads only as it starts."""
    return {k: v for k, v in env.items() if k.startswith(STARTUP_VARIABLES)}


class ForkedProcess:
    """One forked rank process, with the part of subprocess.Popen the launcher uses."""

    args: object = "rank process"  # what a TimeoutExpired names

    def __init__(self, parent: ChildReports, pid: int) -> None:
        self._parent = parent
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self._parent.gone and not _alive(self.pid):
            self.returncode = 255  # its parent was killed: its status went with it
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            if self._parent.gone:  # an orphan: no report will come
                time.sleep(0.05)
            else:
                self._parent.wait_for_exit(self, left)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ChildReports:
    """What a launcher learns of the children a fork parent made, from the parent's reports:
    each one's exit status (reported before or after its start was read here), and whether
    the parent is gone (no more reports will come)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._exits: dict[int, int] = {}  # pid -> status, for pids not yet known here
        self._children: dict[int, ForkedProcess] = {}
        self.gone = False  # the parent has exited: no more reports

    def _adopt(self, child: ForkedProcess) -> None:
        """(self._cond held) `child` is known here now."""
        self._children[child.pid] = child
        if child.pid in self._exits:  # it ended before its start was read here
            child.returncode = self._exits.pop(child.pid)

    def _exited(self, pid: int, status: int) -> None:
        """(self._cond held) the parent reported `pid`'s exit."""
        child = self._children.pop(pid, None)
        if child is None:
            self._exits[pid] = status
        else:
            child.returncode = status

    def _ended(self) -> None:
        with self._cond:
            self.gone = True
            self._cond.notify_all()

    def wait_for_exit(self, child: ForkedProcess, timeout: float | None) -> None:
        """Until `child`'s exit is reported, the parent is gone, or `timeout` passes."""
        with self._cond:
            self._cond.wait_for(lambda: child.returncode is not None or self.gone, timeout)


class ForkParent(ChildReports):
    """The launcher's side: requests go to the parent's stdin, reports come from its stdout
    (read by a thread of its own, so any thread may start and wait for processes)."""

    _shared: ForkParent | None = None
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls, env: dict[str, str]) -> ForkParent:
        """This process's parent, started with `env` if none runs (or it has exited, or this
        process is a fork of the one that started it: the pipe is not this process's, or it
        was started with other STARTUP_VARIABLES: what its interpreter read as it started
        would not be this environment's)."""
        with cls._shared_lock:
            parent = cls._shared
            if parent is not None and parent._owner == os.getpid():
                if parent._startup != startup_part(env):
                    parent.close()  # it ends once the children it forked have
                elif not parent.gone:
                    return parent
            parent = cls._shared = cls(env)
            return parent

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__()
        # numpy's BLAS would start a thread of its own in the parent at import: none, so that
        # the parent forks with no thread but its main one
        env = {**env, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        self._owner = os.getpid()
        self._startup = startup_part(env)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "comminsight.sim.forks"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
        )
        self._ids = itertools.count(1)
        self._write_lock = threading.Lock()
        self._started: dict[int, str] = {}  # request id -> its reply
        self._reader = threading.Thread(target=self._read, name="sim-fork-reports", daemon=True)
        self._reader.start()

    def start(
        self,
        argv: list[str],
        env: dict[str, str],
        log: Path,
        run_as: tuple[int, int] | None = None,
    ) -> ForkedProcess:
        """A rank process forked with `argv`, `env` and `log`, running as `run_as` (uid, gid)
        when given (this process being root), else as this process's user."""
        request_id = next(self._ids)
        umask = current_umask()
        request = {
            "id": request_id,
            "argv": argv,
            "env": env,
            "log": str(log),
            "cwd": os.getcwd(),
            "umask": umask,
            "run_as": list(run_as) if run_as else None,
        }
        with self._write_lock:
            try:
                self._proc.stdin.write((json.dumps(request) + "\n").encode())
                self._proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass  # it has exited: said below
        deadline = time.monotonic() + START_DEADLINE_S
        with self._cond:
            while request_id not in self._started:
                if self.gone:
                    raise RuntimeError(
                        f"the simulator's fork parent exited with status {self._proc.returncode}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    self._proc.kill()  # a parent that cannot fork now never will
                    raise RuntimeError(
                        f"the simulator's fork parent (pid {self._proc.pid}) started no rank "
                        f"process within {START_DEADLINE_S:.0f} s: killed"
                    )
                self._cond.wait(left)
            reply = self._started.pop(request_id)
            if not reply.isdigit():
                raise RuntimeError(f"the simulator's fork parent could not fork: {reply}")
            child = ForkedProcess(self, int(reply))
            self._adopt(child)
        return child

    def close(self) -> None:
        """No more requests: the parent ends once every child has."""
        with self._write_lock:
            self._proc.stdin.close()

    def _read(self) -> None:
        for raw in self._proc.stdout:
            words = raw.decode().split(maxsplit=2)
            with self._cond:
                if words[:1] == ["started"] and len(words) == 3:
                    self._started[int(words[1])] = words[2].strip()
                elif words[:1] == ["exited"] and len(words) == 3:
                    self._exited(int(words[1]), int(words[2]))
                self._cond.notify_all()
        self._proc.wait()
        self._ended()


def runs_start_up_code(env: dict[str, str]) -> bool:
    """Whether a new interpreter with `env` would run a sitecustomize or usercustomize found
    on its PYTHONPATH: code a fork of a started parent never runs."""
    for directory in env.get("PYTHONPATH", "").split(os.pathsep):
        for name in ("sitecustomize", "usercustomize"):
            if directory and (
                os.path.exists(os.path.join(directory, name + ".py"))
                or os.path.isdir(os.path.join(directory, name))
            ):
                return True
    return False


def current_umask() -> int:
    """This process's umask, read without changing it: os.umask can only read it by setting
    another, and a file another thread creates meanwhile would get that one (0: writable by
    anyone)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    umask = os.umask(0o077)  # no /proc: set a strict one for the instant it takes
    os.umask(umask)
    return umask


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---- the parent process ------------------------------------------------------------------


def _report(line: str) -> None:
    os.write(1, (line + "\n").encode())  # unbuffered: a child inherits no pending report


class _Requests:
    """Complete request lines from stdin, read as they come (the parent also waits for its
    children's exits, so it never blocks on a partial line)."""

    def __init__(self) -> None:
        self._pending = b""
        self.ended = False

    def read(self) -> list[dict]:
        data = os.read(0, 1 << 16)
        if not data:
            self.ended = True
        *lines, self._pending = (self._pending + data).split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]


def reap_children(report: Callable[[str], None] | None = None) -> int:
    """Report every child that has ended ("exited PID STATUS", the status as
    subprocess.Popen gives it: -N for a signal), to the launcher by default; how many."""
    report = report or _report
    reaped = 0
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        report(f"exited {pid} {os.waitstatus_to_exitcode(status)}")
        reaped += 1


def _serve() -> dict | None:
    """Fork a child per request, reporting each child's start and end, until stdin ends and
    every child has. Returns in a child (its request), None in the parent."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select below
    requests, children = _Requests(), 0
    while not requests.ended or children:
        watched = [wake_r] if requests.ended else [0, wake_r]
        try:
            ready, _, _ = select.select(watched, [], [])
        except InterruptedError:
            ready = []
        if wake_r in ready:
            os.read(wake_r, 1 << 12)
        children -= reap_children()
        if 0 not in ready:
            continue
        for request in requests.read():
            if request["argv"] and rank_process.prebuild_plan(request["argv"][0]):
                # the new plan out of every child's collections too, the old one (and
                # whatever cycles it made) collected
                gc.unfreeze()
                gc.collect()
                gc.freeze()
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError as e:
                _report(f"started {request['id']} {e}")
                continue
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_r)
                os.close(wake_w)
                return request
            children += 1
            _report(f"started {request['id']} {pid}")
    return None


def _become(request: dict) -> list[str]:
    """In a child: the rank process's environment, directory, umask, log and standard
    streams; its arguments."""
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if request.get("run_as"):
        uid, gid = request["run_as"]
        # another user's job: nothing of the launcher's privileges stays with the rank
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    sys.argv = [rank_process.__file__, *request["argv"]]
    return request["argv"]


def _prepare() -> None:
    """What every child would otherwise do for itself: parse the ABI declarations, open the
    simulator's C part. The objects made so far are frozen out of the collector's reach, so
    no child's collections walk (and copy, page by page) the parent's heap."""
    for version in (4, 5, 6):
        abi_ffi(version)
        native_functions(version)
    gc.collect()
    gc.freeze()


def main() -> int:
    _prepare()
    request = _serve()
    if request is None:
        return 0
    return rank_process.main(_become(request))


if __name__ == "__main__":
    sys.exit(main())
