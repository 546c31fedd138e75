"""The node's live GPUs, one GpuEngine each: found, restored from the checkpoint or started,
fed their ops, cut together by the node's Step cut, finished and sealed.

The node's cut (live_cut.LiveJobCut) decides the Steps of all the node's GPUs together and
places them as they settle. A GPU whose process is gone is ended: once the GPUs it shares
communicators with have ended too (or the cut's wait is over), its last ops are placed, its
last Step written and its file sealed; once its SHM file is gone too, nothing of it is kept.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
from msgspec import UnsetType

from comminsight.agent.core.heap_trim import HeapTrim
from comminsight.agent.steps.engine_hook import GpuStream
from comminsight.agent.steps.lag import NodeLags, newest_placed_end
from comminsight.agent.steps.live_checkpoint import LiveCheckpoint
from comminsight.agent.steps.live_gpu import LiveGpu, summary_name
from comminsight.agent.steps.replay import ReplayLog
from comminsight.agent.steps.restarts import FailureCounts
from comminsight.agent.steps.restored_context import labelled_context
from comminsight.agent.steps.summary_disk import SummaryDisk
from comminsight.semantic.checkpoint import restore_engine
from comminsight.semantic.cut_runner import LiveCutRunner
from comminsight.semantic.engine import GpuEngine
from comminsight.semantic.live_cut import LiveJobCut
from comminsight.semantic.offline import SummaryFile
from comminsight.semantic.shm_input import engine_batch
from comminsight.semantic.step_builder import GpuIdentity
from comminsight.semantic.templates import TemplateSet
from comminsight_gen.models.semantic_engine_v1 import GpuState
from comminsight_gen.models.step_summary_v1 import ProducerMode

log = logging.getLogger(__name__)


class GpuEngines:
    def __init__(
        self,
        out_dir: Path,
        templates: TemplateSet,
        replay_max: int,
        live_cut: LiveJobCut,
        checkpoint: LiveCheckpoint,
        disk: SummaryDisk,
        lags: NodeLags,
        counts: FailureCounts,
        heap_trim: HeapTrim,
    ) -> None:
        self.gpus: dict[GpuStream, LiveGpu] = {}
        self._out_dir = out_dir
        self._templates = templates
        self._replay_max = replay_max
        self._live_cut = live_cut
        self._checkpoint = checkpoint
        self._disk = disk
        self._lags = lags
        self._counts = counts
        self._heap_trim = heap_trim

    def state(self, gpu: GpuStream) -> LiveGpu:
        g = self.gpus.get(gpu)
        if g is not None:
            return g
        name = summary_name(gpu)
        g = self._checkpoint.resume(gpu, name, self._live_cut.max_context)
        if g is not None:
            self.gpus[gpu] = g
            self.track(g)
            return g
        if (self._out_dir / name).exists():
            # sealed by an Agent before this one, which let go of it once its SHM file was
            # retired: a file that outlived its removal must not start it over
            return self._sealed_before(gpu, name)
        # open while the process runs, sealed (renamed) when it finishes: the archive takes
        # only sealed files
        out = SummaryFile(self._out_dir / f"{name}.partial", 0, 0)
        g = self.gpus[gpu] = LiveGpu(gpu, name, self._new_engine(gpu), out, self._replay_max)
        # its ring may have overwritten its first records, which its logs still hold
        # (lapped_rings reads them from its first record on)
        if self._checkpoint.may_have_lapped(gpu):
            g.logs_checked = bool(gpu.suffix)  # a split GPU's ring seqs interleave
        self.track(g)
        return g

    def _sealed_before(self, gpu: GpuStream, name: str) -> LiveGpu:
        engine = GpuEngine(GpuIdentity(gpu.node_name, 0), self._templates)
        g = self.gpus[gpu] = LiveGpu(gpu, name, engine, SummaryFile(None, 0, 0), 0)
        g.finished = True
        log.warning("semantic engine: %s is sealed: pid %d is not read again", name, gpu.pid)
        return g

    def retire(self, gpu: GpuStream) -> None:
        g = self.gpus.get(gpu)
        if g is not None:
            g.retired = True
            self._drop_if_done(g)

    def _drop_if_done(self, g: LiveGpu) -> None:
        """Forget a retired GPU whose file is sealed: its last checkpoint entry goes too."""
        if g.retired and g.finished and not g.seal_due and self.gpus.get(g.gpu) is g:
            del self.gpus[g.gpu]
            self._live_cut.forget(g.gpu)

    def _new_engine(self, gpu: GpuStream) -> GpuEngine:
        identity = GpuIdentity(
            host=gpu.node_name,
            global_rank=gpu.global_rank if gpu.global_rank is not None else gpu.pid,
            pid=gpu.pid,
            local_rank=gpu.local_rank,
            cuda_device=gpu.cuda_device,
            job_id=gpu.job_id,
        )
        engine = GpuEngine(identity, self._templates, mode=ProducerMode.live)
        engine.runner = LiveCutRunner()
        return engine

    def reopen(self, g: LiveGpu) -> None:
        """g's engine and summary file as its last checkpoint left them (a new engine and an
        empty file before any checkpoint), to be handed again what came since."""
        state = g.checkpoint
        if state is None:
            g.engine = self._new_engine(g.gpu)
            g.out = SummaryFile(self._out_dir / f"{g.name}.partial", 0, 0)
            g.skip_through, g.lost = -1, g.replay.dropped
        else:
            g.engine = restore_engine(state, self._templates, mode=ProducerMode.live)
            g.out = SummaryFile(
                self._out_dir / state.output.file,
                state.output.byte_offset,
                state.output.summaries_written,
            )
            g.skip_through, g.lost = state.input.last_ring_seq, 0

    def track(self, g: LiveGpu, resumed_after: int = -1) -> None:
        """Let the node's cut place g's ops (an engine restored with a runner of its own,
        from an Agent that cut each GPU alone, goes on with it). A restarted engine goes on
        after ring record `resumed_after` (-1: from its first op)."""
        engine = g.engine
        if engine.runner is None and engine.pending is None:
            engine.runner = LiveCutRunner(last_step=engine.next_step_index - 1)
        if isinstance(engine.runner, LiveCutRunner) and not g.finished:
            rank = g.gpu.global_rank if g.gpu.global_rank is not None else g.gpu.pid
            self._live_cut.track(g.gpu, engine, rank, resumed_after)
            if g.checkpoint is not None:
                self._restore_roles(g, g.checkpoint)

    def _restore_roles(self, g: LiveGpu, state: GpuState) -> None:
        """The template that named a restored GPU's roles, chosen once from its first ops
        (live_cut): the checkpoint names it, and a GPU that placed Steps without one had none."""
        named = None if isinstance(state.template_name, UnsetType) else state.template_name
        if named is None and not (state.next_step_index or state.steps_emitted):
            return  # nothing placed yet: its roles are named at its first placement
        template = next((t for t in self._templates.templates if t.name == named), None)
        if named is not None and template is None:
            log.warning(
                "semantic engine: pid %d: template %r named its roles and is not loaded now",
                g.gpu.pid,
                named,
            )
        self._live_cut.roles_known(g.gpu, template)

    def failed(self, g: LiveGpu, error: Exception) -> None:
        """Count a failure of g's engine."""
        failure = self._counts.count(error, g.gpu.pid)
        g.failures += 1
        g.last_failure = failure
        log.error(
            "semantic engine: GPU pid %d failed (%s); restarting it from its checkpoint",
            g.gpu.pid,
            failure.message,
            exc_info=error if g.failures == 1 else None,  # the traceback once per GPU
        )

    # ---- placing Steps -------------------------------------------------------------------

    def finish_ended(self, all_ended: bool = False) -> None:
        """Place the last ops of the GPUs whose processes ended (when the node's cut says
        their turn has come, or `all_ended`), write their last Steps and seal them."""
        now = time.monotonic()
        ready = self._live_cut.ended(now, all_ended)
        if not ready:
            return
        self.cut(final=frozenset(ready))
        for gpu in ready:
            self._live_cut.forget(gpu)
            g = self.gpus.get(gpu)
            if g is None or g.finished:
                continue
            try:
                self._disk.write(g, g.engine.finish())
            except Exception as e:  # its last Step is lost, not the others'
                self.failed(g, e)
            self.seal(g)

    def cut(self, final: frozenset = frozenset()) -> None:
        """Cut the node's held ops and write the Steps that settle; a failure of the cut
        is counted and the ops wait for the next one (within the cut's bound)."""
        self._heap_trim.worked()  # a cut frees the most: its job-wide columns
        try:
            placed = self._live_cut.cut(time.monotonic(), final)
        except Exception as e:
            log.exception("semantic engine: the node's Step cut failed")
            self._counts.count(e, None)
            placed = self._live_cut.bound_all()
        for gpu, summaries in placed.items():
            g = self.gpus.get(gpu)
            if g is not None:
                self._disk.write(g, summaries)
                self._disk.flush(g)
            lag = self._lags.get(gpu)
            if lag is not None and gpu in self._live_cut.placed_end:
                lag.placed(self._live_cut.placed_end[gpu])

    def _hand_context(self, g: LiveGpu) -> None:
        """Give the node's cut what g had placed before the restart (see restored_context)."""
        placed, g.placed_before = g.placed_before, None
        if placed is None or not placed.records:
            return
        ops = engine_batch(
            np.concatenate(placed.records),
            placed.comms,
            g.gpu.start_real_ns,
            g.gpu.start_mono_ns,
            g.comms,
            g.segments,
        )
        context = labelled_context(ops, placed.spans)
        if context is not None:
            self._live_cut.restore_context(g.gpu, *context)

    def handle(self, g: LiveGpu, kind: str, payload) -> None:
        """Hand g's engine one queued item: lost records, its end, or an ops batch."""
        if kind == "lost":
            g.lost += payload
            return
        if kind == "finished":
            self._hand_context(g)
            self._disk.write(g, g.engine.drain())
            if self._live_cut.tracks(g.gpu, g.engine):
                # sealed once the GPUs it shares communicators with have ended too
                self._live_cut.end(g.gpu, time.monotonic())
                self.finish_ended()
                if not g.finished:
                    self._disk.park(g)
                return
            self._disk.write(g, g.engine.finish())
            self.seal(g)
            return
        records, comms = payload
        if g.skip_through >= 0:
            # a restarted Agent reads the ring from its oldest record, a restarted engine is
            # handed again what came after its checkpoint: skip what it had placed; records
            # gone since (overwritten, or let go by the replay log) are lost
            if g.placed_before is not None:
                g.placed_before.add(records[records["seq"] <= g.skip_through], comms)
            records = records[records["seq"] > g.skip_through]
            if len(records) and not g.gpu.suffix:  # a split GPU's ring seqs interleave
                g.lost += _lost_after(g.skip_through, int(records["seq"][0]), g.not_ops)
            if len(records):
                g.skip_through = -1
                self._hand_context(g)
        gpu = g.gpu
        batch = engine_batch(
            records, comms, gpu.start_real_ns, gpu.start_mono_ns, g.comms, g.segments
        )
        if len(batch):
            batch.cols["lost_before"][0] += g.lost
            g.lost = 0
            held = g.engine.held
            self._disk.write(g, g.engine.feed(batch))
            self._live_cut.held_ops(g.gpu)
            g.last_position = batch.position(len(batch) - 1)
            lag = self._lags.get(gpu)
            if lag is not None:
                lag.placed(newest_placed_end(g.engine, held, batch))
        self._disk.flush(g)  # visible to readers (the API); fsync at checkpoints

    def seal(self, g: LiveGpu) -> None:
        self._disk.seal(g)
        g.finished = True
        g.replay = ReplayLog(0)  # a sealed file is never restarted
        g.retry_at = None
        self._lags.forget(g.gpu)
        self._drop_if_done(g)

    # ---- the disk ------------------------------------------------------------------------

    def write_waiting(self) -> None:
        """Seal the files due to be sealed, write the summaries that wait for the disk."""
        for g in list(self.gpus.values()):
            if g.out.path is None:
                continue
            if g.seal_due:
                self.seal(g)
            elif g.out.pending:
                self._disk.flush(g)

    def close_all(self) -> None:
        for g in list(self.gpus.values()):
            g.out.close()


def _lost_after(skip_through: int, first: int, not_ops: np.ndarray) -> int:
    """The ring records lost between a restored GPU's checkpoint and the first op after it:
    those skipped, less those its logs show were no op."""
    skipped = first - (skip_through + 1)
    if skipped > 0 and len(not_ops):
        skipped -= int(np.count_nonzero((not_ops > skip_through) & (not_ops < first)))
    return max(0, skipped)
