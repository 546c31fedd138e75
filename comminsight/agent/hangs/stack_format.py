"""One line a person reads first about a captured stack: where the rank's own code is.

"rank 1 (node-a, pid 4242) at train.py:76 in main: time.sleep(30)" names the innermost frame
of the main thread that is the user's code: frames of Inject, of the Python standard library
and of installed packages (torch's own modules, site-packages) are skipped, since the
question on call is which line of the training script the rank is stuck at. When every frame
is library code, the innermost frame is named instead.
"""

from __future__ import annotations

import os
import sysconfig

from comminsight_gen.models.python_stack_v1 import Frame, PythonStack, StackStatus

MAX_CODE = 80


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return tuple(sorted(r.rstrip(os.sep) + os.sep for r in roots if r))


LIBRARY_ROOTS = _library_roots()
LIBRARY_PARTS = (
    "/site-packages/",
    "/dist-packages/",
    "/comminsight_inject/",
    "/comminsight/inject/",
)


def is_user_frame(frame: Frame) -> bool:
    file = frame.file
    if file.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return False
    if any(part in file for part in LIBRARY_PARTS):
        return False
    return not file.startswith(LIBRARY_ROOTS)


def culprit_frame(stack: PythonStack) -> Frame | None:
    """The main thread's innermost user frame (or its innermost frame, when none is)."""
    threads = stack.threads if isinstance(stack.threads, list) else []
    main = next((t for t in threads if t.main), threads[0] if threads else None)
    if main is None or not main.frames:
        return None
    return next((f for f in main.frames if is_user_frame(f)), main.frames[0])


def who(stack: PythonStack) -> str:
    rank = stack.rank if isinstance(stack.rank, int) else None
    where = f"({stack.host}, pid {stack.pid})"
    return f"rank {rank} {where}" if rank is not None else f"process {where}"


def describe(stack: PythonStack) -> str:
    """ "rank 1 (host, pid 42) at train.py:76 in main: time.sleep(30)", or why there is none."""
    if stack.status is not StackStatus.captured:
        return f"{who(stack)}: Python stack unavailable: {stack.reason or 'no reason given'}"
    frame = culprit_frame(stack)
    if frame is None:
        return f"{who(stack)}: no Python frame in the main thread"
    line = f"{os.path.basename(frame.file)}:{frame.line if frame.line is not None else '?'}"
    code = frame.code if len(frame.code) <= MAX_CODE else frame.code[: MAX_CODE - 1] + "…"
    text = f"{who(stack)} at {line} in {frame.function}"
    return f"{text}: {code}" if code else text
