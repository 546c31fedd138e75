"""The shell blocks of a markdown document, and running them as a newcomer would: in order, in
one `bash` session per document, in a fresh home, each block's output checked against what
the document says it prints.

In the markdown, around a fenced block whose language is sh, bash, shell or console:

    <!-- skip: needs a GPU and torchrun -->      (just before the fence: not run, and why)
    ```sh
    .venv/bin/comminsight steps ~/logs
    ```
    <!-- expect: Step summaries: [1-9] -->       (just after it, one per line: a regular
                                                  expression its output must contain)

Both are HTML comments, invisible where the markdown is rendered. In a console block only the
lines after a `$ ` prompt (and their continuation lines) run; the rest is shown output.

A failure names the document and the line of the command that failed (or of the block whose
expectation is missing), so the message points at the text to fix.
"""

from __future__ import annotations

import os
import re
import selectors
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from waiting import wait_until

RUN_LANGUAGES = frozenset({"sh", "bash", "shell", "console"})
FENCE = re.compile(r"^(?P<indent>\s{0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
SKIP = re.compile(r"^\s*<!--\s*skip:(?P<reason>.*?)-->\s*$")
EXPECT = re.compile(r"^\s*<!--\s*expect:\s?(?P<regex>.*?)\s*-->\s*$")
ANY_MARKER = re.compile(r"<!--\s*(skip|expect)\b")

# What a reader must replace before a command runs: a bracketed option, an elided argument,
# a path or value to fill in. A runnable block may not hold one (write a command that runs,
# or mark the block skipped and say why); comments after `#` may.
PLACEHOLDERS = (
    (re.compile(r"\[--?[A-Za-z]"), "an optional flag in brackets"),
    (re.compile(r"(?<![\w.])\.\.\.(?![\w.])"), "an elided argument (...)"),
    (re.compile(r"/path/to\b"), "a /path/to placeholder"),
    (re.compile(r"<[a-z][a-z0-9_-]*>"), "an <angle-bracket> placeholder"),
)

BLOCK_TIMEOUT_S = 300.0
BASH_FLAGS = ("-euo", "pipefail")


class DocumentError(ValueError):
    """The markdown's markers are malformed: a stray expectation, a skip with no reason or no
    block after it, an unclosed fence."""


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str  # the block's lines, as in the document (a console block: its commands only)
    expects: list[str] = field(default_factory=list)
    skip: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def first_line(self) -> str:
        return next((s.strip() for s in self.text.splitlines() if s.strip()), "")

    @property
    def runs(self) -> bool:
        return self.language in RUN_LANGUAGES and self.skip is None


def _console_commands(lines: list[str]) -> list[str]:
    """A console block's commands, line for line (shown output becomes blank lines, so a
    command keeps its line number)."""
    out, continued = [], False
    for line in lines:
        if line.startswith("$ "):
            out.append(line[2:])
            continued = line.rstrip().endswith("\\")
        elif continued:
            out.append(line)
            continued = line.rstrip().endswith("\\")
        else:
            out.append("")
    return out


def extract_blocks(path: Path) -> list[Block]:
    """Every fenced block of the document, with the markers around it."""
    lines = Path(path).read_text().splitlines()
    blocks: list[Block] = []
    pending_skip: tuple[int, str] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        opening = FENCE.match(line)
        skip = SKIP.match(line)
        if skip:
            if pending_skip is not None:
                raise DocumentError(
                    f"{path}:{pending_skip[0]}: a skip marker with no block after it"
                )
            pending_skip = (i + 1, skip["reason"].strip())
            i += 1
            continue
        if EXPECT.match(line) or ANY_MARKER.search(line):
            raise DocumentError(
                f"{path}:{i + 1}: a marker that belongs right after a block's closing fence"
                f" (expect) or right before its opening fence (skip): {line.strip()}"
            )
        if opening is None:
            if pending_skip is not None and line.strip():
                raise DocumentError(
                    f"{path}:{pending_skip[0]}: a skip marker with no block after it"
                )
            i += 1
            continue
        fence = opening["fence"]
        language = opening["info"].lower()
        close = re.compile(rf"^\s{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), None)
        if end is None:
            raise DocumentError(f"{path}:{i + 1}: a fenced block that is never closed")
        body = lines[i + 1 : end]
        if language == "console":
            body = _console_commands(body)
        block = Block(Path(path), i + 1, language, "\n".join(body))
        if pending_skip is not None:
            skip_line, reason = pending_skip
            if not reason:
                raise DocumentError(
                    f"{path}:{skip_line}: a skip marker must say why the block cannot run"
                )
            if language not in RUN_LANGUAGES:
                raise DocumentError(
                    f"{path}:{skip_line}: a skip marker before a {language or 'plain'} block,"
                    " which never runs"
                )
            block.skip = reason
            pending_skip = None
        j = end + 1
        while j < len(lines) and (expect := EXPECT.match(lines[j])):
            if not expect["regex"]:
                raise DocumentError(f"{path}:{j + 1}: an empty expectation")
            try:
                re.compile(expect["regex"])
            except re.error as e:
                raise DocumentError(
                    f"{path}:{j + 1}: the expectation is no regular expression: {e}"
                ) from e
            block.expects.append(expect["regex"])
            j += 1
        if block.expects and not block.runs:
            raise DocumentError(f"{path}:{end + 2}: an expectation after a block that does not run")
        blocks.append(block)
        i = j
    if pending_skip is not None:
        raise DocumentError(f"{path}:{pending_skip[0]}: a skip marker with no block after it")
    return blocks


def _code_part(line: str) -> str:
    """The line without its comment (a `#` after a blank, outside quotes)."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k]
    return line


def placeholders(block: Block) -> list[str]:
    """`path:line: what` for each placeholder in the block's commands."""
    found = []
    for offset, line in enumerate(block.text.splitlines()):
        code = _code_part(line)
        for pattern, what in PLACEHOLDERS:
            if pattern.search(code):
                found.append(f"{block.path}:{block.line + 1 + offset}: {what}: {line.strip()}")
    return found


@dataclass
class BlockResult:
    block: Block
    output: str = ""
    state: str = "not reached"  # ok, failed, timed out, not reached
    status: int | None = None
    failed_line: int | None = None  # in the document


@dataclass
class DocumentRun:
    path: Path
    results: list[BlockResult]
    shell_stderr: str

    def failures(self) -> list[str]:
        """One message per problem, each starting with `document:line:`."""
        messages = []
        for r in self.results:
            b = r.block
            if r.state == "failed":
                where = f"{b.path}:{r.failed_line or b.line}"
                messages.append(
                    f"{where}: the command failed with status {r.status} (block at line {b.line})"
                    f"\n{_tail(r.output)}{_tail(self.shell_stderr)}"
                )
            elif r.state == "timed out":
                where = f"{b.path}:{r.failed_line or b.line}"
                messages.append(f"{where}: the block ran past its timeout\n{_tail(r.output)}")
            elif r.state == "ok":
                for regex in b.expects:
                    if not re.search(regex, r.output, re.MULTILINE):
                        messages.append(
                            f"{b.where}: the block's output lacks /{regex}/\n{_tail(r.output)}"
                        )
        return messages


def _tail(text: str, lines: int = 40) -> str:
    kept = text.rstrip().splitlines()[-lines:]
    return "".join(f"    | {s}\n" for s in kept)


def _script(blocks: list[Block], outdir: Path) -> tuple[str, dict[int, tuple[int, Block]]]:
    """The session's script, and for each block index the script line its text starts at."""
    head = [
        "exec 3>&1",
        # the ERR trap names the failing command's line before errexit ends the session
        'trap \'printf "\\n__DOC_ERR %s %s\\n" "$?" "$LINENO" >&3\' ERR',
        'trap \'printf "\\n__DOC_EXIT %s\\n" "$?" >&3\' EXIT',
    ]
    lines = list(head)
    starts: dict[int, tuple[int, Block]] = {}
    for k, block in enumerate(blocks):
        lines.append(f"printf '\\n__DOC_BEGIN {k}\\n' >&3")
        lines.append("{")
        starts[k] = (len(lines) + 1, block)
        lines.extend(block.text.splitlines() or [":"])
        lines.append(f"}} >{shlex.quote(str(outdir / f'{k}.out'))} 2>&1 </dev/null")
        lines.append(f"printf '\\n__DOC_END {k}\\n' >&3")
    return "\n".join(lines) + "\n", starts


def sandbox_env(home: Path, tmp: Path, **extra: str) -> dict[str, str]:
    """A newcomer's environment: no CommInsight settings and no activated virtualenv from the
    caller, a fresh HOME, no agent autostart (a test leaves no daemon behind), a wide terminal."""
    venv_bin = str(Path(__file__).resolve().parent.parent / ".venv" / "bin")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COMMINSIGHT_", "PYTEST_", "NCCL_"))
        and k not in ("VIRTUAL_ENV", "COLUMNS")
    }
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":") if p and p != venv_bin)
    env.update(HOME=str(home), TMPDIR=str(tmp), COMMINSIGHT_AGENT_AUTOSTART="0")
    # a wide terminal: what a block prints stays on the lines its expectations match
    env["COLUMNS"] = "200"
    env.update(extra)
    return env


