"""Engine checkpoints (semantic-engine v1, kind: checkpoint): a GpuEngine's whole state as a
`GpuState`, and back.

A GpuEngine can be saved only at a clean point of its input: every op before some position P
placed into Steps, none from P on (they sit in the reorder buffer or the selection probe, and
are re-read on resume). `GpuEngine.resume_point` finds P. With the state, the position P and
the output file's length, a resumed engine re-reads from P, truncates its summaries to that
length, and writes the same bytes an uninterrupted run would have.

The checkpoint file is written atomically (write, fsync, rename, fsync the directory); one
that is unreadable, of another schema or engine version, or made with other templates is not
used: the run starts over, which is slower but never wrong.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from pathlib import Path

import msgspec

from comminsight.durable_files import write_atomically
from comminsight.safe_open import read_regular
from comminsight.semantic.cut_runner import CutRunner, LiveCutRunner
from comminsight.semantic.cycle import Cycle
from comminsight.semantic.engine import ENGINE_VERSION, GpuEngine
from comminsight.semantic.positions import LogPosition, RingPosition
from comminsight.semantic.recovery import PeriodRunner, TemplateRunner
from comminsight.semantic.step_builder import (
    GpuIdentity,
    OpenStep,
    OpId,
    RoleTotals,
    SlowestOp,
)
from comminsight.semantic.step_summary import (
    ROLE_BW_WINDOW,
    ROLE_OP_WINDOW,
    STEP_WINDOW,
    History,
)
from comminsight.semantic.templates import TemplateSet
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen.models import semantic_engine_v1 as se

log = logging.getLogger(__name__)

# the states of every GPU of a node, each a few KiB; a file far bigger is none (a sparse file
# planted in the home would otherwise be read whole at start)
CHECKPOINT_BYTES_MAX = 1 << 30


class CheckpointError(ValueError):
    pass


def _opt(**values) -> dict:
    return {k: v for k, v in values.items() if v is not None}


def _op_ref(op) -> se.OpRef:
    return se.OpRef(
        kind=se.OpClass(op.kind),
        comm_id=op.comm_id,
        seq=op.seq,
        func=op.func,
        **_opt(ring_seq=op.ring_seq),
    )


def _op_id(ref: se.OpRef) -> OpId:
    ring = ref.ring_seq if ref.ring_seq is not msgspec.UNSET else None
    return OpId(ref.kind.value, ref.comm_id, ref.seq, ref.func, ring)


def _unset(value):
    return None if value is msgspec.UNSET else value


# ---- engine -> state ---------------------------------------------------------------------


def partial_step(step: OpenStep) -> se.PartialStep:
    slow = step.slowest
    return se.PartialStep(
        step_index=step.step_index,
        start_real_ns=step.start_real_ns,
        end_real_ns=step.end_real_ns,
        op_count=step.op_count,
        micro_step_count=step.micro_step_count,
        unexpected_op_count=step.unexpected_op_count,
        records_lost=step.records_lost,
        warmup=step.warmup,
        total_bytes=step.total_bytes,
        total_op_time_ns=step.total_op_time_ns,
        busbw_time_sum=step.busbw_time_sum,
        roles=[
            se.RoleAccumulator(
                role=name,
                op_count=t.op_count,
                time_ns=t.time_ns,
                bytes=t.bytes,
                busbw_time_sum=t.busbw_time_sum,
                max_op_time_ns=t.max_op_time_ns,
            )
            for name, t in sorted(step.roles.items())
        ],
        slowest_op=se.SlowestOpSoFar(
            op=_op_ref(slow.op),
            role=slow.role,
            duration_ns=slow.duration_ns,
            size_bytes=slow.size_bytes,
            busbw_gbs=slow.busbw_gbs,
            **_opt(comm_name=slow.comm_name),
        ),
        first_op=_op_ref(step.first_op),
        last_op=_op_ref(step.last_op),
        **_opt(
            start_mono_ns=step.start_mono_ns,
            end_mono_ns=step.end_mono_ns,
            comm_seqs=_comm_seqs(step.comm_seqs),
        ),
    )


def _comm_seqs(spans) -> list[se.CommSeqSpan] | None:
    if spans is None:  # not known: the restored Step reports none either
        return None
    return [
        se.CommSeqSpan(se.OpClass(kind), cid, *spans[(kind, cid)]) for kind, cid in sorted(spans)
    ]


def _cycle_keys(cycle: Cycle, period: bool) -> list[se.CycleKey]:
    keys = []
    for key in cycle.keys:
        if period:
            comm_id, func, size = key
            keys.append(se.CycleKey(func=func, size_bytes=size, comm_id=comm_id))
        else:
            role, func, size = key
            keys.append(se.CycleKey(func=func, size_bytes=size, role=role))
    return keys


def input_position(resume_at, shm_file: str | None = None, producer_start_real_ns: int = 0):
    """The checkpoint's `input`: where in the logs (offline) or the ring (live) to go on."""
    if isinstance(resume_at, RingPosition):
        return se.ShmPosition(
            shm_file=shm_file or "unknown",
            producer_start_real_ns=producer_start_real_ns,
            last_ring_seq=max(0, resume_at.ring_seq - 1),
        )
    return se.LogPosition(
        segment=resume_at.segment,
        byte_offset=resume_at.byte_offset,
        record_index=resume_at.record_index,
        **_opt(segment_index=resume_at.segment_index, last_ring_seq=resume_at.ring_seq),
    )


