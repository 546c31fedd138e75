"""`comminsight ARGS` run in the test's own process: what the command prints on stdout and on
stderr, and the exit status the interpreter would have ended with, as subprocess.run
(capture_output=True, text=True) gives them for a real process with piped output.

A real process costs an interpreter and the CLI's imports (a second or more on a loaded
machine) before it does anything; a test of what a command says and prints needs none of
that. Tests of the process boundary itself (the console script, a signal, an argcomplete
answer) still start one.

Faithful to the process in what tests look at: the environment is exactly `env` while the
command runs (Rich reads COLUMNS from it, the CLI its settings); stdout and stderr are
separate pipes that are not terminals; `main`'s return value, a SystemExit (argparse's 2)
and an uncaught exception (a traceback on stderr, status 1) become the exit status as the
interpreter makes them.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
from collections.abc import Mapping


class _Pipe(io.StringIO):
    """stdout or stderr of the command: text, not a terminal, no file descriptor (Rich then
    takes the width from COLUMNS, or 80)."""

    def isatty(self) -> bool:
        return False


def _exit_status(code: object, stderr: io.TextIOBase) -> int:
    """What the interpreter exits with for sys.exit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=stderr)
    return 1


@contextlib.contextmanager
def _environment(env: Mapping[str, str]):
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_cli(
    args: list[str] | tuple[str, ...], env: Mapping[str, str], cwd: str | os.PathLike | None = None
) -> subprocess.CompletedProcess:
    """`comminsight *args` with environment `env` (and working directory `cwd`)."""
    from comminsight.cli import main

    out, err = _Pipe(), _Pipe()
    here = os.getcwd()
    with _environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        if cwd is not None:
            os.chdir(cwd)
        try:
            status = _exit_status(main(list(args)), err)
        except SystemExit as e:
            status = _exit_status(e.code, err)
        except Exception:  # the interpreter prints it and exits 1
            traceback.print_exc(file=sys.stderr)
            status = 1
        finally:
            os.chdir(here)
            sys.stdout.flush()
            sys.stderr.flush()
    return subprocess.CompletedProcess(
        ["comminsight", *args], status, out.getvalue(), err.getvalue()
    )
