"""Megatron-LM GPT pretraining (pretrain_gpt.py): what each rank hands NCCL, in order.

Modelled on Megatron-LM core_v0.15 (the current tree issues the same calls):

- Groups. `parallel_state.initialize_model_parallel` creates every group on every rank with
  `torch.distributed.new_group` in a fixed order (data-parallel with CP and its Gloo twin,
  data-parallel and Gloo, context-parallel, model-parallel, tensor-parallel, per pipeline the
  pipeline, embedding and position-embedding groups, tensor+data, tensor+context, the expert
  groups, the distributed-optimizer instance group); PyTorch names them by a counter, so a
  communicator's name is `<group_desc>:<n>` with n its place in that order. Ranks are laid out
  tp-cp-ep-dp-pp: rank = tp_rank + tp * (dp_rank + dp * pp_rank). Megatron passes no device
  to `init_process_group`, so PyTorch creates each NCCL communicator at its first use.
- Before training (step None): `_compile_dependencies`' barrier, `pretrain`'s start-time
  all-reduce (MIN, float64), the tied-embedding all-reduce of
  `LanguageModule.setup_embeddings_and_output_layer` between the first and last stage,
  `build_train_valid_test_data_iterators`' flags broadcast, and `train`'s barrier as it
  starts its interval timer.
- Per micro-batch forward (`forward_step` -> `get_batch`): `get_batch_on_this_tp_rank`
  broadcasts the batch from TP rank 0 on the first and last stage (tokens, position ids;
  labels, loss mask; no attention mask, as with --no-create-attention-mask-in-dataloader);
  `VocabParallelEmbedding` all-reduces (sequence parallel: reduce-scatters) its output; each
  layer's attention and MLP end in a row-parallel linear that all-reduces (sequence parallel:
  all-gather before the column-parallel linear, reduce-scatter after the row-parallel one);
  `vocab_parallel_cross_entropy` all-reduces max, target logit and sum-exp in float32.
- Per micro-batch backward, mirrored: the column-parallel linears all-reduce their input
  gradient (`LinearWithGradAccumulationAndAsyncCommunication`; sequence parallel: all-gather
  of the gradient of the reduce-scatter, all-gather of the saved input for the weight
  gradient, reduce-scatter of the input gradient).
- Activations and gradients between stages: `pipeline_schedule`.
- `finalize_model_grads`: DDP's `finish_grad_sync` (the data-parallel reductions not yet
  launched), `_allreduce_non_tensor_model_parallel_grads` (sequence-parallel layernorm and
  row-parallel bias gradients, one coalesced all-reduce on TP), `_allreduce_word_embedding_grads`
  (first and last stage, the embedding group).
- `optimizer.step()` (`MixedPrecisionOptimizer.step`): with fp16 the dynamic loss scaler's
  found-inf all-reduce (MAX), then `get_grad_norm_fp32`'s all-reduce of the squared norm,
  both on the optimizer's grad-stats group (the model-parallel group; with the distributed
  optimizer the distributed-optimizer instance group, i.e. every rank), then with the
  distributed optimizer `step_with_ready_grads` all-gathers the updated parameters per bucket.
- `train_step` afterwards: `logical_and_across_model_parallel_group` (MIN, int32) and
  `reduce_max_stat_across_model_parallel_group` of the grad norm, and on the last stage the
  loss and token count all-reduced over data-parallel.

The data-parallel gradient buffers (`_ParamAndGradBuffer`): parameters in backward order;
with --overlap-grad-reduce the first stage's first chunk is cut into buckets of
max(40M, 1M x dp) parameters (other stages and chunks get one bucket); the distributed
optimizer gives the shared embedding its own bucket and pads each bucket to lcm(dp, 128).
Each bucket is one `_coalescing_manager` (an NCCL group of one reduce-scatter, all-reduce or
all-gather). With overlap, DDP's hooks launch a bucket's reduction in the last micro-batch's
backward as soon as its gradients are complete, except in the first iteration, whose buckets
are launched at `finish_grad_sync`.

Groups of one rank issue nothing here (NCCL is not called for them in this simulation).

Framework variants (`SimConfig.variants`, named in `megatron.VARIANTS`; none of them is on by
default), from Megatron-LM core_v0.15.0:

- `overlap_param_gather` (--overlap-param-gather, distributed optimizer):
  `DistributedOptimizer.step_with_ready_grads` launches no all-gather; `train()` keeps DDP's
  forward pre-hooks off until the first iteration whose update succeeded
  (`should_disable_forward_pre_hook`, `enable_forward_pre_hook`), and from the next iteration
  on each bucket group's pre-hook (`finish_param_sync`) dispatches its all-gather
  (`start_param_sync`, async `_coalescing_manager`) right before the first module using it
  runs in the first micro-batch's forward (--align-param-gather, the default, skips the
  next-bucket prefetch in the 1F1B schedule); `finish_grad_sync` re-arms them every
  iteration. After the last iteration `disable_forward_pre_hook(model)` all-gathers every
  bucket group synchronously (param_sync=True): a tail outside any Step.
- `fp16_overflow` (fp16 with --initial-loss-scale 65536) and `overflow_spikes` (gradient spikes
  in one step of four): `MixedPrecisionOptimizer.step` returns right after
  `prepare_grads`' found-inf all-reduce when it finds inf/NaN: no gradient norm, no count of
  zeros, no parameter all-gather; `train_step`'s model-parallel reductions and the loss
  all-reduce still run.
- `no_clip` (--clip-grad 0): `step` skips `clip_grad_norm`, so `get_grad_norm_fp32`'s
  all-reduce is not issued.
- `log_num_zeros` (--log-num-zeros-in-grad): `count_zeros_fp32` all-reduces the zero count on
  the grad-stats group after the norm, and `train_step` reduces it over model-parallel (MAX).
- `timers_l1` (--timing-log-level 1, --barrier-with-L1-time is the default): every level-1
  timer's `start(barrier=True)` is a `torch.distributed.barrier()` on the world: at
  `forward_backward_func`'s start ('forward-backward'), in `finalize_model_grads`
  ('all-grads-sync', 'conditional-embedder-grads-all-reduce',
  'non-tensor-parallel-grads-all-reduce', 'embedding-grads-all-reduce'), before
  `optimizer.step()` ('optimizer') and inside it ('optimizer-copy-to-main-grad',
  'optimizer-unscale-and-check-inf' with fp16, then after the found-inf check
  'optimizer-clip-main-grad', 'optimizer-count-zeros', 'optimizer-inner-step',
  'optimizer-copy-main-to-model-params', 'params-all-gather').
- `log_interval_<N>` (--log-interval N): `training_log` on every iteration whose 1-based number
  is a multiple of N: `timers('interval-time').elapsed(barrier=True)` (a world barrier), then
  `timers.log(timers_to_log)` all-gathers each rank's 24 timer values (float32, world,
  `_get_elapsed_time_all_ranks`) and reads them back; after the iteration's `train_step`,
  before evaluation.
- `ddp_bucket_10m` (--ddp-bucket-size 10000000): the first stage's first chunk is cut into
  10M-parameter buckets, so more reduce-scatters and parameter all-gathers per iteration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

from comminsight.sim.plan import CommSpec, HostSync, PlanBuilder
from comminsight.sim.workloads.loss_scale import megatron_overflows
from comminsight.sim.workloads.model import MICRO_BATCH, SEQ_LEN, ModelShape
from comminsight.sim.workloads.pipeline_schedule import (
    Backward,
    Exchange,
    Forward,
    GradSync,
    ScheduleShape,
    Work,
    stage_schedules,
)

VOCAB_SIZE = 50257  # GPT-2 BPE, the tokenizer of Megatron's GPT examples
VOCAB_DIVISOR = 128  # --make-vocab-size-divisible-by, times tp
MIN_BUCKET_PARAMS = 40_000_000  # resolve_ddp_bucket_size
BUCKET_PARAMS_PER_DP_RANK = 1_000_000
BUCKET_PAD = 128  # pad_bucket_end: lcm(dp, 128)
LAYERNORM_PARAMS_PER_HIDDEN = 6  # two layernorms (weight, bias) + two row-parallel biases
FINAL_LAYERNORM_PARAMS_PER_HIDDEN = 2
ATTENTION_SHARE = 1 / 3  # of a layer's compute; the MLP is the rest
EMBEDDING_LOOKUP_SHARE = 0.01  # of a matmul over the embedding: the lookup only gathers rows
# get_batch_on_this_tp_rank's broadcasts in order: (field, dtype, needed by the output layer
# rather than the embedding); one element per token
BATCH_FIELDS = (
    ("tokens", "ncclInt64", False),
    ("labels", "ncclInt64", True),
    ("loss_mask", "ncclFloat32", True),
    ("position_ids", "ncclInt64", False),
)
DTYPES = {"fp16": "ncclFloat16", "bf16": "ncclBfloat16"}
# bf16 reduces gradients in fp32 (--accumulate-allreduce-grads-in-fp32 is forced); fp16 in fp16
GRAD_DTYPES = {"fp16": "ncclFloat16", "bf16": "ncclFloat32"}


@dataclass(frozen=True)
class Flavour:
    """The Megatron-LM flags that change what NCCL sees."""

    distributed_optimizer: bool  # --use-distributed-optimizer
    overlap_grad_reduce: bool  # --overlap-grad-reduce (with the default --align-grad-reduce)


TIMERS_TO_LOG = 24  # training_log's timers_to_log (core_v0.15.0), each rank's all-gather count
FINALIZE_TIMERS = 4  # finalize_model_grads' level-1 timers, each started with a barrier
SPIKY_RATE = 0.25  # overflow_spikes: a step in four has a gradient spike
VARIANT_BUCKET_PARAMS = {"ddp_bucket_10m": 10_000_000}


@dataclass(frozen=True)
class Options:
    """The variants this workload knows, read from the config's names (see the docstring)."""

    overlap_param_gather: bool = False
    fp16_overflow: bool = False
    overflow_spikes: bool = False
    clip: bool = True
    log_num_zeros: bool = False
    l1_barriers: bool = False
    log_interval: int = 0
    bucket_params: int | None = None

    @classmethod
    def of(cls, variants: tuple[str, ...]) -> Options:
        v = set(variants)
        interval = [int(n.rsplit("_", 1)[1]) for n in v if n.startswith("log_interval_")]
        buckets = [VARIANT_BUCKET_PARAMS[n] for n in v if n in VARIANT_BUCKET_PARAMS]
        return cls(
            overlap_param_gather="overlap_param_gather" in v,
            fp16_overflow="fp16_overflow" in v or "overflow_spikes" in v,
            overflow_spikes="overflow_spikes" in v,
            clip="no_clip" not in v,
            log_num_zeros="log_num_zeros" in v,
            l1_barriers="timers_l1" in v,
            log_interval=min(interval) if interval else 0,
            bucket_params=min(buckets) if buckets else None,
        )


