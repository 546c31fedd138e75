"""Megatron-LM's pipeline schedules as the order in which each stage computes and exchanges.

Megatron-core runs a training step's micro-batches through one of two schedules
(megatron/core/pipeline_parallel/schedules.py):

- `forward_backward_pipelining_without_interleaving` (1F1B): stage s runs min(pp - s - 1, M)
  warm-up forwards, then alternates one forward and one backward, then drains the remaining
  backwards. With one stage it degenerates to `forward_backward_no_pipelining` (F0 B0 F1 B1 ...).
- `forward_backward_pipelining_with_interleaving` (interleaved 1F1B): each stage holds V model
  chunks; virtual micro-batches walk a schedule table (`get_schedule_table`) of groups of N
  micro-batches per chunk, with (pp - s - 1) * 2 + (V - 1) * N warm-up forwards
  (`get_pp_rank_microbatches`); activations wrap from the last stage back to the first for
  the next chunk (`recv_tensor_from_previous_stage`).

Every exchange between stages is one `P2PCommunicator._communicate` call: with Megatron's
`batch_p2p_comm` it becomes one `torch.distributed.batch_isend_irecv` of up to four P2P ops
(`_batched_p2p_ops` orders them send-prev, recv-prev, send-next, recv-next), which PyTorch
issues as ONE NCCL group on the pipeline group's communicator, followed by
`torch.cuda.synchronize()` (`batch_p2p_sync`). The 1F1B helpers (`recv_forward`,
`send_forward_recv_backward`, ...) skip the call on the stage that has nothing to exchange;
the interleaved schedule always calls, so an empty exchange still synchronizes.

Data-parallel gradient sync follows the schedule too: with `--overlap-grad-reduce` and the
default `--align-grad-reduce`, Megatron sets `config.grad_sync_func`; the 1F1B schedule then
lets DDP's backward hooks launch bucket reductions only on the first stage's last backward and
calls `grad_sync_func` on the other stages once their backwards are done; the interleaved
schedule calls it for a chunk `pp_rank` backward steps after that chunk's last micro-batch
(`backward_step_helper_postprocess`) and for any chunk left at the end of the cool-down.

This module only orders the work; what each piece issues is the workload's business.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

ACTIVATION_KINDS = ("send_next", "recv_prev")  # activations flow to the next stage
# _batched_p2p_ops appends its P2POps in this order
TRANSFER_ORDER = ("send_prev", "recv_prev", "send_next", "recv_next")


@dataclass(frozen=True)
class Forward:
    chunk: int
    micro: int


@dataclass(frozen=True)
class Backward:
    chunk: int
    micro: int
    hooks_reduce: bool  # DDP's hooks may launch bucket reductions during it (no_sync is off)


@dataclass(frozen=True)
class GradSync:
    chunk: int  # grad_sync_func (DDP.start_grad_sync) of this model chunk is called here


@dataclass(frozen=True)
class Transfer:
    kind: str  # one of TRANSFER_ORDER
    chunk: int | None  # the model chunk the tensor belongs to (None until receives are labelled)
    micro: int | None

    @property
    def is_send(self) -> bool:
        return self.kind.startswith("send")

    @property
    def carries_activation(self) -> bool:
        return self.kind in ACTIVATION_KINDS


@dataclass(frozen=True)
class Exchange:
    """One `_communicate`: its P2P ops (one NCCL group), then torch.cuda.synchronize()."""

    transfers: tuple[Transfer, ...]


Work = Forward | Backward | GradSync | Exchange


@dataclass(frozen=True)
class ScheduleShape:
    pp: int  # pipeline stages
    micro_batches: int  # M
    chunks: int = 1  # V, model chunks per stage (virtual pipeline size)
    group: int = 0  # N, microbatch_group_size_per_vp_stage; 0: pp
    aligned_grad_sync: bool = False  # config.grad_sync_func is set (overlap + align grad reduce)

    @property
    def vp_group(self) -> int:
        return self.group or self.pp


def schedule_problem(shape: ScheduleShape) -> str | None:
    """Why Megatron refuses this shape, or None."""
    if shape.pp < 1 or shape.micro_batches < 1 or shape.chunks < 1:
        return "pp, micro-batches and virtual-pp must be at least 1"
    if shape.chunks == 1:
        return None
    if shape.pp < 3:
        # batched P2P would put two sends to the same peer in one batch, which NCCL matches
        # in order, swapping activations and gradients (Megatron's arguments.py check)
        return "the interleaved schedule with batched P2P needs pp > 2"
    n, m = shape.vp_group, shape.micro_batches
    if not shape.pp <= n <= m:
        return f"micro-batches per virtual stage group must be in [pp={shape.pp}, M={m}]"
    if 0 < m % n < shape.pp:
        return "M % vp-group must be 0 or at least pp (else the pipeline has dependency bubbles)"
    return None


def stage_schedules(shape: ScheduleShape) -> list[list[Work]]:
    """Every stage's ordered work, receives labelled with what they receive."""
    problem = schedule_problem(shape)
    if problem:
        raise ValueError(problem)
    build = one_f_one_b if shape.chunks == 1 else interleaved
    return label_receives([build(shape, stage) for stage in range(shape.pp)], shape.pp)


