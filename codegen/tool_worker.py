"""One interpreter for every datamodel-codegen run of a generation, not one per protocol.

A run of datamodel-codegen spends most of its 3 CPU-seconds importing itself, pydantic, black
and isort, and a generation runs it once per JSON Schema protocol. The worker imports them
once and runs each request as the command line would (`main(argv)`), one at a time, with its
own output captured; its answer is the exit status and that output.

Protocol, one JSON line each way: the request is the argument list after `-m <tool>`'s tool
name, the answer `{"status": N, "output": "..."}`. The worker keeps the two pipes to itself:
a run sees /dev/null as its standard input (a tool reading it meets its end, not the next
request) and its standard error as its standard output (a stray write cannot break an answer).
The worker is this file run as a script, so it needs no package but the tool's.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import traceback
from pathlib import Path

TOOL = "datamodel_code_generator"


class ToolWorker:
    """The generation's side: requests go one at a time (a lock), from any thread."""

    def __init__(self, root: Path) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            cwd=root,  # sources are named relative to the tree being generated
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._lock = threading.Lock()

    def run(self, args: list[str]) -> tuple[int, str]:
        """Exit status and output of `python -m datamodel_code_generator <args>`."""
        with self._lock:
            try:
                self._proc.stdin.write(json.dumps(args) + "\n")
                self._proc.stdin.flush()
                line = self._proc.stdout.readline()
            except (BrokenPipeError, ValueError):
                line = ""
            if not line:
                return 1, f"the {TOOL} worker exited with status {self._ended()}"
            try:
                answer = json.loads(line)
                return int(answer["status"]), str(answer["output"])
            except (ValueError, KeyError, TypeError):
                return 1, f"the {TOOL} worker answered {line[:200]!r}, not a status"

    def _ended(self) -> int | None:
        try:
            return self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        with self._lock:
            if self._proc.stdin and not self._proc.stdin.closed:
                with contextlib.suppress(BrokenPipeError):  # it has exited already
                    self._proc.stdin.close()
            self._proc.wait()

    def __enter__(self) -> ToolWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _run_one(args: list[str]) -> tuple[int, str]:
    from datamodel_code_generator.__main__ import main as tool_main

    captured = io.StringIO()
    with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
        try:
            status = int(tool_main(args))
        except SystemExit as e:  # argparse's errors, and tools that exit rather than return
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception:
            traceback.print_exc()
            status = 1
    return status, captured.getvalue()


def main() -> int:
    requests = os.fdopen(os.dup(0), "r")
    answers = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    for line in requests:
        if not line.strip():
            continue
        status, output = _run_one(json.loads(line))
        answers.write(json.dumps({"status": status, "output": output}) + "\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
