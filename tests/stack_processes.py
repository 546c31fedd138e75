"""Real Python processes for the stack tests: one with Inject (the repository's package on
PYTHONPATH, its import hook installed as the .pth line does, and a stand-in torch whose
_new_process_group_helper has torch's signature) that makes a process group, starts a helper
thread and sleeps in a known function; or one without Inject that only records the signals it
receives. Then what the Agent's StackCapture meets on disk, written by hand: the stacks line
Inject announces a process with, and the answer a process leaves in metadata/stacks/."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from waiting import wait_until

from comminsight.agent.hangs import stack_capture
from comminsight.agent.hangs.stack_capture import StackCapture
from comminsight_gen.models.python_stack_v1 import PythonStack

ROOT = Path(__file__).resolve().parent.parent

FAKE_TORCH = {
    "torch/__init__.py": "__version__ = '2.13.0'\nimport torch.distributed\n",
    "torch/distributed/__init__.py": "from . import distributed_c10d\n",
    "torch/distributed/distributed_c10d.py": textwrap.dedent(
        """
        def _new_process_group_helper(group_size, group_rank, global_ranks_in_group, backend,
                                      store, group_name, backend_options=None, timeout=None,
                                      pg_tag=None, device_id=None, group_desc=None):
            return PG(group_name), None
        class PG:
            def __init__(self, name):
                self.group_name = name
            def rank(self):
                return 0
            def size(self):
                return 1
        class Backend(str):
            pass
        class BackendConfig:
            def __init__(self, backend):
                self.b = str(backend)
            def get_device_backend_map(self):
                return {"cpu": self.b}
        """
    ),
}

# A training script: `PRELUDE` runs before Inject (an application's own handler goes there).
# Its sleep is the behaviour under test (the frame a stack signal finds it in), not a wait.
TRAIN = """\
import os, signal, sys, threading, time
PRELUDE
from comminsight.inject import startup
startup.install()
import torch.distributed.distributed_c10d as c10d
c10d._new_process_group_helper(1, 0, [], "gloo", None, "0", timeout=5, group_desc="d")


def load_batches(stop):
    stop.wait()  # HELPER_LINE


def train_step():
    time.sleep(600)  # SLEEP_LINE


stop = threading.Event()
threading.Thread(target=load_batches, args=(stop,), name="data-loader", daemon=True).start()
print("ready", os.getpid(), flush=True)
train_step()
"""

# No Inject at all: it counts the stack signal in a file, so a test can tell whether it came
# (it sleeps only to stay alive for the signals)
NO_INJECT = """\
import os, signal, sys, time
marker = sys.argv[1]
def record(signum, frame):
    with open(marker, "a") as f:
        f.write("signal\\n")
signal.signal(signal.SIGUSR2, record)
print("ready", os.getpid(), flush=True)
while True:
    time.sleep(600)
