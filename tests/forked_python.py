"""Python processes for tests, forked from a parent that has already imported their code.

A test that starts an Agent, a `comminsight` command or a plugin scenario as a new
interpreter pays for that interpreter's imports (numpy, aiohttp, httpx, the generated models,
the plugin ABI's C declarations) before the process does anything: about a CPU-second each,
which over a suite's few hundred such processes is minutes of a 2-core machine. Here one
parent per test process imports that code once; each process a test asks for is a fork of it
that becomes `python -m MODULE ARGS` or `python SCRIPT ARGS` as the interpreter would run it:
its own environment, working directory, umask, standard streams (the caller's own pipes or
files, passed over a UNIX socket), argv, sys.path[0], fresh random seeds; it ends as that
interpreter ends (exit handlers run, buffers flushed, a traceback and status 1 for an uncaught
exception).

What a process reads only as it starts (LD_PRELOAD of a sanitizer's runtime and its options,
MALLOC_*, PYTHON* but PYTHONPATH) is its parent's, so a process whose values differ from the
caller's is a new interpreter (subprocess.Popen). That includes a sanitizer build's
scenarios: one that forks while the plugin's threads allocate can leave the child stuck on
ASan's allocator lock, and in a child of a forked parent it did (1 run in 25 of the
fork-after-init scenario; 0 in 40 as new interpreters). So is any argv that is not
`sys.executable -m MODULE` or `sys.executable SCRIPT`, or that passes more descriptors.
Tests of start-up itself (the console script, an import that fails) use subprocess directly.

The parent forks only while it runs no thread but its main one (a child would inherit locks
held by threads that do not exist in it): it checks that after its imports and before every
fork, and refuses (the caller then starts real interpreters) rather than fork otherwise.

    python tests/forked_python.py FD     # the parent: requests arrive on socket FD
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from comminsight.sim.forks import (
    STARTUP_VARIABLES,
    ChildReports,
    ForkedProcess,
    current_umask,
    reap_children,
    runs_start_up_code,
    startup_part,
)

# What the processes tests start import: the Agent (its service, API server and readers), the
# CLI (its API client and tables), the plugin scenarios (the SHM reader, the ABI)
PRELOAD = (
    "comminsight.agent.main",
    "comminsight.agent.node.service",
    "comminsight.agent.api.server",
    "comminsight.agent.receivers.fifo_reader",
    "comminsight.cli.command_line",
    "comminsight.cli.client",
    "comminsight.cli.output",
    "comminsight.shm_reader",
    "comminsight.sim.abi",
    "plugin_scenarios",
    "hostile_scenarios",
    "hang_evidence_scenarios",
)

# A parent imports for seconds on a loaded machine, never minutes
START_DEADLINE_S = 120.0

_MAX_REQUEST = 1 << 20

# The limits a child inherits from its caller, as they are when it starts
INHERITED_LIMITS = (
    resource.RLIMIT_NOFILE,
    resource.RLIMIT_CORE,
    resource.RLIMIT_FSIZE,
    resource.RLIMIT_AS,
    resource.RLIMIT_DATA,
    resource.RLIMIT_STACK,
    resource.RLIMIT_NPROC,
)

# FORKED_PYTHON=0: every process a new interpreter, as before (what a fork would hide of a
# start-up, such as a module used but never imported, shows then)
SWITCH = "FORKED_PYTHON"


def _startup_part(env: dict[str, str]) -> dict[str, str]:
    """What of `env` a process reads only as it starts (PYTHONPATH is applied to each child's
    sys.path instead)."""
    return {k: v for k, v in startup_part(env).items() if k != "PYTHONPATH"}


def _target(argv: list[str]) -> tuple[str, str] | None:
    """("module", NAME) or ("script", PATH) for `python -m NAME ...` / `python PATH ...`."""
    if len(argv) < 2 or argv[0] != sys.executable:
        return None
    if argv[1] == "-m" and len(argv) >= 3:
        return ("module", argv[2])
    if not argv[1].startswith("-") and argv[1].endswith(".py"):
        return ("script", argv[1])
    return None


# ---- the caller's side ---------------------------------------------------------------------


class ForkedPopen(ForkedProcess):
    """A forked process, with the part of subprocess.Popen tests use (the simulator's forked
    rank process's, and its standard streams)."""

    def __init__(self, parent: _Parent, args: list[str], pid: int, pipes: dict) -> None:
        super().__init__(parent, pid)
        self.args = args
        self.stdin = pipes.get(0)
        self.stdout = pipes.get(1)
        self.stderr = pipes.get(2)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def communicate(self, input=None, timeout: float | None = None):
        """What the process wrote to its piped stdout and stderr once it has ended (and closed
        them), after `input` was written to its piped stdin."""
        results: dict[int, object] = {}

        def drain(n: int, stream) -> None:
            results[n] = stream.read()

        readers = [
            threading.Thread(target=drain, args=(n, s), daemon=True)
            for n, s in ((1, self.stdout), (2, self.stderr))
            if s is not None
        ]
        for r in readers:
            r.start()
        if self.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                if input:
                    self.stdin.write(input)
                self.stdin.close()
        deadline = None if timeout is None else time.monotonic() + timeout
        for r in readers:
            r.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if r.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for s in (self.stdout, self.stderr):
            if s is not None:
                s.close()
        return results.get(1), results.get(2)

    def __enter__(self) -> ForkedPopen:
        return self

    def __exit__(self, *exc) -> None:
        for s in (self.stdin, self.stdout, self.stderr):
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()
        self.wait()


class _Parent(ChildReports):
    """The forking parent of this process, and the thread that reads its reports."""

    def __init__(self, startup: dict[str, str]) -> None:
        super().__init__()
        self.startup = startup
        self.owner = os.getpid()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(STARTUP_VARIABLES)},
            **startup,
            # numpy's BLAS would start threads in the parent at import: none
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
        }
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(theirs.fileno())],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # a child's buffering follows its own fd 1, not this
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self._sock = mine
        self._ids = iter(range(1, 1 << 62))
        self._send_lock = threading.Lock()
        self._started: dict[int, str] = {}
        self.ready: bool | None = None  # None until the parent says whether it can fork
        threading.Thread(target=self._read, name="forked-python-reports", daemon=True).start()

    def start(self, argv, target, env, cwd, fds: list[int], session: bool, rlimits) -> int | str:
        """The forked child's pid, or why there is none."""
        request_id = next(self._ids)
        request = {
            "id": request_id,
            "argv": argv,
            "target": target,
            "env": env,
            "cwd": str(cwd) if cwd is not None else os.getcwd(),
            "umask": current_umask(),
            "session": session,
            # the caller's limits as they are now (it may have changed them since the parent
            # started), then the ones asked for
            "rlimits": [[which, *resource.getrlimit(which)] for which in INHERITED_LIMITS]
            + [[which, *values] for which, values in rlimits.items()],
        }
        with self._send_lock:
            try:
                socket.send_fds(self._sock, [json.dumps(request).encode()], fds)
            except OSError as e:
                return f"cannot reach the forking parent: {e}"
        deadline = time.monotonic() + START_DEADLINE_S
        with self._cond:
            while request_id not in self._started:
                left = deadline - time.monotonic()
                if self.gone or left <= 0:
                    return "the forking parent is gone" if self.gone else "no answer"
                self._cond.wait(left)
            reply = self._started.pop(request_id)
        return int(reply) if reply.isdigit() else reply

    def adopt(self, child: ForkedPopen) -> None:
        with self._cond:
            self._adopt(child)

    def wait_until_ready(self) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: self.ready is not None or self.gone, START_DEADLINE_S)
            return bool(self.ready) and not self.gone

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(4096)
            except OSError:
                data = b""
            if not data:
                break
            words = data.decode().split(maxsplit=2)
            with self._cond:
                if words[0] == "ready":
                    self.ready = True
                elif words[0].startswith("refused"):
                    self.ready = False
                    print(f"forked_python: {data.decode()}", file=sys.stderr)
                elif words[0] == "started" and len(words) == 3:
                    self._started[int(words[1])] = words[2]
                elif words[0] == "exited" and len(words) == 3:
                    self._exited(int(words[1]), int(words[2]))
                self._cond.notify_all()
        self._proc.wait()
        self._ended()