def _group_alive(shell: subprocess.Popen) -> bool:
    shell.poll()  # the shell itself, once ended, is a member until reaped
    try:
        os.killpg(shell.pid, 0)
    except ProcessLookupError:
        return False
    return True


def _end_group(shell: subprocess.Popen) -> None:
    """Ends what the session left running (an Agent started with `&`): SIGTERM, a wait for the
    group to empty, SIGKILL for what did not."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(shell.pid, sig)
        except ProcessLookupError:
            return
        try:
            wait_until(lambda: not _group_alive(shell), 30, f"process group {shell.pid} to end")
            return
        except AssertionError:
            continue


def run_document(
    path: Path,
    workdir: Path,
    sandbox: Path,
    env: dict[str, str] | None = None,
    block_timeout_s: float = BLOCK_TIMEOUT_S,
) -> DocumentRun:
    """Runs the document's runnable blocks in order in one `bash -euo pipefail` session, in
    workdir, with HOME and TMPDIR under sandbox (env: sandbox_env's unless given). Stops at the
    first block that fails or runs past block_timeout_s; ends every process the session left."""
    blocks = [b for b in extract_blocks(path) if b.runs]
    home, tmp, outdir = sandbox / "home", sandbox / "tmp", sandbox / "outputs"
    for d in (home, tmp, outdir):
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = env if env is not None else sandbox_env(home, tmp)
    script, starts = _script(blocks, outdir)
    script_path = sandbox / "session.sh"
    script_path.write_text(script)
    results = [BlockResult(b) for b in blocks]
    stderr_path = sandbox / "session.stderr"
    with open(stderr_path, "w") as stderr:
        shell = subprocess.Popen(
            ["bash", *BASH_FLAGS, str(script_path)],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,  # its own process group: what it leaves can be ended
        )
    try:
        _follow(shell, results, starts, block_timeout_s)
    finally:
        _end_group(shell)
        shell.wait()
        shell.stdout.close()
    for k, r in enumerate(results):
        if r.state == "running":  # the session ended without a word (killed from outside)
            r.state, r.status = "failed", shell.returncode
        out = outdir / f"{k}.out"
        if out.exists():
            r.output = _document_lines(out.read_text(errors="replace"), script_path, starts[k])
        if r.state == "failed" and r.failed_line is None:
            # errors bash reports without the ERR trap (an unset variable, a syntax error)
            named = re.findall(rf"^{re.escape(str(path))}:(\d+): ", r.output, re.MULTILINE)
            r.failed_line = int(named[-1]) if named else None
    return DocumentRun(Path(path), results, stderr_path.read_text(errors="replace"))


def _document_lines(output: str, script_path: Path, start: tuple[int, Block]) -> str:
    """bash names the script and its line (`session.sh: line 12: X: unbound variable`): name
    the document and its line instead."""
    first, block = start

    def to_document(m: re.Match) -> str:
        line = int(m[1])
        return f"{block.path}:{block.line + 1 + line - first}: " if line >= first else m[0]

    return re.sub(rf"^{re.escape(str(script_path))}: line (\d+): ", to_document, output, flags=re.M)


def _follow(shell: subprocess.Popen, results, starts, block_timeout_s: float) -> None:
    """Reads the session's markers until it exits (its EXIT trap's word) or a block runs past
    its time. Background processes may hold the pipe open after the shell ended: the shell's
    own end is checked too, not only the pipe's."""
    selector = selectors.DefaultSelector()
    selector.register(shell.stdout, selectors.EVENT_READ)
    current: int | None = None
    deadline: float | None = None
    buffer = b""
    while True:
        if deadline is not None and time.monotonic() >= deadline:
            results[current].state = "timed out"
            return
        wait_s = 1.0 if deadline is None else min(1.0, max(0.0, deadline - time.monotonic()))
        if not selector.select(wait_s):
            if shell.poll() is not None and not selector.select(0):
                return
            continue
        chunk = os.read(shell.stdout.fileno(), 65536)
        if not chunk:
            return
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for raw in complete:
            words = raw.decode(errors="replace").split()
            if len(words) < 2 or not words[0].startswith("__DOC_"):
                continue
            kind = words[0]
            if kind == "__DOC_BEGIN":
                current = int(words[1])
                results[current].state = "running"
                deadline = time.monotonic() + block_timeout_s
            elif kind == "__DOC_END":
                results[int(words[1])].state = "ok"
                current, deadline = None, None
            elif kind == "__DOC_ERR" and current is not None and len(words) == 3:
                # the last one before the exit is the block's own command (a failure inside
                # a subshell also reports the line that ran the subshell)
                start, block = starts[current]
                script_line = int(words[2])
                if script_line >= start:
                    results[current].failed_line = block.line + 1 + script_line - start
            elif kind == "__DOC_EXIT":
                if current is not None:
                    results[current].state = "failed"
                    results[current].status = int(words[1])
                return