# ---- 1F1B ----


def one_f_one_b(shape: ScheduleShape, stage: int) -> list[Work]:
    pp, m = shape.pp, shape.micro_batches
    first, last = stage == 0, stage == pp - 1
    warmup = min(pp - stage - 1, m)
    remaining = m - warmup
    hooks_on_last = not shape.aligned_grad_sync or first
    work: list[Work] = []

    def exchange(*kinds_and_micro: tuple[str, int | None]) -> None:
        work.append(_exchange((kind, 0, micro) for kind, micro in kinds_and_micro))

    for micro in range(warmup):
        if not first:
            exchange(("recv_prev", None))
        work.append(Forward(0, micro))
        if not last:
            exchange(("send_next", micro))
    if remaining > 0 and not first:
        exchange(("recv_prev", None))
    for i in range(remaining):
        micro, back = warmup + i, i
        last_iteration = i == remaining - 1
        work.append(Forward(0, micro))
        if not last:
            exchange(("send_next", micro), ("recv_next", None))
        work.append(Backward(0, back, warmup == 0 and last_iteration and hooks_on_last))
        if not first:
            if last_iteration:
                exchange(("send_prev", back))
            else:
                exchange(("send_prev", back), ("recv_prev", None))
    for i in range(warmup):
        back = remaining + i
        if not last:
            exchange(("recv_next", None))
        work.append(Backward(0, back, i == warmup - 1 and hooks_on_last))
        if not first:
            exchange(("send_prev", back))
    if shape.aligned_grad_sync and not first:
        work.append(GradSync(0))  # "launch any remaining grad reductions"
    return work


# ---- interleaved 1F1B ----