_parent: _Parent | None = None
_refused = False  # the parent could not fork: not asked again
_parent_lock = threading.Lock()


def _parent_for(env: dict[str, str]) -> _Parent | None:
    """This process's forking parent, for a child whose start-up variables are this
    process's own (None: a new interpreter's to read them)."""
    global _parent, _refused
    startup = _startup_part(env)
    if _refused or startup != _startup_part(dict(os.environ)):
        return None
    with _parent_lock:
        parent = _parent
        if parent is None or parent.gone or parent.owner != os.getpid():
            parent = _parent = _Parent(startup)
    if parent.wait_until_ready():
        return parent
    _refused = True
    return None


def _stdio(spec, n: int, stdout_fd: int | None, keep: list, pipes: dict, text: bool) -> int:
    """The fd the child gets as its fd n; pipe ends the caller reads or writes go to pipes."""
    if spec is None:
        return n
    if spec == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        keep.append(fd)
        return fd
    if spec == subprocess.STDOUT:
        return stdout_fd
    if spec == subprocess.PIPE:
        r, w = os.pipe()
        mine, theirs = (w, r) if n == 0 else (r, w)
        keep.append(theirs)
        mode = ("w" if n == 0 else "r") + ("" if text else "b")
        pipes[n] = open(mine, mode)  # noqa: SIM115
        return theirs
    return spec if isinstance(spec, int) else spec.fileno()


