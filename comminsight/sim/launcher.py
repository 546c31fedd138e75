"""Starts one process per simulated rank, watches them, and ends a hang after --hang-hold.

With `ranks_per_process` above 1 a process drives that many consecutive ranks of one node,
as JAX's single-controller runtime drives all its local devices (rank_process.py).

A run is hung when no rank is doing host work any more (each is blocked on its GPU, blocked
for ever after a skipped op, finished or dead) and nothing has changed for `hang_hold_s`: then
the launcher sets the board's abort flag, and every rank stops its proxy with the stuck events
still open, finalizes its communicators (ncclCommAbort) and writes what never finished. The
same happens when the whole run exceeds `timeout_s`; a rank still alive a grace period after
an abort is killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

import comminsight
import comminsight_gen
from comminsight.sim.board import R_PROGRESS, R_SINCE, R_STATE, Board, RankState, shared_clock_ns
from comminsight.sim.config import SimConfig, SimConfigError
from comminsight.sim.cuda_runtime import SIM_RUNTIME, build_sim_runtime
from comminsight.sim.forks import STARTUP_VARIABLES, ForkParent, runs_start_up_code
from comminsight.sim.plan import WorkloadPlan
from comminsight.sim.workloads import build_plan

POLL_S = 0.02
ABORT_GRACE_S = 15.0
PROGRESS_EVERY_S = 0.1


@dataclass
class SimResult:
    config: SimConfig
    plan: WorkloadPlan
    run_dir: Path
    exit_codes: list[int | None]
    abort_reason: str | None  # None, "hang" or "timeout"
    elapsed_s: float
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SimProgress:
    """How far a run is, for a progress display: the ranks that have finished (done, aborted
    or dead), and the op arrivals so far of those planned (an op counts once per participant,
    when that participant's GPU starts it; a fault's skipped op never arrives)."""

    ranks: int
    ranks_finished: int
    arrivals: int
    arrivals_planned: int
    aborting: str | None  # "hang" or "timeout" once the launcher has aborted the run


def check_faults(config: SimConfig, plan: WorkloadPlan) -> None:
    for fault in config.faults:
        if fault.comm and plan.comm_by_role(fault.rank, fault.comm) is None:
            raise SimConfigError(
                f"fault {fault}: rank {fault.rank} has no {fault.comm} communicator"
            )
        if not any(fault.targets(plan, op) for op in plan.rank_ops(fault.rank)):
            raise SimConfigError(f"fault {fault}: rank {fault.rank} issues no such op")


def prepare_run_dir(config: SimConfig) -> Path:
    if config.out:
        run_dir = Path(config.out)
    else:
        run_id = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
        run_dir = Path(config.home) / "sim" / run_id
    _private_dirs(run_dir)
    for stale in [*run_dir.glob("rank-*.jsonl"), *run_dir.glob("rank-*.log")]:
        stale.unlink()
    return run_dir.resolve()


def _private_dirs(path: Path) -> None:
    """mkdir -p with 0700 for every directory it creates, as everything under the home is."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir(mode=0o700, exist_ok=True)


def _python_path() -> str:
    """So that rank processes import this very code, installed or not."""
    roots = [str(Path(m.__file__).resolve().parent.parent) for m in (comminsight, comminsight_gen)]
    extra = os.environ.get("PYTHONPATH")
    return os.pathsep.join(dict.fromkeys(roots + ([extra] if extra else [])))


