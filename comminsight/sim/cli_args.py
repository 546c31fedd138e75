"""The options of `comminsight sim`, and the `SimConfig` they make. Cheap to import (the CLI
builds its parser for every --help and every press of TAB): the workloads, which need numpy,
are imported only to make a SimConfig. Each option's help states its default (the CLI's help
formatter adds '(default: X)' where the text does not say it)."""

from __future__ import annotations

import argparse
import os

from comminsight.sim.config import (
    ABI_VERSIONS,
    PRECISIONS,
    TP_DP_DATA_PARALLEL,
    WORKLOADS,
    ZERO_STAGES,
    SimConfig,
    SimConfigError,
)
from comminsight.sim.faults import FaultSpecError, parse_fault

DEFAULT_PLUGIN = "dist/libnccl-profiler-comminsight.so"


def add_sim_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--plugin", default=DEFAULT_PLUGIN, help="profiler plugin .so (default: %(default)s)")
    a(
        "--workload",
        choices=WORKLOADS,
        default="ddp",
        metavar="WORKLOAD",
        help=f"the training job to simulate: {', '.join(WORKLOADS)}",
    )
    a("--ranks", type=int, default=2, help="simulated ranks, one process each")
    a("--nodes", type=int, default=1, help="simulated nodes (ranks are spread evenly)")
    a("--steps", type=int, default=3, help="training steps after the warm-up")
    a("--warmup", type=int, default=1, help="warm-up steps (slower) before --steps")
    a("--grad-accum", type=int, default=1, help="micro-batches per step")
    a(
        "--extra-ops-every",
        type=int,
        default=0,
        help="an extra barrier (evaluation) inside every N-th steady step; 0: none",
    )
    a("--tp", type=int, default=2, help="tensor-parallel size (tp-pp-dp, pp, megatron, tp-dp)")
    a("--pp", type=int, default=2, help="pipeline-parallel size (tp-pp-dp, pp, megatron)")
    _add_pipeline_arguments(parser)
    _add_dp_workload_arguments(parser)
    a("--model-params", default="125M", help="model size, e.g. 125M, 1.3B")
    a("--layers", type=int, default=12, help="transformer layers of the model")
    a("--abi", type=int, choices=ABI_VERSIONS, default=5, help="profiler ABI to drive")
    a(
        "--user-tags",
        action="store_true",
        help="ABI 7: tag every call 1 + its training step, as userProfilerTag (default: untagged)",
    )
    a(
        "--seed",
        type=int,
        default=0,
        help="seed of the run's randomness (timing jitter, communicator ids, clock skew)",
    )
    a(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiply every modeled duration (0.01: 100x faster)",
    )
    a(
        "--fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="skip|sleep|die|mismatch|leave:rank=R,op=K[,comm=ROLE][,seconds=X][,field=count|func];"
        " repeatable (default: no fault)",
    )
    a(
        "--hang-hold",
        type=float,
        default=10.0,
        help="seconds a hang is held before the sim aborts it",
    )
    a("--timeout", type=float, default=600.0, help="abort the whole run after this many seconds")
    a(
        "--home",
        default=os.environ.get("COMMINSIGHT_HOME"),
        help="COMMINSIGHT_HOME of the ranks (default: $COMMINSIGHT_HOME; one of them is needed)",
    )
    a("--out", default=None, help="ground-truth directory (default: <home>/sim/<run id>)")
    a("--no-comm-names", action="store_true", help="pass commName NULL, as PyTorch without Inject")
    a(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set in every rank's environment, e.g. COMMINSIGHT_PROFILER_HANG_TIMEOUT_S=2; "
        "repeatable (default: none)",
    )
    a(
        "--node-home",
        action="append",
        default=[],
        metavar="DIR",
        help="COMMINSIGHT_HOME of each simulated node's ranks, one per --nodes (multi-node "
        "agents); default: every rank uses --home",
    )
    a(
        "--run-as",
        default=None,
        metavar="UID[:GID]",
        help="run every rank process as this user (and group; default: the uid's own number), "
        "as another user's job on a node whose shared home one Agent serves; needs root "
        "(default: this user)",
    )


def _add_pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a(
        "--virtual-pp",
        type=int,
        default=1,
        help="model chunks per pipeline stage (pp, megatron); > 1: interleaved 1F1B",
    )
    a(
        "--vp-group",
        type=int,
        default=0,
        help="micro-batches each chunk runs before the next (interleaved); 0: --pp",
    )
    a(
        "--sequence-parallel",
        action="store_true",
        help="tensor parallelism all-gathers and reduce-scatters sequence shards",
    )
    a(
        "--precision",
        choices=PRECISIONS,
        default="fp16",
        help="training precision (pp, megatron); fp16 adds the loss scaler's found-inf",
    )