@dataclass(frozen=True)
class Parallelism:
    tp: int
    pp: int
    dp: int
    chunks: int  # model chunks per stage (virtual pipeline size)

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(pp_rank, dp_rank, tp_rank) of a global rank, order tp-cp-ep-dp-pp."""
        return rank // (self.tp * self.dp), (rank // self.tp) % self.dp, rank % self.tp

    def rank_of(self, stage: int, dp_rank: int, tp_rank: int) -> int:
        return tp_rank + self.tp * (dp_rank + self.dp * stage)

    def rank_groups(self, dims: str) -> list[tuple[int, ...]]:
        """`RankGenerator.get_ranks(dims)`: the groups spanning `dims` ("tp-pp", "dp", ...;
        cp and ep are size 1 here), in Megatron's order: the other dimensions' indices count
        up with tp fastest."""
        sizes = {"tp": self.tp, "dp": self.dp, "pp": self.pp}
        strides = {"tp": 1, "dp": self.tp, "pp": self.tp * self.dp}
        inside = [d for d in sizes if d in dims.split("-")]
        outside = [d for d in sizes if d not in inside]
        groups = []
        for out in product(*(range(sizes[d]) for d in reversed(outside))):
            base = sum(i * strides[d] for d, i in zip(reversed(outside), out, strict=True))
            members = [
                base + sum(i * strides[d] for d, i in zip(reversed(inside), within, strict=True))
                for within in product(*(range(sizes[d]) for d in reversed(inside)))
            ]
            groups.append(tuple(sorted(members)))
        return groups


def group_sequence(par: Parallelism):
    """Every `create_group` of initialize_model_parallel, in order: (group_desc, members).
    Gloo groups and groups nobody talks on take a name all the same."""
    singletons = [(r,) for r in range(par.world)]

    def each(groups, desc):
        for members in groups:
            yield desc, members

    def each_with_gloo(groups, desc):
        for members in groups:
            yield desc, members
            yield f"{desc}_GLOO", members

    yield from each_with_gloo(par.rank_groups("dp"), "DATA_PARALLEL_GROUP_WITH_CP")
    yield from each_with_gloo(par.rank_groups("dp"), "DATA_PARALLEL_GROUP")
    yield from each(singletons, "CONTEXT_PARALLEL_GROUP")
    yield from each(par.rank_groups("tp-pp"), "MODEL_PARALLEL_GROUP")
    yield from each(par.rank_groups("tp"), "TENSOR_MODEL_PARALLEL_GROUP")
    for pipeline in par.rank_groups("pp"):
        yield "PIPELINE_MODEL_PARALLEL_GROUP", pipeline
        # default_embedding_ranks / default_position_embedding_ranks
        yield "EMBEDDING_GROUP", tuple(dict.fromkeys((pipeline[0], pipeline[-1])))
        yield "POSITION_EMBEDDING_GROUP", (pipeline[0],)
    yield from each(par.rank_groups("tp-dp"), "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP")
    yield from each(par.rank_groups("tp-dp"), "TENSOR_AND_DATA_PARALLEL_GROUP")
    yield from each(par.rank_groups("tp"), "TENSOR_AND_CONTEXT_PARALLEL_GROUP")
    yield from each(singletons, "EXPERT_MODEL_PARALLEL_GROUP")
    yield from each(par.rank_groups("tp"), "EXPERT_TENSOR_PARALLEL_GROUP")
    yield from each(par.rank_groups("tp"), "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP")
    yield from each(par.rank_groups("tp-pp"), "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP")
    yield from each_with_gloo(par.rank_groups("dp"), "EXPERT_DATA_PARALLEL_GROUP")
    yield "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP", tuple(range(par.world))


# the groups NCCL runs on here, and the role faults and the summary know them by
ROLES = {
    "DATA_PARALLEL_GROUP_WITH_CP": "dp",  # DDP and the loss use the dp x cp group
    "MODEL_PARALLEL_GROUP": "mp",
    "TENSOR_MODEL_PARALLEL_GROUP": "tp",
    "PIPELINE_MODEL_PARALLEL_GROUP": "pp",
    "EMBEDDING_GROUP": "embd",
    "INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP": "dist-opt",
}


def create_groups(
    b: PlanBuilder, par: Parallelism, flavour: Flavour
) -> dict[str, dict[int, CommSpec]]:
    """role -> global rank -> the rank's communicator of that role (groups of two or more)."""
    wanted = dict(ROLES)
    if not flavour.distributed_optimizer:
        del wanted["INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP"]
    comms: dict[str, dict[int, CommSpec]] = {role: {} for role in ROLES.values()}
    for desc, members in group_sequence(par):
        name = b.new_group_name()
        if desc in wanted and len(members) > 1:
            comm = b.add_comm(wanted[desc], desc, members, group_name=name)
            for member in members:
                comms[wanted[desc]][member] = comm
    return comms


