"""The live engine's checkpoint: `<home>/semantics/step/engine-live.checkpoint.json`
(semantic-engine v1, mode live: the ring position of the first op not yet placed).

An Agent started again for the same home restores the engines of processes still running,
skips the ring records they had placed (those of their last Steps give the node's cut back the
context it had: restored_context), truncates their summaries to the checkpointed length, and
goes on: no Step lost or written twice, as long as the ring still holds the records that came
after the checkpoint (or the process's inspector logs do).

An Agent also checkpoints as it starts, with the time since when Agents have followed the
home (watching_since_real_ns): the next one recovers from their logs the processes that ran
since then and no checkpoint names (ended_processes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec
from msgspec import UnsetType

from comminsight.agent.steps.engine_hook import GpuStream
from comminsight.agent.steps.live_gpu import LiveGpu
from comminsight.agent.steps.restored_context import (
    PlacedRecords,
    newest_within,
    open_span,
    written_spans,
)
from comminsight.agent.steps.summary_disk import SummaryDisk
from comminsight.semantic.checkpoint import (
    CheckpointError,
    CheckpointFile,
    gpu_state,
    restore_engine,
)
from comminsight.semantic.engine import GpuEngine
from comminsight.semantic.offline import SummaryFile
from comminsight.semantic.positions import RingPosition
from comminsight.semantic.step_builder import GpuIdentity
from comminsight.semantic.templates import TemplateSet
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.models.semantic_engine_v1 import GpuState, ShmPosition
from comminsight_gen.models.step_summary_v1 import ProducerMode

log = logging.getLogger(__name__)

CHECKPOINT_NAME = home_names.ENGINE_LIVE_CHECKPOINT_JSON
# A replay log nearly full asks for a checkpoint (which trims it) ahead of time, but not more
# often than this: a checkpoint fsyncs every GPU's summaries.
MIN_CHECKPOINT_GAP_S = 1.0


class LiveCheckpoint:
    """What an earlier Agent left (GPUs to resume), and when and what this one saves."""

    def __init__(
        self,
        out_dir: Path,
        templates: TemplateSet,
        checkpoint_s: float,
        replay_max: int,
        disk: SummaryDisk,
    ) -> None:
        self._out_dir = out_dir
        self._templates = templates
        self._checkpoint_s = checkpoint_s
        self._replay_max = replay_max
        self._disk = disk
        self.restored = 0  # GPUs resumed from a checkpoint
        self.file = CheckpointFile(out_dir / CHECKPOINT_NAME, templates.digest(), ProducerMode.live)
        # its summary file's name (live-<node>-<pid>-<start><suffix>.jsonl: one GPU of one
        # process) -> the state an earlier Agent left for that GPU, until a GPU takes it on
        self.saved: dict[str, GpuState] = {}
        loaded = self.file.load()
        self._held = bool(loaded)  # the file on disk names GPUs
        # since when Agents have followed this home (None: no Agent has before this one), and
        # since when this one does: the processes that ran in between and no checkpoint names
        # are recovered from their logs (ended_processes, may_have_lapped)
        self.watching_since = self.file.watching_since_real_ns
        self.started_real_ns = time.time_ns()
        self._watch_marked = False  # a checkpoint says this Agent follows the home
        for state in loaded.values():
            if isinstance(state.input, ShmPosition) and not isinstance(state.gpu.pid, UnsetType):
                self.saved[state.output.file.removesuffix(".partial")] = state
        self._last_at = time.monotonic()
        self.next_at = self._last_at + checkpoint_s

    def soon(self) -> None:
        """Checkpoint soon, so that a restart still finds all it needs in a replay log."""
        self.next_at = min(self.next_at, self._last_at + MIN_CHECKPOINT_GAP_S)

    def at_once(self) -> None:
        self.next_at = time.monotonic()

    def may_have_lapped(self, gpu: GpuStream) -> bool:
        """Whether gpu's process began before this Agent, while an earlier one that never
        checkpointed it followed the home: its ring may have overwritten its first records,
        which its logs still hold."""
        return self.watching_since is not None and gpu.start_real_ns < self.started_real_ns

    # ---- restore -------------------------------------------------------------------------

    def resume(self, gpu: GpuStream, name: str, max_context: int) -> LiveGpu | None:
        """gpu as the checkpoint left it, if it names it (its entry is taken: once only);
        max_context: the most ops the node's cut keeps as context."""
        state = self.saved.pop(name, None)
        if state is None:
            return None
        if state.output.file == name:  # sealed: the process had finished
            engine = GpuEngine(GpuIdentity(gpu.node_name, 0), self._templates)
            g = LiveGpu(gpu, name, engine, SummaryFile(None, 0, 0), self._replay_max)
            g.finished, g.saved = True, state
            return g
        try:
            engine = restore_engine(state, self._templates, mode=ProducerMode.live)
        except CheckpointError as e:
            log.warning("semantic engine: pid %d starts over: %s", gpu.pid, e)
            return None
        out = SummaryFile(
            self._out_dir / state.output.file,
            state.output.byte_offset,
            state.output.summaries_written,
        )
        g = LiveGpu(gpu, name, engine, out, self._replay_max)
        g.skip_through = state.input.last_ring_seq
        g.logs_checked = bool(gpu.suffix)  # a split GPU's ring seqs interleave with others'
        g.checkpoint = state
        g.placed_before = _placed_before(out, state, engine, max_context)
        self.restored += 1
        log.info("semantic engine: pid %d resumed after ring record %d", gpu.pid, g.skip_through)
        return g

    # ---- save ----------------------------------------------------------------------------

    def current_state(self, g: LiveGpu) -> GpuState | None:
        """g's state now, or None where it cannot be saved at this moment."""
        if g.finished:
            position = g.last_position.after() if g.last_position is not None else None
        else:
            position = g.engine.resume_point(g.last_position)
        if position is None:
            return None
        try:
            size = g.out.sync() if g.out.path.name.endswith(".partial") else 0
        except OSError as e:  # keep the last good checkpoint of g until the disk takes it
            self._disk.failed(g.out.path, e)
            return None
        state = gpu_state(
            g.engine,
            position,
            g.out.path.name,
            size,
            g.out.written,
            shm_file=g.gpu.shm_file,
            producer_start_real_ns=g.gpu.start_real_ns,
        )
        if isinstance(position, RingPosition):
            g.replay.trim(position.ring_seq)
        return state

    def save(self, gpus: Iterable[LiveGpu], failed: Callable[[LiveGpu, Exception], None]) -> None:
        """Checkpoint every GPU; failed(g, error): g's engine failed to give its state."""
        self._last_at = time.monotonic()
        self.next_at = self._last_at + self._checkpoint_s
        states = {}
        for g in gpus:
            if g.out.path is None:
                if g.saved is not None:
                    states[g.saved.output.file] = g.saved
                continue
            if g.retry_at is None:  # a failed engine's state is not to be trusted
                try:
                    state = self.current_state(g)
                except Exception as e:
                    failed(g, e)
                    state = None
                if state is not None:
                    g.checkpoint = state
                elif g.finished and not g.seal_due:  # sealed before it placed an op
                    g.checkpoint = None
            # else the last good state: restarting from it, no Step is lost or written twice
            if g.checkpoint is not None:
                states[g.checkpoint.output.file] = g.checkpoint
        for state in self.saved.values():  # processes not seen since the restart: kept
            if (self._out_dir / state.output.file).exists():  # unless their file is gone
                states[state.output.file] = state
        # an empty one too once the last GPU is forgotten (the next Agent must not resume
        # it), and at the start: it tells the next Agent since when Agents follow the home
        if states or self._held or not self._watch_marked:
            try:
                self.file.save(states)
                self._held = bool(states)
                self._watch_marked = True
            except OSError as e:
                self._disk.failed(self.file.path, e)
            except msgspec.EncodeError as e:
                log.error("semantic engine: cannot write its checkpoint: %s", e)


def _placed_before(
    out: SummaryFile, state: GpuState, engine: GpuEngine, most: int
) -> PlacedRecords | None:
    """Where to gather a restored GPU's context from: its last Steps written (and the one
    left open), within what the node's cut keeps as context (`most` ops)."""
    try:
        spans = written_spans(out.path, state.output.byte_offset, most)
    except (OSError, ValueError) as e:  # the file is checked again by every write
        log.warning("semantic engine: %s: its last Steps cannot be read (%s)", out.path, e)
        spans = []
    last = open_span(engine.open)
    if last is not None:
        spans = newest_within([*spans, last], most)
    # a Step is taken back whole or not at all: records beyond twice the context are
    # of no use to it (ops are placed by issue order, so a few more than the Steps hold)
    return PlacedRecords(spans, most_records=2 * most) if spans else None
