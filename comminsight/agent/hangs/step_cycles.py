"""The Step cycle the live Semantic Engine learned for a communicator member's GPU, read back
from the engine's step summaries: how many collectives its newest Steps had on the member's
communicator (step-summary v1 comm_seqs op_count), where they agree.

Diagnosis asks only when ranks disagree at an op and no majority decides, so the summaries
are read then and not kept up to date: the last TAIL_BYTES of the GPU's files
(`<home>/semantics/step/live-<node>-<pid>-<start><suffix>.jsonl[.partial]`, one per GPU of the
process), remembered while a file's size and mtime stay the same (a hang is diagnosed again
on every pass while it lasts). No file, no Step on the communicator, or Steps that disagree:
no Step cycle, and the rhythm rests on the completed ops alone.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from comminsight.agent.hangs.op_rhythm import StepCycle
from comminsight.agent.state.snapshot import CommMember
from comminsight.safe_open import open_regular
from comminsight.step_file_bounds import STEP_FILE_BYTES_MAX
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen import home_v1_names as home_names

log = logging.getLogger(__name__)

TAIL_BYTES = 256 << 10  # a Step summary is a few KiB: this holds dozens of Steps
RECENT_STEPS = 8  # the newest Steps looked at
MIN_AGREEING_STEPS = 2  # one Step's length says nothing of a cycle
MAX_CACHED_FILES = 1024

_Count = Annotated[int, msgspec.Meta(ge=0)]


class _Span(msgspec.Struct):
    kind: Literal["coll", "p2p"]
    comm_id: str
    op_count: Annotated[int, msgspec.Meta(ge=1)]


class _Recovery(msgspec.Struct):
    confidence: Annotated[float, msgspec.Meta(ge=0, le=1)]


class _Step(msgspec.Struct):
    """The fields of a step-summary v1 record the cycle needs (the others are skipped)."""

    schema_version: Literal[1]
    step_index: _Count
    recovery: _Recovery
    warmup: bool = False
    comm_seqs: list[_Span] | None = None


_decoder = msgspec.json.Decoder(_Step)


def newest_steps(path: Path, tail_bytes: int = TAIL_BYTES) -> list[_Step]:
    """The step summaries in the file's last tail_bytes (whole lines only), by step index;
    lines that are not step-summary v1 are skipped."""
    with open_regular(path, STEP_FILE_BYTES_MAX) as f:
        size = os.fstat(f.fileno()).st_size
        start = max(0, size - tail_bytes)
        f.seek(start)
        data = f.read(size - start)
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the first line is cut
    steps = {}
    for line in lines:
        if not line.strip():
            continue
        try:
            step = _decoder.decode(line)
        except NOT_JSON:
            continue
        steps[step.step_index] = step
    return [steps[k] for k in sorted(steps)]


def cycle_in(steps: list[_Step], comm_id_hex: str) -> StepCycle | None:
    """The collectives per Step on the communicator that the newest Steps agree on (warm-up
    Steps left out: they may differ from the steady pattern); None when fewer than
    MIN_AGREEING_STEPS of them do."""
    counts: list[tuple[int, float]] = []
    for step in reversed([s for s in steps if not s.warmup][-RECENT_STEPS:]):
        count = next(
            (
                c.op_count
                for c in step.comm_seqs or ()
                if c.kind == "coll" and c.comm_id == comm_id_hex
            ),
            None,
        )
        if count is None or (counts and count != counts[0][0]):
            break  # a Step without the communicator, or of another length, ends the cycle
        counts.append((count, step.recovery.confidence))
    if len(counts) < MIN_AGREEING_STEPS:
        return None
    return StepCycle(counts[0][0], len(counts), min(conf for _, conf in counts))


class StepCycles:
    """member -> the Step cycle of its GPU on its communicator, for diagnose(step_cycles=).
    Only processes of this node (their summaries are here)."""

    def __init__(self, home: str | Path, node_name: str) -> None:
        self.directory = Path(home) / home_names.SEMANTICS / home_names.STEP
        self.node_name = node_name
        self._cache: dict[str, tuple[int, int, list[_Step]]] = {}

    def __call__(self, member: CommMember) -> StepCycle | None:
        p = member.process
        if p.node_name not in (None, self.node_name):
            return None
        comm = f"{member.comm_id:016x}"
        for path in self.files(p.pid, p.start_real_ns):
            cycle = cycle_in(self._steps(path), comm)
            if cycle is not None:
                return cycle  # the GPU of the process that uses this communicator
        return None

    def files(self, pid: int, start_real_ns: int) -> list[Path]:
        """The summary files of one process: one per GPU it drives."""
        prefix = f"live-{self.node_name}-{pid}-{start_real_ns}"
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []  # no engine ran here (yet)
        return [
            self.directory / name
            for name in sorted(names)
            if name.startswith(prefix)
            # the suffix (.dev<N>, .rank<N>) or the extension follows: not a longer start
            and name[len(prefix) : len(prefix) + 1] == "."
            and (name.endswith(".jsonl") or name.endswith(".jsonl.partial"))
        ]

    def _steps(self, path: Path) -> list[_Step]:
        key = str(path)
        try:
            st = path.stat()
        except OSError:
            return []  # sealed (renamed) since it was listed
        cached = self._cache.get(key)
        if cached is not None and cached[:2] == (st.st_size, st.st_mtime_ns):
            return cached[2]
        try:
            steps = newest_steps(path)
        except OSError as e:
            log.warning("step summaries %s unreadable for the rhythm: %s", path, e)
            return []
        if len(self._cache) >= MAX_CACHED_FILES:
            self._cache.clear()
        self._cache[key] = (st.st_size, st.st_mtime_ns, steps)
        return steps