@dataclass(frozen=True)
class Bucket:
    params: int  # elements, padded as the buffer lays them out
    ready_after: int  # index of the backward piece whose gradients complete it


@dataclass(frozen=True)
class Piece:
    params: int
    shared_embedding: bool


@dataclass(frozen=True)
class ChunkModel:
    """One model chunk on one rank: its layers and whether it holds the embedding or the
    output layer (the first and last virtual stages)."""

    chunk: int
    layers: int
    embedding: bool
    output: bool
    tied_copy: bool  # the output layer's weight is a copy of the embedding (pp > 1)

    def backward_pieces(self, layer_params: int, embedding_params: int) -> list[Piece]:
        """Parameters in the order backward completes their gradients (the buffer's order).
        With pp > 1 the embedding and the output layer's copy of it are `shared_embedding`."""
        shared = self.tied_copy
        pieces = [Piece(embedding_params, shared)] if self.output and shared else []
        pieces += [Piece(layer_params, False) for _ in range(self.layers)]
        if self.embedding:
            pieces.append(Piece(embedding_params, shared))
        return pieces


def buckets_of(
    pieces: list[Piece], bucket_size: int | None, dp: int, distributed_optimizer: bool
) -> list[Bucket]:
    """`_compute_per_buffer_param_layout` (distributed optimizer: shared embedding alone,
    padding) or `_compute_default_per_buffer_param_layout`."""
    pad = math.lcm(dp, BUCKET_PAD) if distributed_optimizer else 1
    buckets, size = [], 0

    def close(last: int) -> None:
        nonlocal size
        buckets.append(Bucket(math.ceil(size / pad) * pad, last))
        size = 0

    for index, piece in enumerate(pieces):
        shared = distributed_optimizer and piece.shared_embedding
        if shared and size:
            close(index - 1)
        size += piece.params
        if (bucket_size is not None and size >= bucket_size) or shared:
            close(index)
    if size:
        close(len(pieces) - 1)
    return buckets


