"""The demo's simulated training: 8 ranks of tensor x pipeline x data parallelism on two
simulated nodes, 3 steps after a warm-up, driving the real Profiler plugin through NCCL's
ABI; once healthy, once with rank 1 skipping its 6th tensor-parallel all-reduce. On a
terminal a progress bar follows the ops the ranks have done (from their ground truth)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from comminsight.sim import SimConfig, SimResult, parse_fault, read_ground_truth, run_simulation
from comminsight.sim.truth import RankTruth
from comminsight.sim.workloads import build_plan

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"
DEMO_DIR = ROOT / "var" / "demo"

RANKS = 8
NODES = 2
STEPS = 3
FAULT = "skip:rank=1,op=5,comm=tp"  # rank 1 skips its 6th tensor-parallel op, an all-reduce
# how long the launcher lets the hang stand before it aborts the run: the Agent diagnoses it
# meanwhile, well after the Profiler's 1 s threshold
HANG_HOLD_S = 4.0
PROFILER_SETTINGS = (
    ("COMMINSIGHT_AGENT_AUTOSTART", "0"),  # a demo leaves no Agent daemon running behind it
    ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "100"),
    ("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S", "1"),
)
PROGRESS_POLL_S = 0.2


@dataclass(frozen=True)
class SimRun:
    result: SimResult
    truths: list[RankTruth]  # by rank

    @property
    def run_dir(self) -> Path:
        return self.result.run_dir


def demo_config(home: Path, faults: tuple[str, ...] = ()) -> SimConfig:
    return SimConfig(
        plugin=str(PLUGIN),
        home=str(home),
        workload="tp-pp-dp",
        ranks=RANKS,
        nodes=NODES,
        steps=STEPS,
        time_scale=0.05,
        hang_hold_s=HANG_HOLD_S,
        faults=tuple(parse_fault(f) for f in faults),
        env=PROFILER_SETTINGS,
        out=str(home / "sim"),  # known before the run, so that progress can follow it
    )


def simulate(home: Path, console: Console, what: str, faults: tuple[str, ...] = ()) -> SimRun:
    """Run the demo's training under `home`; its result and every rank's ground truth."""
    config = demo_config(home, faults)
    if console.is_terminal:
        result = run_with_progress(config, console, what)
    else:  # into a pipe or a file: nothing but the outcome
        result = run_simulation(config)
    return SimRun(result, read_ground_truth(result.run_dir, config.ranks))


def run_with_progress(config: SimConfig, console: Console, what: str) -> SimResult:
    """run_simulation in a thread while a transient bar counts the ops the ranks finished."""
    plan = build_plan(config.validate())
    total = sum(len(plan.rank_ops(r)) for r in range(config.ranks))
    outcome: dict[str, object] = {}

    def launch() -> None:
        try:
            outcome["result"] = run_simulation(config)
        except BaseException as e:  # re-raised in the caller's thread
            outcome["error"] = e

    launcher = threading.Thread(target=launch, name="demo-simulation")
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("ops"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(what, total=total)
        launcher.start()
        while launcher.is_alive():
            progress.update(task, completed=ops_done(Path(config.out)))
            launcher.join(PROGRESS_POLL_S)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def ops_done(run_dir: Path) -> int:
    """Ops the ranks have finished with (completed, or in flight when the run was aborted):
    each is a line of its rank's ground truth once its fate is known."""
    done = 0
    for path in run_dir.glob("rank-*.jsonl"):
        try:
            done += path.read_bytes().count(b'"kind":"op"')
        except OSError:
            pass
    return done