def _process_env(config: SimConfig, process: int) -> dict[str, str]:
    """What a launcher tells each process: its rank among the processes (RANK, LOCAL_RANK,
    ...), which is the rank of its one GPU when a process drives one."""
    per_node = config.ranks_per_node // config.ranks_per_process
    first_rank = config.ranks_of_process(process)[0]
    return {
        **os.environ,
        "RANK": str(process),
        "LOCAL_RANK": str(process % per_node),
        "WORLD_SIZE": str(config.processes),
        "LOCAL_WORLD_SIZE": str(per_node),
        "GROUP_RANK": str(process // per_node),
        "COMMINSIGHT_HOME": config.home_of(first_rank),
        "NCCL_PROFILER_PLUGIN": config.plugin,
        **dict(config.env),
        "PYTHONPATH": _python_path(),
    }


def _hung(board: Board, hold_ns: int, now_ns: int) -> bool:
    states = [RankState(int(s)) for s in board.ranks[:, R_STATE]]
    if any(s in (RankState.STARTING, RankState.RUNNING) for s in states):
        return False
    if RankState.BLOCKED not in states:
        return False
    last_change = max(int(board.ranks[:, R_SINCE].max()), int(board.ranks[:, R_PROGRESS].max()))
    return now_ns - last_change >= hold_ns


def run_simulation(
    config: SimConfig, on_progress: Callable[[SimProgress], None] | None = None
) -> SimResult:
    """Run `config` to its end; `on_progress`, when given, is called with a SimProgress about
    every PROGRESS_EVERY_S while the ranks run."""
    config = config.validate()
    plan = build_plan(config)
    check_faults(config, plan)
    config = replace(config, plugin=str(Path(config.plugin).resolve()))
    if not Path(config.plugin).is_file():
        raise SimConfigError(f"plugin {config.plugin} does not exist")
    run_dir = prepare_run_dir(config)
    config = replace(config.with_out(str(run_dir)), cuda_runtime=_cuda_runtime(config, run_dir))
    config_fd = os.open(run_dir / "config.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(config_fd, "w") as f:
        f.write(config.to_json())
    board = Board.create(run_dir / "board.bin", config.ranks, len(plan.instances))

    started = time.monotonic()
    procs = _start_ranks(config, run_dir)
    report = None
    if on_progress is not None:
        planned = sum(len(instance.participants) for instance in plan.instances)
        report = _progress_reporter(on_progress, board, config.ranks, planned)
    try:
        abort_reason, errors = _watch(procs, board, config, started, report)
    finally:
        for proc in procs:  # only if the launcher itself was interrupted
            if proc.poll() is None:
                proc.kill()
    process_codes = [p.wait() for p in procs]
    exit_codes = [process_codes[_process_of(config, r)] for r in range(config.ranks)]

    # a rank that dies takes the other ranks of its process with it
    dying = {_process_of(config, f.rank) for f in config.faults if f.kind == "die"}
    for rank, code in enumerate(exit_codes):
        if code != 0 and not (_process_of(config, rank) in dying and code == -9):
            errors.append(f"rank {rank} exited with status {code} (see its log in {run_dir})")
    if abort_reason == "timeout":
        errors.append(f"the run exceeded --timeout {config.timeout_s:g} s")
    elif abort_reason == "hang" and not any(f.hangs for f in config.faults):
        errors.append("the run hung although no fault asked for a hang")
    elapsed = time.monotonic() - started
    return SimResult(config, plan, run_dir, exit_codes, abort_reason, elapsed, errors)


def _process_of(config: SimConfig, rank: int) -> int:
    return rank // config.ranks_per_process


def _ranks_named(config: SimConfig, process: int) -> str:
    ranks = config.ranks_of_process(process)
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}..{ranks[-1]}"


def _cuda_runtime(config: SimConfig, run_dir: Path) -> str:
    """The runtime library the processes load: the simulated one is built for the run."""
    if config.cuda_runtime == SIM_RUNTIME:
        return str(build_sim_runtime(run_dir))
    if config.cuda_runtime and not Path(config.cuda_runtime).is_file():
        raise SimConfigError(f"CUDA runtime {config.cuda_runtime} does not exist")
    return str(Path(config.cuda_runtime).resolve()) if config.cuda_runtime else ""


def _start_ranks(config: SimConfig, run_dir: Path) -> list:
    """One process per group of ranks_per_process ranks (its log is named by its first):
    forked from one parent that has imported the simulator (forks), started with the ranks'
    start-up variables, or, for a process run under a prefix (another namespace), a new
    interpreter of its own."""
    procs = []
    for process in range(config.processes):
        ranks = config.ranks_of_process(process)
        log_path = run_dir / f"rank-{ranks[0]:05d}.log"
        os.close(os.open(log_path, os.O_WRONLY | os.O_CREAT, 0o600))
        args = [str(run_dir), *map(str, ranks)]
        env = _process_env(config, process)
        if config.prefix_of(process) or not _forkable(env):
            if config.run_as:
                raise SimConfigError("run-as: rank processes that run start-up code are not forked")
            procs.append(_interpreter(config.prefix_of(process), args, env, log_path))
            continue
        parent = ForkParent.shared({**os.environ, **_startup_env(config)})
        if config.run_as:
            _give_run_dir(run_dir, *config.run_as)
        procs.append(parent.start(args, env, log_path, config.run_as))
    return procs


def _give_run_dir(run_dir: Path, uid: int, gid: int) -> None:
    """The run's directory and what is in it so far (configuration, board, logs) to the user
    its ranks run as: they read and write there. Through descriptors opened without following
    links: the directory is ours, but nothing in it is taken on trust."""
    for path in (run_dir, *sorted(run_dir.iterdir())):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            os.fchown(fd, uid, gid)
        finally:
            os.close(fd)


def _startup_env(config: SimConfig) -> dict[str, str]:
    """What a rank process reads as it starts, its fork parent too: config.env's start-up
    variables (a sanitizer's LD_PRELOAD and options: its runtime is in the parent from the
    start, and so in every child) and the path to this code."""
    own = {k: v for k, v in config.env if k.startswith(STARTUP_VARIABLES)}
    return {**own, "PYTHONPATH": _python_path()}


def _forkable(env: dict[str, str]) -> bool:
    """Whether a process may be forked from a parent that has imported the simulator: not
    when its interpreter would run start-up code (a sitecustomize or usercustomize on its
    PYTHONPATH, as Inject is loaded in tests), which must see the process's own environment
    and pid, as in a training process."""
    return not runs_start_up_code(env)


def _interpreter(
    prefix: tuple[str, ...], args: list[str], env: dict[str, str], log_path: Path
) -> subprocess.Popen:
    with os.fdopen(os.open(log_path, os.O_WRONLY), "wb") as log:
        return subprocess.Popen(
            [*prefix, sys.executable, "-m", "comminsight.sim.rank_process", *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def _progress_reporter(
    on_progress: Callable[[SimProgress], None], board: Board, ranks: int, planned: int
) -> Callable[[str | None], None]:
    """A function for each pass of the watch loop that calls `on_progress` at most every
    PROGRESS_EVERY_S (counting the board's arrivals reads every cell of it)."""
    finished = (RankState.DONE, RankState.ABORTED, RankState.DEAD)
    last = [0.0]

    def report(aborting: str | None) -> None:
        now = time.monotonic()
        if now - last[0] < PROGRESS_EVERY_S:
            return
        last[0] = now
        states = board.ranks[:, R_STATE]
        done = sum(1 for s in states if RankState(int(s)) in finished)
        arrivals = int(np.count_nonzero(board.arrivals))
        on_progress(SimProgress(ranks, done, arrivals, planned, aborting))

    return report


def _watch(
    procs,
    board: Board,
    config: SimConfig,
    started: float,
    report: Callable[[str | None], None] | None = None,
) -> tuple[str | None, list[str]]:
    """Until every rank has exited: mark the dead, abort a held hang or an overlong run."""
    abort_reason, kill_at, errors = None, None, []
    hold_ns = int(config.hang_hold_s * 1e9)
    finished = (RankState.DONE, RankState.ABORTED, RankState.DEAD)
    while any(p.poll() is None for p in procs):
        for rank in range(config.ranks):
            proc = procs[_process_of(config, rank)]
            if proc.poll() is not None and board.state(rank) not in finished:
                board.set_state(rank, RankState.DEAD)
        if not board.aborted:
            if _hung(board, hold_ns, shared_clock_ns()):
                abort_reason = "hang"
            elif time.monotonic() - started > config.timeout_s:
                abort_reason = "timeout"
            if abort_reason:
                board.abort()
                kill_at = time.monotonic() + ABORT_GRACE_S
        elif kill_at is not None and time.monotonic() > kill_at:
            for process, proc in enumerate(procs):
                if proc.poll() is None:
                    proc.kill()
                    who = _ranks_named(config, process)
                    errors.append(f"{who} did not stop after the abort and was killed")
            kill_at = None
        if report is not None:
            report(abort_reason)
        time.sleep(POLL_S)
    return abort_reason, errors