class MegatronRank:
    """Writes one rank's program: set-up, then per step the schedule, finalize_model_grads,
    the optimizer step and train_step's reductions."""

    def __init__(
        self,
        b: PlanBuilder,
        model: ModelShape,
        par: Parallelism,
        flavour: Flavour,
        comms: dict[str, dict[int, CommSpec]],
        world: CommSpec,
        schedule: list[Work],
        rank: int,
    ):
        cfg = b.config
        self.b, self.model, self.par, self.flavour, self.rank = b, model, par, flavour, rank
        self.world, self.schedule = world, schedule
        self.stage, self.dp_rank, self.tp_rank = par.coords(rank)
        self.first, self.last = self.stage == 0, self.stage == par.pp - 1
        self.tp_comm, self.pp_comm = comms["tp"].get(rank), comms["pp"].get(rank)
        self.dp_comm, self.mp_comm = comms["dp"].get(rank), comms["mp"].get(rank)
        self.embd_comm = comms["embd"].get(rank)
        # the optimizer's grad-stats group (get_megatron_optimizer sets it)
        self.stats_comm = (
            comms["dist-opt"].get(rank) if flavour.distributed_optimizer else self.mp_comm
        )
        self.sequence_parallel = cfg.sequence_parallel and par.tp > 1
        self.act_dtype = DTYPES[cfg.precision]
        self.grad_dtype = GRAD_DTYPES[cfg.precision]
        self.fp16 = cfg.precision == "fp16"
        self.tokens = SEQ_LEN * MICRO_BATCH
        self.hidden = model.hidden
        self.layer_params = model.layer_params // par.tp
        vocab = math.ceil(VOCAB_SIZE / (VOCAB_DIVISOR * par.tp)) * VOCAB_DIVISOR * par.tp
        self.embedding_params = vocab * self.hidden // par.tp
        self.chunks = [self._chunk_model(c, cfg.layers) for c in range(par.chunks)]
        self.opts = Options.of(cfg.variants)
        self.buckets = [self._chunk_buckets(c) for c in self.chunks]
        self.launched: set[tuple[int, int]] = set()  # (chunk, bucket) reduced this step
        self.overlap_param_gather = self.opts.overlap_param_gather and flavour.distributed_optimizer
        self.pre_hooks = False  # DDP's forward pre-hooks (overlap_param_gather) are enabled
        self.param_gathered: set[tuple[int, int]] = set()  # (chunk, bucket) this iteration
        self.overflows = (
            megatron_overflows(
                cfg.seed,
                cfg.total_steps,
                cfg.loss_scale_window,
                spike_rate=SPIKY_RATE if self.opts.overflow_spikes else 0.03,
            )
            if self.opts.fp16_overflow and self.fp16
            else [False] * cfg.total_steps
        )

    # ---- shapes ----

    def _chunk_model(self, chunk: int, layers: int) -> ChunkModel:
        par = self.par
        return ChunkModel(
            chunk,
            layers // (par.pp * par.chunks),
            embedding=self.first and chunk == 0,
            output=self.last and chunk == par.chunks - 1,
            tied_copy=par.pp > 1,
        )

    def _chunk_buckets(self, chunk: ChunkModel) -> list[Bucket]:
        cut = self.flavour.overlap_grad_reduce and self.first and chunk.chunk == 0
        size = max(MIN_BUCKET_PARAMS, BUCKET_PARAMS_PER_DP_RANK * self.par.dp) if cut else None
        if cut and self.opts.bucket_params:
            size = self.opts.bucket_params
        pieces = chunk.backward_pieces(self.layer_params, self.embedding_params)
        return buckets_of(pieces, size, self.par.dp, self.flavour.distributed_optimizer)

    @property
    def full_activation(self) -> int:
        return self.tokens * self.hidden

    @property
    def seq_shard(self) -> int:
        """A sequence-parallel activation: the sequence split across TP."""
        return self.tokens // self.par.tp * self.hidden

    @property
    def p2p_elements(self) -> int:
        # the schedule's tensor_shape divides the sequence by tp under sequence parallelism
        return self.seq_shard if self.sequence_parallel else self.full_activation

    # ---- the program ----

    def write(self) -> None:
        self.setup()
        cfg = self.b.config
        for step in range(cfg.total_steps):
            self.b.step_begin(self.rank, step, step < cfg.warmup_steps)
            self.training_step(step)
            self.b.step_end(self.rank, step)
        if self.pre_hooks:  # disable_forward_pre_hook(model): a synchronous all-gather each
            for chunk, buckets in enumerate(self.buckets):
                for index in range(len(buckets)):
                    self.param_gather(chunk, index, None)

    def setup(self) -> None:
        b, rank, world = self.b, self.rank, self.world
        b.barrier(rank, world)  # initialize_megatron: _compile_dependencies
        self._coll(world, "AllReduce", 1, "ncclFloat64", "startup", None, sync=True)
        if self.embd_comm:  # the last stage's output weight starts as the embedding
            self._coll(
                self.embd_comm, "AllReduce", self.embedding_params, self.act_dtype, "startup", None
            )
        self._coll(world, "Broadcast", 3, "ncclInt64", "startup", None, sync=True)
        b.barrier(rank, world)  # train(): timers('interval-time').start(barrier=True)

    def training_step(self, step: int) -> None:
        warmup = step < self.b.config.warmup_steps
        self.launched = set()
        self.param_gathered = set()
        self.l1_barrier(step)  # 'forward-backward'
        for work in self.schedule:
            if isinstance(work, Forward):
                self.forward(work, step, warmup)
            elif isinstance(work, Backward):
                hooks = self.flavour.overlap_grad_reduce and work.hooks_reduce and step > 0
                self.backward(work, step, warmup, hooks)
            elif isinstance(work, GradSync):
                if self.flavour.overlap_grad_reduce:
                    self.reduce_buckets(work.chunk, step)
            elif isinstance(work, Exchange):
                self.exchange(work, step)
        self.finalize_model_grads(step)
        self.optimizer_step(step)
        self.train_step_reductions(step)
        self.training_log(step)
        self.b.extra_ops(self.rank, self.world, step)

    # ---- micro-batches ----

    def forward(self, work: Forward, step: int, warmup: bool) -> None:
        chunk = self.chunks[work.chunk]
        where = {"phase": "forward", "step": step, "micro_batch": work.micro}
        self.batch_broadcasts(chunk, where)
        # the backward piece of each module this forward runs, in forward order
        offset = 1 if chunk.output and chunk.tied_copy else 0
        if chunk.embedding:
            self.forward_pre_hook(work.chunk, offset + chunk.layers, step)
            lookup_ns = (
                self.model.forward_ns(self.embedding_params, warmup) * EMBEDDING_LOOKUP_SHARE
            )
            self.compute(lookup_ns, "forward")
            self.tp_reduce(where)
        layer_ns = self.model.forward_ns(self.layer_params, warmup)
        for layer in range(chunk.layers):
            self.forward_pre_hook(work.chunk, offset + chunk.layers - 1 - layer, step)
            for share in (ATTENTION_SHARE, 1 - ATTENTION_SHARE):
                self.tp_gather(where)
                self.compute(layer_ns * share, "forward")
                self.tp_reduce(where)
        if chunk.output:
            if chunk.tied_copy:
                self.forward_pre_hook(work.chunk, 0, step)
            self.tp_gather(where)
            self.compute(self.model.forward_ns(self.embedding_params, warmup), "forward")
            for _ in range(3):  # vocab_parallel_cross_entropy: max, target logit, sum of exp
                self._tp_coll("AllReduce", self.tokens, "ncclFloat32", where)

    def backward(self, work: Backward, step: int, warmup: bool, hooks: bool) -> None:
        chunk = self.chunks[work.chunk]
        where = {"phase": "backward", "step": step, "micro_batch": work.micro}
        piece = 0

        def piece_done() -> None:
            nonlocal piece
            if hooks:
                self.reduce_ready_buckets(work.chunk, piece, step)
            piece += 1

        if chunk.output:
            self.column_parallel_backward(
                self.model.backward_ns(self.embedding_params, warmup), where
            )
            if chunk.tied_copy:
                piece_done()
        layer_ns = self.model.backward_ns(self.layer_params, warmup)
        for _ in range(chunk.layers):
            for share in (1 - ATTENTION_SHARE, ATTENTION_SHARE):  # MLP, then attention
                self.tp_gather(where)  # the gradient of the row-parallel reduce-scatter
                self.column_parallel_backward(layer_ns * share, where)
            piece_done()
        if chunk.embedding:
            self.tp_gather(where)  # the gradient of the embedding's reduce-scatter
            lookup_ns = (
                self.model.backward_ns(self.embedding_params, warmup) * EMBEDDING_LOOKUP_SHARE
            )
            self.compute(lookup_ns, "backward")
            piece_done()

    def column_parallel_backward(self, ns: float, where: dict) -> None:
        """The input gradient of a column-parallel linear: all-reduced, or with sequence
        parallelism the saved input all-gathered again and the gradient reduce-scattered."""
        self.tp_gather(where)
        self.compute(ns, "backward")
        if self.sequence_parallel:
            self._tp_coll("ReduceScatter", self.seq_shard, self.act_dtype, where)
        else:
            self._tp_coll("AllReduce", self.full_activation, self.act_dtype, where)

    def batch_broadcasts(self, chunk: ChunkModel, where: dict) -> None:
        """get_batch_on_this_tp_rank: TP rank 0 broadcasts what its stage needs."""
        for _, dtype, for_output in BATCH_FIELDS:
            if chunk.output if for_output else chunk.embedding:
                self._tp_coll("Broadcast", self.tokens, dtype, where)

    def tp_reduce(self, where: dict) -> None:
        """The end of a row-parallel layer: all-reduce, or reduce-scatter to sequence shards."""
        if self.sequence_parallel:
            self._tp_coll("ReduceScatter", self.seq_shard, self.act_dtype, where)
        else:
            self._tp_coll("AllReduce", self.full_activation, self.act_dtype, where)

    def tp_gather(self, where: dict) -> None:
        """Sequence parallelism only: gather the sequence shards before a column-parallel
        layer (forward) or a row-parallel one's output gradient (backward)."""
        if self.sequence_parallel:
            self._tp_coll("AllGather", self.seq_shard, self.act_dtype, where)

    # ---- pipeline ----

    def exchange(self, work: Exchange, step: int) -> None:
        """One batch_isend_irecv (one NCCL group), then torch.cuda.synchronize()."""
        b, rank, comm = self.b, self.rank, self.pp_comm
        if work.transfers and comm is not None:
            with b.nccl_group(rank):
                for t in work.transfers:
                    towards_next = t.kind.endswith("next")
                    stage = (self.stage + (1 if towards_next else -1)) % self.par.pp
                    peer = comm.comm_rank(self.par.rank_of(stage, self.dp_rank, self.tp_rank))
                    call = b.send if t.is_send else b.recv
                    phase = "forward" if t.carries_activation else "backward"
                    where = {"phase": phase, "step": step, "micro_batch": t.micro}
                    call(rank, comm, peer, self.p2p_elements, self.act_dtype, **where)
        b.programs[rank].append(HostSync("p2p"))

    # ---- data-parallel gradients ----

    def reduce_ready_buckets(self, chunk: int, piece: int, step: int) -> None:
        for index, bucket in enumerate(self.buckets[chunk]):
            if bucket.ready_after == piece:
                self.reduce_bucket(chunk, index, step)

    def reduce_buckets(self, chunk: int, step: int) -> None:
        for index in range(len(self.buckets[chunk])):
            self.reduce_bucket(chunk, index, step)

    def reduce_bucket(self, chunk: int, index: int, step: int) -> None:
        """start_grad_sync of one bucket group: its own _coalescing_manager (NCCL group)."""
        if (chunk, index) in self.launched:
            return
        self.launched.add((chunk, index))
        if self.dp_comm is None:
            return
        params = self.buckets[chunk][index].params
        with self.b.nccl_group(self.rank):
            if self.flavour.distributed_optimizer:
                count, func = params // self.par.dp, "ReduceScatter"
            else:
                count, func = params, "AllReduce"
            self._coll(self.dp_comm, func, count, self.grad_dtype, "grad_reduce", step)

    # ---- after the schedule ----

    def finalize_model_grads(self, step: int) -> None:
        self.l1_barrier(step)  # 'all-grads-sync'
        for chunk in range(self.par.chunks):  # finish_grad_sync launches what is left
            self.reduce_buckets(chunk, step)
        for _ in range(FINALIZE_TIMERS - 1):  # the conditional embedder, non-TP, embedding
            self.l1_barrier(step)
        if self.sequence_parallel:
            params = sum(c.layers for c in self.chunks) * LAYERNORM_PARAMS_PER_HIDDEN
            if any(c.output for c in self.chunks):
                params += FINAL_LAYERNORM_PARAMS_PER_HIDDEN
            self._coll(
                self.tp_comm, "AllReduce", params * self.hidden, self.grad_dtype, "finalize", step
            )
        if self.embd_comm:
            self._coll(
                self.embd_comm,
                "AllReduce",
                self.embedding_params,
                self.grad_dtype,
                "finalize",
                step,
            )

    def optimizer_step(self, step: int) -> None:
        stats, opts = self.stats_comm, self.opts
        self.l1_barrier(step, 2)  # 'optimizer', 'optimizer-copy-to-main-grad'
        if self.fp16:
            self.l1_barrier(step)  # 'optimizer-unscale-and-check-inf'
        if stats and self.fp16:  # the dynamic loss scaler: found_inf.item()
            self._coll(stats, "AllReduce", 1, "ncclFloat32", "optimizer", step, sync=True)
        if self.overflows[step]:
            return  # skipped: step() returns False, None, None
        self.l1_barrier(step)  # 'optimizer-clip-main-grad'
        if stats and opts.clip:  # get_grad_norm_fp32: the squared norm, summed
            self._coll(stats, "AllReduce", 1, "ncclFloat32", "optimizer", step)
        self.l1_barrier(step)  # 'optimizer-count-zeros'
        if stats and opts.log_num_zeros:  # count_zeros_fp32
            self._coll(stats, "AllReduce", 1, "ncclFloat32", "optimizer", step)
        self.l1_barrier(step)  # 'optimizer-inner-step'
        params = sum(sum(bk.params for bk in buckets) for buckets in self.buckets)
        if self.flavour.distributed_optimizer:
            params //= self.par.dp
        self.compute(self.model.optimizer_ns(params), "optimizer")
        self.l1_barrier(step)  # 'optimizer-copy-main-to-model-params'
        if self.flavour.distributed_optimizer:
            self.l1_barrier(step)  # 'params-all-gather'
        if self.overlap_param_gather:
            self.pre_hooks = True  # enabled after the first iteration that updated
            return
        if self.flavour.distributed_optimizer and self.dp_comm:
            for chunk, buckets in enumerate(self.buckets):  # start_param_sync, group by group
                for index in range(len(buckets)):
                    self.param_gather(chunk, index, step)

    def param_gather(self, chunk: int, index: int, step: int | None) -> None:
        """A bucket group's start_param_sync: its own _coalescing_manager (NCCL group)."""
        if self.dp_comm is None:
            return
        with self.b.nccl_group(self.rank):
            count = self.buckets[chunk][index].params // self.par.dp
            self._coll(self.dp_comm, "AllGather", count, self.act_dtype, "param_gather", step)

    def forward_pre_hook(self, chunk: int, piece: int, step: int) -> None:
        """overlap_param_gather: finish_param_sync of the bucket group holding the module's
        parameters dispatches its all-gather the first time this iteration."""
        if not self.pre_hooks:
            return
        for index, bucket in enumerate(self.buckets[chunk]):
            first = index == 0 or self.buckets[chunk][index - 1].ready_after < piece
            if first and bucket.ready_after >= piece and (chunk, index) not in self.param_gathered:
                self.param_gathered.add((chunk, index))
                self.param_gather(chunk, index, step)

    def l1_barrier(self, step: int, times: int = 1) -> None:
        """timers(name, log_level=1).start(barrier=True): torch.distributed.barrier()."""
        if self.opts.l1_barriers:
            for _ in range(times):
                self._coll(self.world, "AllReduce", 1, "ncclFloat32", "barrier", step, sync=True)

    def training_log(self, step: int) -> None:
        """--log-interval: the interval timer's barrier, then timers.log's all-gather."""
        every = self.opts.log_interval
        if every and (step + 1) % every == 0:
            self._coll(self.world, "AllReduce", 1, "ncclFloat32", "barrier", step, sync=True)
            self._coll(
                self.world, "AllGather", TIMERS_TO_LOG, "ncclFloat32", "log", step, sync=True
            )

    def train_step_reductions(self, step: int) -> None:
        if self.mp_comm:
            # logical_and_across_model_parallel_group, then the grad norm's max; both .item()
            self._coll(self.mp_comm, "AllReduce", 1, "ncclInt32", "optimizer", step, sync=True)
            self._coll(self.mp_comm, "AllReduce", 1, "ncclFloat32", "optimizer", step, sync=True)
            if self.opts.log_num_zeros:  # reduce_max_stat_across_model_parallel_group
                self._coll(
                    self.mp_comm, "AllReduce", 1, "ncclFloat32", "optimizer", step, sync=True
                )
        if self.last and self.dp_comm:  # the loss and its token count, over data-parallel
            self._coll(self.dp_comm, "AllReduce", 2, "ncclFloat32", "loss", step)

    # ---- helpers ----

    def compute(self, ns: float, label: str) -> None:
        self.b.compute(self.rank, ns, label)

    def _tp_coll(self, func: str, count: int, dtype: str, where: dict) -> None:
        if self.tp_comm:
            self.b.collective(self.rank, self.tp_comm, func, count, dtype, **where)

    def _coll(
        self, comm: CommSpec | None, func: str, count: int, dtype: str, phase: str, step, sync=False
    ) -> None:
        if comm is None:
            return
        self.b.collective(self.rank, comm, func, count, dtype, phase=phase, step=step)
        if sync:  # the host reads the result (.item())
            self.b.programs[self.rank].append(HostSync(phase))


def build_megatron(b: PlanBuilder, model: ModelShape, flavour: Flavour) -> None:
    cfg = b.config
    par = Parallelism(cfg.tp, cfg.pp, cfg.ranks // (cfg.tp * cfg.pp), cfg.virtual_pp)
    world = b.add_comm("world", "default_pg", tuple(range(cfg.ranks)))
    comms = create_groups(b, par, flavour)
    shape = ScheduleShape(
        par.pp,
        cfg.grad_accum,
        par.chunks,
        cfg.vp_group,
        aligned_grad_sync=flavour.overlap_grad_reduce,
    )
    schedules = stage_schedules(shape)
    for rank in range(cfg.ranks):
        stage = par.coords(rank)[0]
        MegatronRank(b, model, par, flavour, comms, world, schedules[stage], rank).write()