def popen(
    argv,
    *,
    env: dict[str, str] | None = None,
    stdin=None,
    stdout=None,
    stderr=None,
    cwd=None,
    text: bool = False,
    start_new_session: bool = False,
    rlimits: dict[int, tuple[int, int]] | None = None,
    pass_fds=(),
):
    """`python -m MODULE` / `python SCRIPT` forked from the prepared parent; anything a fork
    cannot be, with subprocess.Popen. rlimits: resource.setrlimit's (soft, hard) by resource,
    set before the process runs its code. pass_fds: more descriptors the child keeps (a new
    interpreter then)."""
    argv = [str(a) for a in argv]
    env = dict(os.environ if env is None else env)
    target = _target(argv)
    forkable = (
        target is not None
        and not pass_fds
        and os.environ.get(SWITCH) != "0"
        and (cwd is None or os.path.isdir(cwd))  # else Popen's own error
        and not runs_start_up_code(env)
    )
    parent = _parent_for(env) if forkable else None
    if parent is not None:
        keep: list[int] = []
        pipes: dict = {}
        try:
            fds = [_stdio(stdin, 0, None, keep, pipes, text)]
            fds.append(_stdio(stdout, 1, None, keep, pipes, text))
            fds.append(_stdio(stderr, 2, fds[1], keep, pipes, text))
            answer = parent.start(argv, target, env, cwd, fds, start_new_session, rlimits or {})
        finally:
            for fd in keep:
                os.close(fd)
        if not isinstance(answer, str):
            child = ForkedPopen(parent, argv, answer, pipes)
            parent.adopt(child)
            return child
        for p in pipes.values():  # the parent could not fork: a new interpreter
            p.close()
        print(f"forked_python: {argv}: {answer}; a new interpreter instead", file=sys.stderr)

    def limit() -> None:
        for which, values in (rlimits or {}).items():
            resource.setrlimit(which, values)

    return subprocess.Popen(
        argv,
        env=env,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        text=text,
        start_new_session=start_new_session,
        preexec_fn=limit if rlimits else None,
        pass_fds=pass_fds,
    )