def _add_dp_workload_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a(
        "--dynamic-accum",
        action="store_true",
        help="micro-batches per step vary per step, the same on every rank",
    )
    a(
        "--skipped-updates",
        action="store_true",
        help="ddp: fp16 GradScaler; steps with inf gradients skip the optimizer",
    )
    a(
        "--loss-scale-window",
        type=int,
        default=1000,
        help="clean steps before the fp16 loss scale doubles (zero, ddp --skipped-updates)",
    )
    a(
        "--tp-dp-data-parallel",
        choices=TP_DP_DATA_PARALLEL,
        default="fsdp2",
        help="tp-dp: what runs over the dp mesh dimension (--tp sets the TP size)",
    )
    a(
        "--no-loss-parallel",
        action="store_true",
        help="tp-dp: gather the logits instead of the vocab-sharded cross-entropy",
    )
    a("--zero-stage", type=int, choices=ZERO_STAGES, default=2, help="zero: DeepSpeed stage")
    a(
        "--reduce-bucket-size",
        type=int,
        default=500_000_000,
        help="zero: gradient elements per reduction bucket",
    )
    a(
        "--prefetch-bucket-size",
        type=int,
        default=50_000_000,
        help="zero stage 3: parameter elements per prefetch all-gather",
    )
    a(
        "--max-reuse-distance",
        type=int,
        default=1_000_000_000,
        help="zero stage 3: keep parameters used again within this many elements",
    )
    a(
        "--max-live-parameters",
        type=int,
        default=1_000_000_000,
        help="zero stage 3: gathered elements beyond which nothing is prefetched",
    )
    a("--ppo-mini-batches", type=int, default=2, help="rl: optimizer steps per rollout")
    a("--rollout-tp", type=int, default=2, help="rl: the inference engine's TP size")
    a("--response-length", type=int, default=32, help="rl: most tokens per response")
    a(
        "--rollout-cuda-graphs",
        action="store_true",
        help="rl: decode steps replay CUDA graphs (their all-reduces are not NCCL calls)",
    )


def _dp_workload_settings(args: argparse.Namespace) -> dict:
    return {
        "dynamic_accum": args.dynamic_accum,
        "skipped_updates": args.skipped_updates,
        "loss_scale_window": args.loss_scale_window,
        "tp_dp_data_parallel": args.tp_dp_data_parallel,
        "loss_parallel": not args.no_loss_parallel,
        "zero_stage": args.zero_stage,
        "reduce_bucket_size": args.reduce_bucket_size,
        "prefetch_bucket_size": args.prefetch_bucket_size,
        "max_reuse_distance": args.max_reuse_distance,
        "max_live_parameters": args.max_live_parameters,
        "ppo_mini_batches": args.ppo_mini_batches,
        "rollout_tp": args.rollout_tp,
        "response_length": args.response_length,
        "rollout_cuda_graphs": args.rollout_cuda_graphs,
    }


def config_from_args(args: argparse.Namespace) -> SimConfig:
    from comminsight.sim.workloads.model import parse_param_count

    if not args.home:
        raise SimConfigError("--home is required when COMMINSIGHT_HOME is not set")
    try:
        faults = tuple(parse_fault(spec) for spec in args.fault)
        env = tuple(_env_item(item) for item in args.env)
        run_as = _user_and_group(args.run_as) if args.run_as else None
        params = parse_param_count(args.model_params)
    except (FaultSpecError, ValueError) as e:
        raise SimConfigError(str(e)) from None
    return SimConfig(
        plugin=args.plugin,
        # absolute: the Profiler refuses a relative home (each rank would resolve it alone)
        home=os.path.abspath(args.home),
        workload=args.workload,
        ranks=args.ranks,
        nodes=args.nodes,
        steps=args.steps,
        warmup_steps=args.warmup,
        grad_accum=args.grad_accum,
        extra_ops_every=args.extra_ops_every,
        tp=args.tp,
        pp=args.pp,
        virtual_pp=args.virtual_pp,
        vp_group=args.vp_group,
        sequence_parallel=args.sequence_parallel,
        precision=args.precision,
        model_params=params,
        layers=args.layers,
        abi=args.abi,
        user_tags=args.user_tags,
        seed=args.seed,
        time_scale=args.time_scale,
        hang_hold_s=args.hang_hold,
        timeout_s=args.timeout,
        comm_names=not args.no_comm_names,
        out=args.out,
        faults=faults,
        env=env,
        node_homes=tuple(args.node_home),
        run_as=run_as,
        **_dp_workload_settings(args),
    ).validate()


def _env_item(item: str) -> tuple[str, str]:
    key, eq, value = item.partition("=")
    if not eq or not key:
        raise ValueError(f"--env {item!r} is not KEY=VALUE")
    return key, value


def _user_and_group(text: str) -> tuple[int, int]:
    """UID[:GID] as numbers (a uid alone: the group of the same number)."""
    uid, _, gid = text.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        raise ValueError(f"--run-as {text!r} is not UID[:GID] in numbers")
    return int(uid), int(gid or uid)
