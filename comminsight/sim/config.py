"""What one simulation run is: workload, shape, ABI, timing and faults (`SimConfig`).

The launcher writes it as JSON into the run directory; every rank process reads it back and
rebuilds the same plan from it, so the plan itself never has to travel between processes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from comminsight.sim.faults import Fault

# workload name -> its module under comminsight.sim.workloads
WORKLOAD_MODULES = {
    "ddp": "ddp",
    "fsdp": "fsdp",
    "tp-pp-dp": "tp_pp_dp",
    "moe": "moe",
    "tp-dp": "tp_dp",
    "zero": "zero",
    "rl": "rl",
    "pp": "pp",
    "megatron": "megatron",
    "training-loops": "training_loops",
    "fsdp1": "fsdp1",
}
WORKLOADS = tuple(WORKLOAD_MODULES)
ABI_VERSIONS = (4, 5, 6, 7)
TP_DP_DATA_PARALLEL = ("fsdp2", "ddp")  # tp-dp: what shards or replicates over the dp mesh dim
ZERO_STAGES = (1, 2, 3)
PRECISIONS = ("fp16", "bf16")  # pp, megatron: the training precision
# How the MoE workload issues its all-to-alls: one ncclAlltoAll collective each, or as
# PyTorch's NCCL backend issues all_to_all_single: a Send and a Recv per peer in one group
MOE_ALLTOALL_MODES = ("collective", "grouped-p2p")
# How host time is modeled: "modeled" (each action's cost, jittered +-5 %), "noisy" (jittered
# +-60 %: a loaded host, a data loader that stalls now and then), "flat" (every action the
# same time: idle time tells nothing of where a Step begins)
TIMINGS = ("modeled", "noisy", "flat")
FLAT_COMPUTE_NS = 2_000_000


class SimConfigError(ValueError):
    """A configuration the simulation cannot run; the message says which setting is wrong."""


@dataclass(frozen=True)
class SimConfig:
    plugin: str
    home: str
    workload: str = "ddp"
    ranks: int = 2
    nodes: int = 1  # simulated nodes; ranks are spread evenly (LOCAL_RANK, nNodes)
    steps: int = 3  # measured steps, after the warm-up steps
    warmup_steps: int = 1
    grad_accum: int = 1  # micro-batches per step
    extra_ops_every: int = 0  # every N-th steady step has an extra barrier (evaluation); 0: none
    tp: int = 2  # tp-pp-dp only
    pp: int = 2  # tp-pp-dp only
    model_params: int = 125_000_000
    layers: int = 12
    moe_alltoall: str = "collective"  # moe only: one of MOE_ALLTOALL_MODES
    abi: int = 5
    user_tags: bool = False  # ABI 7: every call tagged 1 + its step (userProfilerTag)
    seed: int = 0
    time_scale: float = 1.0  # every modeled duration (host and GPU) is multiplied by this
    hang_hold_s: float = 10.0
    timeout_s: float = 600.0
    comm_names: bool = True  # False: commName is NULL, as PyTorch passes it without Inject
    out: str | None = None  # ground-truth directory; default <home>/sim/<run id>
    faults: tuple[Fault, ...] = field(default_factory=tuple)
    env: tuple[tuple[str, str], ...] = ()  # extra environment of every rank (plugin settings)
    # COMMINSIGHT_HOME of each simulated node's ranks (one per node), so that each node's
    # Agent (a slave of a multi-node job) sees only its own ranks; empty: every rank uses home
    node_homes: tuple[str, ...] = ()
    # ---- data/tensor-parallel and RL workloads (tp-dp, zero, rl) and DDP options ----
    dynamic_accum: bool = False  # micro-batches per step vary per step (seeded, job-wide)
    skipped_updates: bool = False  # ddp: fp16 GradScaler; steps with inf grads skip the update
    loss_scale_window: int = 1000  # clean steps before the loss scale doubles (DS window)
    tp_dp_data_parallel: str = "fsdp2"  # tp-dp: one of TP_DP_DATA_PARALLEL
    sequence_parallel: bool = False  # tp-dp: SequenceParallel (reduce-scatter/all-gather)
    loss_parallel: bool = True  # tp-dp: vocab-sharded cross-entropy (loss_parallel())
    zero_stage: int = 2  # zero: DeepSpeed ZeRO stage
    reduce_bucket_size: int = 500_000_000  # zero: elements per gradient bucket
    prefetch_bucket_size: int = 50_000_000  # zero stage 3: elements per parameter prefetch
    max_reuse_distance: int = 1_000_000_000  # zero stage 3: keep params reused this soon
    max_live_parameters: int = 1_000_000_000  # zero stage 3: gathered elements before no prefetch
    ppo_mini_batches: int = 2  # rl: optimizer steps per rollout
    rollout_tp: int = 2  # rl: the inference engine's tensor-parallel size
    response_length: int = 32  # rl: most tokens generated per response
    rollout_cuda_graphs: bool = False  # rl: decode steps replay CUDA graphs (no NCCL calls)
    # ---- pipeline-parallel workloads (pp, megatron; also use tp, pp, sequence_parallel) ----
    virtual_pp: int = 1  # model chunks per stage; > 1: the interleaved 1F1B schedule
    vp_group: int = 0  # micro-batches per chunk before the next chunk (interleaved); 0: pp
    precision: str = "fp16"  # one of PRECISIONS; fp16 adds the loss scaler's found-inf
    # ---- processes that drive several GPUs (JAX, ncclCommInitAll) ----
    # ranks one OS process drives, each on its own thread and device, as JAX runs one thread
    # per local device; the process loads the plugin once
    ranks_per_process: int = 1
    # the CUDA runtime each process loads (cuda_runtime.py): "" none, "sim" the simulated
    # one, or a library path; the plugin records a communicator's device only with one
    cuda_runtime: str = ""
    # a command each process is started under, by process index (missing or empty: none),
    # e.g. `unshare --time --monotonic N --fork --kill-child` to put a rank in a time
    # namespace of its own, as a checkpoint-restored container is
    process_prefixes: tuple[tuple[str, ...], ...] = ()
    # the (uid, gid) every rank process runs as, the launcher being root: a job of another
    # user on a node whose shared home one Agent serves; None: the launcher's own
    run_as: tuple[int, int] | None = None
    timing: str = "modeled"  # one of TIMINGS
    # each rank writes Inject's optimizer-step markers (metadata/inject/<host>.<pid>.jsonl)
    # when its optimizer's compute ends: where torch's optimizer.step() returns
    step_markers: bool = False
    # framework behaviours a workload turns on by name (each workload names the ones it knows
    # in its VARIANTS and refuses the others)
    variants: tuple[str, ...] = ()

    @property
    def ranks_per_node(self) -> int:
        return self.ranks // self.nodes

    @property
    def processes(self) -> int:
        return self.ranks // self.ranks_per_process

    def ranks_of_process(self, process: int) -> range:
        """The global ranks one process drives: consecutive, on one node."""
        first = process * self.ranks_per_process
        return range(first, first + self.ranks_per_process)

    def prefix_of(self, process: int) -> tuple[str, ...]:
        return self.process_prefixes[process] if process < len(self.process_prefixes) else ()

    def cuda_device_of(self, rank: int) -> int:
        """The device a rank runs on: its GPU's index on its node (every GPU visible to
        every process of the node, as JAX's local_device_ids and torchrun's LOCAL_RANK
        number them)."""
        return rank % self.ranks_per_node

    def home_of(self, rank: int) -> str:
        return self.node_homes[rank // self.ranks_per_node] if self.node_homes else self.home

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.steps

    def validate(self) -> SimConfig:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise SimConfigError(message)

        need(self.workload in WORKLOADS, f"workload must be one of {', '.join(WORKLOADS)}")
        need(self.abi in ABI_VERSIONS, "abi must be 4, 5, 6 or 7")
        need(not self.user_tags or self.abi >= 7, "user_tags needs abi 7 (NCCL 2.31+)")
        need(self.ranks >= 1, "ranks must be at least 1")
        need(self.nodes >= 1 and self.ranks % self.nodes == 0, "nodes must divide ranks")
        need(
            self.ranks_per_process >= 1 and self.ranks_per_node % self.ranks_per_process == 0,
            "ranks-per-process must divide the ranks per node",
        )
        need(self.steps >= 1 and self.warmup_steps >= 0, "steps >= 1 and warmup >= 0")
        need(self.grad_accum >= 1, "grad-accum must be at least 1")
        need(self.extra_ops_every >= 0, "extra-ops-every must be 0 (none) or more")
        need(self.model_params >= 1_000_000, "model-params must be at least 1M")
        need(self.layers >= 1, "layers must be at least 1")
        need(
            self.moe_alltoall in MOE_ALLTOALL_MODES,
            f"moe-alltoall must be one of {', '.join(MOE_ALLTOALL_MODES)}",
        )
        need(self.time_scale > 0, "time-scale must be positive")
        need(self.timing in TIMINGS, f"timing must be one of {', '.join(TIMINGS)}")
        known = _workload_variants(self.workload)
        unknown = sorted(set(self.variants) - known)
        need(
            not unknown,
            f"variants {unknown} are not known to workload {self.workload} "
            f"(known: {', '.join(sorted(known)) or 'none'})",
        )
        need(self.hang_hold_s >= 0 and self.timeout_s > 0, "hang-hold >= 0 and timeout > 0")
        if self.workload == "tp-pp-dp":
            need(self.tp >= 1 and self.pp >= 1, "tp and pp must be at least 1")
            need(self.ranks % (self.tp * self.pp) == 0, "tp*pp must divide ranks")
            need(self.layers % self.pp == 0, "pp must divide layers")
        self._validate_dp_workloads(need)
        self._validate_pipeline_workloads(need)
        need(
            not self.node_homes or len(self.node_homes) == self.nodes,
            "node homes: give one per node or none",
        )
        for f in self.faults:
            need(f.rank < self.ranks, f"fault {f}: rank {f.rank} is not below --ranks")
        if self.run_as is not None:
            need(
                len(self.run_as) == 2 and all(0 <= v < 2**32 - 1 for v in self.run_as),
                "run-as: a uid and a gid, each 0 .. 4294967294",
            )
            need(not self.process_prefixes, "run-as: rank processes under a prefix are not forked")
        return self

    def _validate_dp_workloads(self, need) -> None:
        need(self.loss_scale_window >= 1, "loss-scale-window must be at least 1")
        if self.workload == "tp-dp":
            need(self.tp >= 1 and self.ranks % self.tp == 0, "tp must divide ranks")
            need(
                self.tp_dp_data_parallel in TP_DP_DATA_PARALLEL,
                f"tp-dp-data-parallel must be one of {', '.join(TP_DP_DATA_PARALLEL)}",
            )
        if self.workload == "zero":
            need(self.zero_stage in ZERO_STAGES, "zero-stage must be 1, 2 or 3")
            need(
                self.reduce_bucket_size >= 1 and self.prefetch_bucket_size >= 0,
                "reduce-bucket-size >= 1 and prefetch-bucket-size >= 0",
            )
            need(self.max_reuse_distance >= 0, "max-reuse-distance must be 0 or more")
            need(self.max_live_parameters >= 0, "max-live-parameters must be 0 or more")
        if self.workload == "rl":
            need(self.ppo_mini_batches >= 1, "ppo-mini-batches must be at least 1")
            need(
                self.rollout_tp >= 1 and self.ranks % self.rollout_tp == 0,
                "rollout-tp must divide ranks",
            )
            need(self.response_length >= 1, "response-length must be at least 1")

    def _validate_pipeline_workloads(self, need) -> None:
        if self.workload not in ("pp", "megatron"):
            return
        # imported here: the workloads package imports this module
        from comminsight.sim.workloads.pipeline_schedule import ScheduleShape, schedule_problem

        need(self.tp >= 1 and self.pp >= 1, "tp and pp must be at least 1")
        need(self.ranks % (self.tp * self.pp) == 0, "tp*pp must divide ranks")
        need(self.virtual_pp >= 1 and self.vp_group >= 0, "virtual-pp >= 1 and vp-group >= 0")
        need(self.layers % (self.pp * self.virtual_pp) == 0, "pp*virtual-pp must divide layers")
        need(self.precision in PRECISIONS, f"precision must be one of {', '.join(PRECISIONS)}")
        shape = ScheduleShape(self.pp, self.grad_accum, self.virtual_pp, self.vp_group)
        problem = schedule_problem(shape)
        need(problem is None, str(problem))

    def with_out(self, out: str) -> SimConfig:
        return replace(self, out=out)

    def to_json(self) -> str:
        data = asdict(self)
        data["faults"] = [f.to_json() for f in self.faults]
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SimConfig:
        data = json.loads(text)
        data["faults"] = tuple(Fault.from_json(f) for f in data.get("faults", ()))
        data["env"] = tuple((k, v) for k, v in data.get("env", ()))
        data["node_homes"] = tuple(data.get("node_homes", ()))
        data["variants"] = tuple(data.get("variants", ()))
        run_as = data.get("run_as")
        data["run_as"] = tuple(run_as) if run_as is not None else None
        return cls(**data)

    @classmethod
    def load(cls, path: Path) -> SimConfig:
        return cls.from_json(path.read_text())


def _workload_variants(workload: str) -> set[str]:
    """The variant names a workload's module declares (VARIANTS), none where it declares none."""
    from importlib import import_module

    module = import_module(f"comminsight.sim.workloads.{WORKLOAD_MODULES[workload]}")
    return set(getattr(module, "VARIANTS", ()))