def run(
    argv,
    *,
    env=None,
    input=None,
    capture_output=False,
    text=False,
    timeout=None,
    cwd=None,
    check=False,
    stdout=None,
    stderr=None,
) -> subprocess.CompletedProcess:
    """subprocess.run's common part, through popen."""
    if capture_output:
        stdout = stderr = subprocess.PIPE
    proc = popen(
        argv,
        env=env,
        stdin=subprocess.PIPE if input is not None else None,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        text=text,
    )
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    result = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    if check:
        result.check_returncode()
    return result


# ---- the parent process --------------------------------------------------------------------


def _threads() -> int:
    """This process's threads, its own and any a library started in C."""
    return len(os.listdir("/proc/self/task"))


def _prepare() -> str | None:
    """Import what the children will; why the parent cannot fork, if it cannot."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from comminsight.sim.abi import abi_ffi

    for version in (4, 5, 6):
        abi_ffi(version)
    gc.collect()
    gc.freeze()  # no child's collections walk (and copy, page by page) the parent's heap
    n = _threads()
    return None if n == 1 else f"refused: {n} threads after the imports"


def _serve(sock: socket.socket) -> tuple[dict, list[int]] | None:
    """Fork a child per request until the caller closes the socket. Returns in a child (its
    request and stdio fds), None in the parent."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select below
    while True:
        try:
            ready, _, _ = select.select([sock, wake_r], [], [])
        except InterruptedError:
            ready = []
        if wake_r in ready:
            os.read(wake_r, 1 << 12)
        reap_children(lambda line: sock.send(line.encode()))
        if sock not in ready:
            continue
        data, fds, _, _ = socket.recv_fds(sock, _MAX_REQUEST, 3)
        if not data:
            return None  # the caller is gone; its children are its own to end
        request = json.loads(data)
        why = None if _threads() == 1 else f"{_threads()} threads in the parent"
        pid = None
        if why is None and len(fds) == 3:
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                pid = os.fork()
            except OSError as e:
                why = str(e)
        elif why is None:
            why = f"{len(fds)} file descriptors came with the request, not 3"
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(wake_r)
            os.close(wake_w)
            sock.close()
            return request, fds
        for fd in fds:
            os.close(fd)
        sock.send(f"started {request['id']} {pid if why is None else why}".encode())


def _become(request: dict, fds: list[int]) -> None:
    """In a child: the process the request describes, up to running its code."""
    import random

    for n, fd in enumerate(fds):
        os.dup2(fd, n)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    if request["session"]:
        os.setsid()
    for which, soft, hard in request["rlimits"]:
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError) as e:  # a hard limit above the parent's, unprivileged
            print(f"forked_python: setrlimit({which}, {(soft, hard)}): {e}", file=sys.stderr)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    sys.stdout.reconfigure(line_buffering=os.isatty(1))  # as the interpreter makes it
    random.seed()
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    kind, name = request["target"]
    first = os.getcwd() if kind == "module" else str(Path(name).resolve().parent)
    # the parent runs without PYTHONPATH: its sys.path past [0] is the interpreter's own
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *extra, *sys.path[1:]]
    args = request["argv"][3:] if kind == "module" else request["argv"][2:]
    sys.argv = [name, *args]  # runpy puts the module's file in [0], as `-m` does


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    try:
        refusal = _prepare()
    except Exception as e:  # an import that fails here fails in the child too, visibly
        refusal = f"refused: {type(e).__name__}: {e}"
    if refusal is not None:
        sock.send(refusal.encode())
        return
    sock.send(b"ready")
    served = _serve(sock)
    if served is None:
        return
    request, fds = served
    _become(request, fds)
    import runpy

    kind, name = request["target"]
    if kind == "module":
        # as `-m` finds it: not yet imported (runpy warns of a module run that already is)
        sys.modules.pop(name, None)
        runpy.run_module(name, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(name, run_name="__main__")


if __name__ == "__main__":
    main()
