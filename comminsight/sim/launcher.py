"""Starts one process per simulated rank, watches them, and ends a hang after --hang-hold.

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
from dataclasses import dataclass, field, replace
from pathlib import Path

import comminsight
import comminsight_gen
from comminsight.sim.board import R_PROGRESS, R_SINCE, R_STATE, Board, RankState
from comminsight.sim.config import SimConfig, SimConfigError
from comminsight.sim.plan import WorkloadPlan
from comminsight.sim.workloads import build_plan

POLL_S = 0.02
ABORT_GRACE_S = 15.0


@dataclass
class SimResult:
    config: SimConfig
    plan: WorkloadPlan
    run_dir: Path
    exit_codes: list[int | None]
    abort_reason: str | None  # None, "hang" or "timeout"
    elapsed_s: float
    errors: list[str] = field(default_factory=list)


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


def _rank_env(config: SimConfig, rank: int) -> dict[str, str]:
    per_node = config.ranks_per_node
    return {
        **os.environ,
        "RANK": str(rank),
        "LOCAL_RANK": str(rank % per_node),
        "WORLD_SIZE": str(config.ranks),
        "LOCAL_WORLD_SIZE": str(per_node),
        "GROUP_RANK": str(rank // per_node),
        "COMMINSIGHT_HOME": config.home_of(rank),
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


def run_simulation(config: SimConfig) -> SimResult:
    config = config.validate()
    plan = build_plan(config)
    check_faults(config, plan)
    config = replace(config, plugin=str(Path(config.plugin).resolve()))
    if not Path(config.plugin).is_file():
        raise SimConfigError(f"plugin {config.plugin} does not exist")
    run_dir = prepare_run_dir(config)
    config = config.with_out(str(run_dir))
    config_fd = os.open(run_dir / "config.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(config_fd, "w") as f:
        f.write(config.to_json())
    board = Board.create(run_dir / "board.bin", config.ranks, len(plan.instances))

    started = time.monotonic()
    procs = _start_ranks(config, run_dir)
    try:
        abort_reason, errors = _watch(procs, board, config, started)
    finally:
        for proc in procs:  # only if the launcher itself was interrupted
            if proc.poll() is None:
                proc.kill()
    exit_codes = [p.wait() for p in procs]

    dying = {f.rank for f in config.faults if f.kind == "die"}
    for rank, code in enumerate(exit_codes):
        if code != 0 and not (rank in dying and code == -9):
            errors.append(f"rank {rank} exited with status {code} (see its log in {run_dir})")
    if abort_reason == "timeout":
        errors.append(f"the run exceeded --timeout {config.timeout_s:g} s")
    elif abort_reason == "hang" and not any(f.hangs for f in config.faults):
        errors.append("the run hung although no fault asked for a hang")
    elapsed = time.monotonic() - started
    return SimResult(config, plan, run_dir, exit_codes, abort_reason, elapsed, errors)


def _start_ranks(config: SimConfig, run_dir: Path) -> list[subprocess.Popen]:
    procs = []
    for rank in range(config.ranks):
        log_fd = os.open(run_dir / f"rank-{rank:05d}.log", os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(log_fd, "wb") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "comminsight.sim.rank_process", str(run_dir), str(rank)],
                    env=_rank_env(config, rank),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )
    return procs


def _watch(procs, board: Board, config: SimConfig, started: float) -> tuple[str | None, list[str]]:
    """Until every rank has exited: mark the dead, abort a held hang or an overlong run."""
    abort_reason, kill_at, errors = None, None, []
    hold_ns = int(config.hang_hold_s * 1e9)
    finished = (RankState.DONE, RankState.ABORTED, RankState.DEAD)
    while any(p.poll() is None for p in procs):
        for rank, proc in enumerate(procs):
            if proc.poll() is not None and board.state(rank) not in finished:
                board.set_state(rank, RankState.DEAD)
        if not board.aborted:
            if _hung(board, hold_ns, time.monotonic_ns()):
                abort_reason = "hang"
            elif time.monotonic() - started > config.timeout_s:
                abort_reason = "timeout"
            if abort_reason:
                board.abort()
                kill_at = time.monotonic() + ABORT_GRACE_S
        elif kill_at is not None and time.monotonic() > kill_at:
            for rank, proc in enumerate(procs):
                if proc.poll() is None:
                    proc.kill()
                    errors.append(f"rank {rank} did not stop after the abort and was killed")
            kill_at = None
        time.sleep(POLL_S)
    return abort_reason, errors
