"""Rank processes forked from one parent that has imported their code, not started as new
interpreters: a fresh interpreter imports numpy and the simulator again for every process
(about half a second of CPU each; a test suite starts thousands, a job of 64 ranks pays it 64
times over). The launcher starts one `python -m comminsight.sim.forks` per run, sends it one
request per process (its arguments, environment and log), and reads back each child's pid and,
once it has ended, its exit status, as subprocess.Popen reports it (-N: killed by signal N).

The parent forks only while it runs no other thread (a child would inherit locks held by
threads that do not exist in it). Each child replaces its environment with the one it was
sent (the plugin reads it through getenv), writes to its own log, and runs the rank process's
main; it ends as that interpreter would, so buffers are flushed and exit handlers run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from comminsight.sim import rank_process


class ForkedProcess:
    """One forked rank process, with the part of subprocess.Popen the launcher uses."""

    def __init__(self, parent: ForkParent, pid: int) -> None:
        self._parent = parent
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        self._parent.collect(block=False)
        if self.returncode is None and self._parent.gone and not _alive(self.pid):
            self.returncode = 255  # its parent was killed: its status went with it
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        while self.poll() is None:
            if not self._parent.collect(block=True, timeout=timeout):
                raise subprocess.TimeoutExpired("rank process", timeout)
            if self._parent.gone and self.poll() is None:  # an orphan: no report will come
                time.sleep(0.05)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class ForkParent:
    """The launcher's side: requests go to the parent's stdin, reports come from its stdout."""

    def __init__(self, env: dict[str, str]) -> None:
        # numpy's BLAS would start a thread of its own in the parent at import: none, so that
        # the parent forks with no thread but its main one
        env = {**env, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "comminsight.sim.forks"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
        )
        self._children: dict[int, ForkedProcess] = {}
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self.gone = False  # the parent has exited: no more reports
        self._reader = threading.Thread(target=self._read, name="sim-fork-reports", daemon=True)
        self._reader.start()

    def start(self, argv: list[str], env: dict[str, str], log: Path) -> ForkedProcess:
        request = json.dumps({"argv": argv, "env": env, "log": str(log)}) + "\n"
        self._proc.stdin.write(request.encode())
        self._proc.stdin.flush()
        with self._cond:
            while not any(line.startswith("started ") for line in self._lines):
                if self.gone:
                    raise RuntimeError(
                        f"the simulator's fork parent exited with status {self._proc.returncode}"
                    )
                self._cond.wait()
            line = next(line for line in self._lines if line.startswith("started "))
            self._lines.remove(line)
            child = ForkedProcess(self, int(line.split()[1]))
            self._children[child.pid] = child
        return child

    def close(self) -> None:
        """No more requests: the parent ends once every child has."""
        self._proc.stdin.close()

    def collect(self, block: bool, timeout: float | None = None) -> bool:
        """Apply the exit reports received; `block`: wait for one (False when `timeout`
        passes without one)."""
        with self._cond:
            if block and not self._has_exit():
                if not self._cond.wait_for(self._has_exit, timeout):
                    return False
            for line in [line for line in self._lines if line.startswith("exited ")]:
                self._lines.remove(line)
                _, pid, code = line.split()
                self._children[int(pid)].returncode = int(code)
            return True

    def _has_exit(self) -> bool:
        return self.gone or any(line.startswith("exited ") for line in self._lines)

    def _read(self) -> None:
        for raw in self._proc.stdout:
            with self._cond:
                self._lines.append(raw.decode().strip())
                self._cond.notify_all()
        self._proc.wait()
        with self._cond:
            self.gone = True
            self._cond.notify_all()


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


def _serve() -> tuple[list[str], dict[str, str], str] | None:
    """Fork a child per request until stdin ends, then reap them all. Returns in a child
    (its request), None in the parent."""
    children = 0
    for raw in sys.stdin.buffer:
        request = json.loads(raw)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return request["argv"], request["env"], request["log"]
        children += 1
        _report(f"started {pid}")
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        children -= 1
        _report(f"exited {pid} {os.waitstatus_to_exitcode(status)}")
    return None


def _become(argv: list[str], env: dict[str, str], log: str) -> None:
    """In a child: the rank process's environment, log and standard streams."""
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.argv = [rank_process.__file__, *argv]


def main() -> int:
    request = _serve()
    if request is None:
        return 0
    argv, env, log = request
    _become(argv, env, log)
    return rank_process.main(argv)


if __name__ == "__main__":
    sys.exit(main())