def gpu_state(
    engine: GpuEngine,
    resume_at,
    output_file: str,
    output_bytes: int,
    written: int,
    shm_file: str | None = None,
    producer_start_real_ns: int = 0,
) -> se.GpuState:
    """`resume_at` is a LogPosition (offline) or a RingPosition (live, with the producer's
    SHM file name and start time)."""
    g = engine.gpu
    runner = engine.runner
    selection: dict = {"selection": se.SelectionState.pending}
    if isinstance(runner, TemplateRunner):
        selection = {
            "selection": se.SelectionState.template,
            "template_name": runner.template.name,
            "fsm_state": runner.state,
        }
        if runner.cycle is not None:
            selection["cycle"] = _cycle_keys(runner.cycle, period=False)
            selection["cycle_phase"] = runner.cycle_pos
    elif isinstance(runner, CutRunner):
        # the cut is recomputed from the same input on resume: nothing of it to keep, but for
        # the template a live GPU's roles were named by (chosen once, from its first ops)
        selection = {"selection": se.SelectionState.job}
        if isinstance(runner, LiveCutRunner) and runner.template is not None:
            selection["template_name"] = runner.template.name
    elif isinstance(runner, PeriodRunner):
        selection = {
            "selection": se.SelectionState.period,
            "period_ops": len(runner.cycle),
            "period_phase": runner.cycle_pos,
            "cycle": _cycle_keys(runner.cycle, period=True),
            "cycle_phase": runner.cycle_pos,
        }
    history = engine.history
    roles = sorted(set(history.role_op_time_ns) | set(history.role_busbw_gbs))
    return se.GpuState(
        gpu=se.GpuKey(
            host=g.host,
            global_rank=g.global_rank,
            **_opt(job_id=g.job_id, pid=g.pid, local_rank=g.local_rank, cuda_device=g.cuda_device),
        ),
        next_step_index=engine.next_step_index,
        steps_emitted=engine.steps_emitted,
        matched_op_count=engine.matched_op_count,
        unexpected_op_count=engine.unexpected_op_count,
        history=se.History(
            step_duration_ns=list(history.step_duration_ns),
            roles=[
                se.RoleHistory(
                    role=r,
                    op_time_ns=list(history.role_op_time_ns.get(r, ())),
                    busbw_gbs=list(history.role_busbw_gbs.get(r, ())),
                )
                for r in roles
            ],
        ),
        input=input_position(resume_at, shm_file, producer_start_real_ns),
        output=se.OutputPosition(
            file=output_file, byte_offset=output_bytes, summaries_written=written
        ),
        **selection,
        **({"open_step": partial_step(engine.open)} if engine.open is not None else {}),
    )


# ---- state -> engine ---------------------------------------------------------------------


def _open_step(p: se.PartialStep) -> OpenStep:
    step = OpenStep(
        step_index=p.step_index,
        warmup=p.warmup,
        first_op=_op_id(p.first_op),
        start_mono_ns=_unset(p.start_mono_ns),
        start_real_ns=p.start_real_ns,
        last_op=_op_id(p.last_op),
        end_mono_ns=_unset(p.end_mono_ns),
        end_real_ns=p.end_real_ns,
        op_count=p.op_count,
        micro_step_count=p.micro_step_count,
        unexpected_op_count=p.unexpected_op_count,
        records_lost=p.records_lost,
        total_bytes=p.total_bytes,
        total_op_time_ns=p.total_op_time_ns,
        busbw_time_sum=p.busbw_time_sum,
    )
    for r in p.roles:
        step.roles[r.role] = RoleTotals(
            r.op_count, r.time_ns, r.bytes, r.busbw_time_sum, _unset(r.max_op_time_ns) or 0
        )
    if p.comm_seqs is msgspec.UNSET:  # an older checkpoint: the ops before it are not known
        step.comm_seqs = None
    else:
        step.comm_seqs = {
            (c.kind.value, c.comm_id): [c.first_seq, c.last_seq, c.op_count] for c in p.comm_seqs
        }
    s = p.slowest_op
    step.slowest = SlowestOp(
        _op_id(s.op), _unset(s.comm_name), s.role, s.duration_ns, s.size_bytes, s.busbw_gbs
    )
    return step