"""


def line_of(script: str, marker: str) -> int:
    return next(i for i, text in enumerate(script.splitlines(), 1) if marker in text)


class ScriptProcess:
    """A script run as a real process; `start()` returns once it printed its ready line."""

    def __init__(self, tmp_path: Path, script: str, args=(), **env: str) -> None:
        self.tmp_path = tmp_path
        self.script = script
        self.path = tmp_path / "train.py"
        self.path.write_text(script)
        for rel, text in FAKE_TORCH.items():
            target = tmp_path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        full = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
        full.update(PYTHONPATH=f"{tmp_path}:{ROOT}", RANK="1", **env)
        self.proc = subprocess.Popen(
            [sys.executable, str(self.path), *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full,
            cwd=tmp_path,
        )
        self.pid = self.proc.pid
        self.stderr: str | None = None
        self.ready = False

    def wait_ready(self, deadline_s: float = 120.0) -> None:
        if self.ready:
            return

        def ready_line() -> bool:
            if select.select([self.proc.stdout], [], [], 0)[0]:
                line = self.proc.stdout.readline().decode()
                assert line, "its output ended"
                return line.startswith("ready")
            assert self.proc.poll() is None, f"it exited ({self.proc.returncode})"
            return False

        try:
            wait_until(ready_line, deadline_s, "its ready line")
            self._wait_blocked(deadline_s)
        except AssertionError as e:
            raise AssertionError(f"{self.path} never got ready ({e}): {self.stop()}") from e
        self.ready = True

    def _wait_blocked(self, timeout_s: float) -> None:
        """After its ready line a script only blocks in its final wait: once the kernel shows
        its main thread sleeping, a signal finds it there, not on the way."""

        def state() -> bytes:
            stat = Path(f"/proc/{self.pid}/stat").read_bytes()
            return stat[stat.rindex(b")") + 2 :].split()[0]

        wait_until(lambda: state() == b"S", timeout_s, "its main thread blocked after ready")

    def stop(self) -> str:
        """Kill it (once) and return what it wrote on stderr."""
        if self.stderr is None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(timeout=60)
            self.stderr = self.proc.stderr.read().decode()
            self.proc.stdout.close()
            self.proc.stderr.close()
        return self.stderr

    def __enter__(self) -> ScriptProcess:
        self.wait_ready()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def train_script(prelude: str = "pass") -> str:
    return TRAIN.replace("PRELUDE", prelude)


def inject_lines(home: Path) -> list[dict]:
    lines = []
    for path in sorted((home / "metadata" / "inject").glob("*.jsonl")):
        lines += [json.loads(x) for x in path.read_text().splitlines()]
    return lines


def stacks_line(home: Path, pid: int) -> dict | None:
    found = [x for x in inject_lines(home) if x["kind"] == "stacks" and x["pid"] == pid]
    return found[-1] if found else None


def stack_files(home: Path, pid: int) -> list[Path]:
    return sorted((home / "metadata" / "stacks").glob(f"{pid}-*.json"))


STACK_SIGNAL = signal.SIGUSR2


HOST = socket.gethostname()


def ask(capture: StackCapture, pid: int, rank: int | None = 1, host: str = HOST) -> PythonStack:
    return asyncio.run(capture.request(host, pid, rank))


def ready_inject(tmp_path: Path, script: str | None = None, **env) -> tuple[ScriptProcess, Path]:
    home = tmp_path / "home"
    p = ScriptProcess(tmp_path, script or train_script(), COMMINSIGHT_HOME=str(home), **env)
    p.wait_ready()
    wait_until(lambda: stacks_line(home, p.pid), 60, "the stacks line")
    return p, home


def forge_announcement(home: Path, pid: int, **overrides) -> None:
    """A stacks line as Inject writes it, for a process Inject is not in."""
    ticks = stack_capture.start_ticks(pid)
    line = {
        "schema": "comminsight.inject-metadata.v1",
        "kind": "stacks",
        "pid": pid,
        "host": HOST,
        "mono_ns": 1,
        "real_ns": 1,
        "stacks": "available",
        "stack_signal": int(signal.SIGUSR2),
        "stack_signal_name": "SIGUSR2",
        "stack_dir": str(home / "metadata" / "stacks"),
        "reason": "",
        "start_ticks": ticks,
    }
    line.update(overrides)
    directory = home / "metadata" / "inject"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    (directory / f"{HOST}.{pid}.jsonl").write_text(json.dumps(line) + "\n")


def write_answer(home: Path, pid: int, data: bytes, seq: int = 0) -> Path:
    directory = home / "metadata" / "stacks"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / f"{pid}-{seq}.json"
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def answer(pid: int, **changes) -> dict:
    document = {
        "schema": "comminsight.python-stack.v1",
        "status": "captured",
        "host": HOST,
        "pid": pid,
        "rank": 3,
        "seq": 0,
        "signal": int(signal.SIGUSR2),
        "captured_mono_ns": time.monotonic_ns() + 10**12,  # after any signal of this test
        "captured_real_ns": time.time_ns(),
        "threads": [],
        "threads_omitted": 0,
        "truncated": False,
    }
    document.update(changes)
    return document