def schedule_table(micro_batches: int, chunks: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) of each virtual micro-batch: groups of `group` micro-batches run
    through every chunk before the next group starts."""
    table = []
    for start in range(0, micro_batches, group):
        end = micro_batches if start + group >= micro_batches else start + group
        table += [(micro, chunk) for chunk in range(chunks) for micro in range(start, end)]
    return table


@dataclass(frozen=True)
class _Interleaving:
    shape: ScheduleShape
    stage: int
    table: tuple[tuple[int, int], ...]

    @property
    def total(self) -> int:
        return len(self.table)

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.shape.pp - 1

    def chunk(self, k: int, forward: bool) -> int:
        chunk = self.table[k % self.total][1]
        return chunk if forward else self.shape.chunks - 1 - chunk

    def micro(self, k: int) -> int:
        return self.table[k % self.total][0]

    def is_last_micro(self, k: int) -> bool:
        return 0 <= k < self.total and self.micro(k) == self.shape.micro_batches - 1

    def receives_next(self, k: int, forward: bool) -> bool:
        """Whether a tensor for virtual micro-batch k + 1 arrives: the stage that leads the
        direction gets nothing until the trailing stage has produced for a chunk that has a
        successor."""
        leading = self.first if forward else self.last
        if not leading:
            return True
        pp, last_chunk = self.shape.pp, (self.shape.chunks - 1 if forward else 0)
        if k < pp - 1:
            return False
        return self.chunk(k - (pp - 1), forward) != last_chunk

    def sends_activation(self, k: int) -> bool:
        return not (self.chunk(k, True) == self.shape.chunks - 1 and self.last)

    def sends_gradient(self, k: int) -> bool:
        return not (self.chunk(k, False) == 0 and self.first)

    def forward(self, k: int) -> Forward:
        return Forward(self.chunk(k, True), self.micro(k))

    def backward(self, k: int) -> Backward:
        hooks = not self.shape.aligned_grad_sync and self.is_last_micro(k)
        return Backward(self.chunk(k, False), self.micro(k), hooks)


def interleaved(shape: ScheduleShape, stage: int) -> list[Work]:
    plan = _Interleaving(shape, stage, tuple(schedule_table(*_table_args(shape))))
    total = plan.total
    warmup = (shape.pp - stage - 1) * 2 + (shape.chunks - 1) * shape.vp_group
    all_warmup = warmup >= total
    warmup = min(warmup, total)
    remaining = total - warmup
    work: list[Work] = []
    synced: set[int] = set()

    if not plan.first:
        work.append(_exchange([("recv_prev", None, None)]))
    for k in range(warmup):
        recv_prev = plan.receives_next(k, True) and k != total - 1
        work.append(plan.forward(k))
        send = (
            ("send_next", plan.chunk(k, True), plan.micro(k)) if plan.sends_activation(k) else None
        )
        wanted = [send, ("recv_prev", None, None) if recv_prev else None]
        if k == warmup - 1 and not all_warmup:
            wanted.append(None if plan.last else ("recv_next", None, None))
        work.append(_exchange(t for t in wanted if t))
    for k in range(remaining):
        forward_k = k + warmup
        work.append(plan.forward(forward_k))
        work.append(plan.backward(k))
        work += _aligned_grad_sync(plan, k, synced)
        recv_prev = plan.receives_next(forward_k, True) and k != remaining - 1
        wanted = [
            ("send_prev", plan.chunk(k, False), plan.micro(k)) if plan.sends_gradient(k) else None,
            ("recv_prev", None, None) if recv_prev else None,
            ("send_next", plan.chunk(forward_k, True), plan.micro(forward_k))
            if plan.sends_activation(forward_k)
            else None,
            ("recv_next", None, None) if plan.receives_next(k, False) else None,
        ]
        work.append(_exchange(t for t in wanted if t))
    if all_warmup and not plan.last:
        work.append(_exchange([("recv_next", None, None)]))
    for k in range(remaining, total):
        recv_next = plan.receives_next(k, False) and k != total - 1
        work.append(plan.backward(k))
        work += _aligned_grad_sync(plan, k, synced)
        wanted = [
            ("send_prev", plan.chunk(k, False), plan.micro(k)) if plan.sends_gradient(k) else None,
            ("recv_next", None, None) if recv_next else None,
        ]
        work.append(_exchange(t for t in wanted if t))
    if shape.aligned_grad_sync:
        work += [GradSync(chunk) for chunk in range(shape.chunks) if chunk not in synced]
    return work


def _table_args(shape: ScheduleShape) -> tuple[int, int, int]:
    return shape.micro_batches, shape.chunks, shape.vp_group


def _aligned_grad_sync(plan: _Interleaving, k: int, synced: set[int]) -> list[Work]:
    """grad_sync_func for the chunk whose last micro-batch went backward `stage` steps ago, so
    that every stage launches that chunk's reduction at the same time."""
    if not plan.shape.aligned_grad_sync:
        return []
    aligned = k - plan.stage
    if aligned < 0 or not plan.is_last_micro(aligned):
        return []
    chunk = plan.chunk(aligned, False)
    synced.add(chunk)
    return [GradSync(chunk)]


# ---- exchanges ----


def _exchange(transfers) -> Exchange:
    by_kind = {kind: Transfer(kind, chunk, micro) for kind, chunk, micro in transfers}
    return Exchange(tuple(by_kind[kind] for kind in TRANSFER_ORDER if kind in by_kind))


def label_receives(schedules: list[list[Work]], pp: int) -> list[list[Work]]:
    """Give each receive the chunk and micro-batch of the send it matches: NCCL pairs the j-th
    send from a rank to a peer with that peer's j-th receive from the rank."""
    sent: dict[tuple[int, str], list[Transfer]] = {}
    for stage, work in enumerate(schedules):
        for item in work:
            if isinstance(item, Exchange):
                for t in item.transfers:
                    if t.is_send:
                        sent.setdefault((stage, t.kind), []).append(t)
    taken: dict[tuple[int, str], int] = {}
    labelled = []
    for stage, work in enumerate(schedules):
        out = []
        for item in work:
            if isinstance(item, Exchange):
                item = Exchange(tuple(_label(t, stage, pp, sent, taken) for t in item.transfers))
            out.append(item)
        labelled.append(out)
    return labelled


def _label(t: Transfer, stage: int, pp: int, sent, taken) -> Transfer:
    if t.is_send:
        return t
    # recv_prev receives the previous stage's send_next; recv_next the next stage's send_prev
    peer, kind = (
        ((stage - 1) % pp, "send_next")
        if t.kind == "recv_prev"
        else ((stage + 1) % pp, "send_prev")
    )
    index = taken.get((peer, kind), 0)
    taken[(peer, kind)] = index + 1
    sends = sent.get((peer, kind), [])
    if index >= len(sends):
        raise AssertionError(f"stage {stage}: {t.kind} #{index} has no matching {kind} on {peer}")
    return replace(t, chunk=sends[index].chunk, micro=sends[index].micro)