def restore_engine(state: se.GpuState, templates: TemplateSet, **engine_kwargs) -> GpuEngine:
    g = state.gpu
    gpu = GpuIdentity(
        host=g.host,
        global_rank=g.global_rank,
        pid=_unset(g.pid),
        local_rank=_unset(g.local_rank),
        cuda_device=_unset(g.cuda_device),
        job_id=_unset(g.job_id),
    )
    engine = GpuEngine(gpu, templates, **engine_kwargs)
    keys = state.cycle if state.cycle is not msgspec.UNSET else None
    phase = state.cycle_phase if state.cycle_phase is not msgspec.UNSET else 0
    if state.selection is se.SelectionState.template:
        template = next((t for t in templates.templates if t.name == state.template_name), None)
        if template is None:
            raise CheckpointError(f"template {state.template_name!r} is not loaded")
        cycle = Cycle(tuple((k.role, k.func, k.size_bytes) for k in keys)) if keys else None
        engine.runner = TemplateRunner(template, cycle, state.fsm_state, phase)
    elif state.selection is se.SelectionState.period:
        if not keys:
            raise CheckpointError("a period checkpoint without its cycle")
        cycle = Cycle(tuple((k.comm_id, k.func, k.size_bytes) for k in keys))
        engine.runner = PeriodRunner(cycle, phase, started=state.next_step_index > 0)
    engine.next_step_index = state.next_step_index
    engine.steps_emitted = state.steps_emitted
    engine.matched_op_count = state.matched_op_count
    engine.unexpected_op_count = state.unexpected_op_count
    if state.open_step is not msgspec.UNSET:
        engine.open = _open_step(state.open_step)
    h = History()
    h.step_duration_ns = deque(state.history.step_duration_ns, maxlen=STEP_WINDOW)
    for r in state.history.roles:
        if r.op_time_ns:
            h.role_op_time_ns[r.role] = deque(r.op_time_ns, maxlen=ROLE_OP_WINDOW)
        if r.busbw_gbs:
            h.role_busbw_gbs[r.role] = deque(r.busbw_gbs, maxlen=ROLE_BW_WINDOW)
    engine.history = h
    return engine


def resume_position(state: se.GpuState) -> LogPosition:
    i = state.input
    return LogPosition(
        i.segment,
        _unset(i.segment_index),
        i.byte_offset,
        i.record_index,
        _unset(i.last_ring_seq),
    )


# ---- the file ----------------------------------------------------------------------------


class CheckpointFile:
    def __init__(self, path: str | Path, digest: str, mode: se.ProducerMode) -> None:
        self.path = Path(path)
        self.digest = digest
        self.mode = mode
        self.sequence = 0
        # since when Agents have followed the home's processes live (Checkpoint's
        # watching_since_real_ns): None until a usable checkpoint is loaded or one is saved
        self.watching_since_real_ns: int | None = None

    def load(self) -> dict[str, se.GpuState]:
        """States by GPU stream; {} (start over) when there is no usable checkpoint."""
        try:
            data = read_regular(self.path, CHECKPOINT_BYTES_MAX)
        except FileNotFoundError:
            return {}
        except OSError as e:  # a FIFO, a link, a file far too big, unreadable
            log.warning("%s cannot be used as a checkpoint (%s); starting over", self.path, e)
            return {}
        try:
            ckpt = msgspec.json.decode(data, type=se.Checkpoint)
        except NOT_JSON as e:
            log.warning(
                "%s is not a valid semantic-engine checkpoint (%s); starting over", self.path, e
            )
            return {}
        if ckpt.engine_version != ENGINE_VERSION or ckpt.templates_digest != self.digest:
            log.warning(
                "%s was written by engine %s with templates %s; this is engine %s with %s: "
                "starting over",
                self.path,
                ckpt.engine_version,
                ckpt.templates_digest,
                ENGINE_VERSION,
                self.digest,
            )
            return {}
        self.sequence = ckpt.sequence
        since = ckpt.watching_since_real_ns
        self.watching_since_real_ns = (
            ckpt.written_real_ns if isinstance(since, msgspec.UnsetType) else since
        )
        # by the GPU's stream: its file is <stream>.jsonl.partial while open, then sealed
        return {g.output.file.removesuffix(".partial").removesuffix(".jsonl"): g for g in ckpt.gpus}

    def save(self, states: dict[str, se.GpuState]) -> None:
        self.sequence += 1
        now_real = time.time_ns()
        if self.watching_since_real_ns is None:
            self.watching_since_real_ns = now_real
        ckpt = se.Checkpoint(
            schema_version=1,
            engine_version=ENGINE_VERSION,
            templates_digest=self.digest,
            mode=self.mode,
            sequence=self.sequence,
            written_mono_ns=time.monotonic_ns(),
            written_real_ns=now_real,
            watching_since_real_ns=self.watching_since_real_ns,
            gpus=sorted(
                states.values(),
                key=lambda g: (g.gpu.host, g.gpu.global_rank, _unset(g.gpu.cuda_device) or 0),
            ),
        )
        write_atomically(self.path, msgspec.json.encode(ckpt))
