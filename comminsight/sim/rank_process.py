"""One simulated rank: an OS process that loads the plugin itself and plays its program.

Started by the launcher as `python -m comminsight.sim.rank_process RUN_DIR RANK` with RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and COMMINSIGHT_HOME already in its environment (the
plugin reads them when it loads). It rebuilds the plan from RUN_DIR/config.json, then walks
its program: host compute is a sleep, each op goes through `SimNccl`, each step ends with the
host waiting for its GPU (as `loss.item()` makes training do). Faults are applied here.

Exit status: 0 when the program finished, the rank left early (a `leave` fault) or the
launcher aborted the run (all recorded in the ground truth), 1 on an error of the simulation
itself; a `die` fault ends the process with SIGKILL.

`python -m comminsight.sim.rank_process RUN_DIR RANK RANK ...` drives several ranks from one
process, as JAX drives its local devices: the plugin is loaded once, NCCL's activation mask
is the process's one int, and each rank runs on its own thread (XLA executes each local
device's program on a thread of its own and initializes each device's communicator there
with that device current) with its own GPU timeline.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from comminsight.inject.metadata import MetadataFile
from comminsight.inject.step_markers import StepMarkers
from comminsight.sim.abi import ProfilerAbi, load_plugin
from comminsight.sim.board import Board, RankState, RunAborted
from comminsight.sim.config import SimConfig
from comminsight.sim.cuda_runtime import CudaRuntime
from comminsight.sim.nccl import SimNccl
from comminsight.sim.plan import (
    Compute,
    GroupEnd,
    GroupStart,
    HostSync,
    Issue,
    RankOp,
    StepBegin,
    StepEnd,
)
from comminsight.sim.truth import GroundTruthWriter, truth_path
from comminsight.sim.workloads import build_plan

GPU_CLOCK_SKEW_NS = 20_000  # GPU globaltimers of one job disagree by microseconds
MISMATCHED_FUNC = {
    "AllReduce": "AllGather",
    "AllGather": "AllReduce",
    "ReduceScatter": "AllReduce",
    "Broadcast": "AllReduce",
}


def mismatched_op(op: RankOp, field: str) -> tuple[RankOp, dict]:
    if field == "func" and op.func in MISMATCHED_FUNC:
        changed = dataclasses.replace(op, func=MISMATCHED_FUNC[op.func])
        return changed, {"field": "func", "expected": op.func, "issued": changed.func}
    changed = dataclasses.replace(op, count=op.count * 2)
    return changed, {"field": "count", "expected": op.count, "issued": changed.count}


class RankLeft(Exception):
    """The rank ran out of data (a `leave` fault): it ends its program here, destroys its
    communicators and exits cleanly."""


@dataclass
class SharedProcess:
    """What the ranks of one process share: the plugin NCCL loaded once, its one activation
    mask, and the CUDA runtime (None: the process has none)."""

    abi: ProfilerAbi
    mask: object
    cuda: CudaRuntime | None

    @classmethod
    def load(cls, config: SimConfig) -> SharedProcess:
        abi = load_plugin(config.plugin, config.abi)
        cuda = CudaRuntime(config.cuda_runtime) if config.cuda_runtime else None
        return cls(abi, abi.new_activation_mask(), cuda)


# A run's plan, built by the fork parent before it forks the run's first rank process, for
# every one of them (a plan of a large run costs a rank more CPU than its share of the run),
# with the config.json it was built from: config text -> plan (the latest run's only)
_PREBUILT: dict[str, object] = {}


class AdamW:
    """What the simulated training steps: its class name is what Inject's markers record."""


_OPTIMIZER = AdamW()
# the host compute after which torch's optimizer.step() returns, as workloads label it
OPTIMIZER_LABELS = ("optimizer", "adam")


def prebuild_plan(run_dir: str) -> bool:
    """In the fork parent: build the run's plan once, for the rank processes it forks; whether
    the plan held changed. A config that cannot be read or planned is left to the ranks,
    which report it."""
    try:
        text = (Path(run_dir) / "config.json").read_text()
        if text in _PREBUILT:
            return False
        _PREBUILT.clear()
        _PREBUILT[text] = build_plan(SimConfig.from_json(text))
    except Exception:  # the parent serves other runs; the ranks say why
        _PREBUILT.clear()
    return True


class RankRunner:
    def __init__(self, run_dir: Path, rank: int, process: SharedProcess | None = None):
        self.run_dir, self.rank = run_dir, rank
        self.process = process  # None: the rank is the process's only one and loads it
        text = (run_dir / "config.json").read_text()
        self.config = SimConfig.from_json(text)
        # a prebuilt plan only where no other rank of this process shares (and plays) it
        prebuilt = _PREBUILT.get(text) if process is None else None
        self.plan = prebuilt if prebuilt is not None else build_plan(self.config)
        self.board = Board.attach(run_dir / "board.bin", self.plan.world, len(self.plan.instances))
        self.faults = [f for f in self.config.faults if f.rank == rank]
        self.scale = self.config.time_scale
        self.step_start: dict[int, int] = {}
        self.markers: StepMarkers | None = None
        if self.config.step_markers and rank % self.config.ranks_per_process == 0:
            # one process's markers, however many ranks it drives (one optimizer step)
            self.markers = StepMarkers(MetadataFile(Path(self.config.home_of(rank))))
        self.current_step: StepBegin | None = None
        # this rank's op indices by step, for each step's record (gathered once: scanning the
        # whole program at every step's end made long runs quadratic)
        self.step_ops: dict[int, list[int]] = {}
        for op in self.plan.rank_ops(rank):
            self.step_ops.setdefault(op.step, []).append(op.op_index)

    def run(self) -> int:
        self.board.set_pid(self.rank, os.getpid())
        self.board.set_state(self.rank, RankState.RUNNING)
        process = self.process if self.process is not None else SharedProcess.load(self.config)
        abi = process.abi
        skew = random.Random(f"{self.config.seed}/gpu-clock/{self.rank}")
        tick_offset = (
            time.time_ns()
            - time.monotonic_ns()
            + skew.randint(-GPU_CLOCK_SKEW_NS, GPU_CLOCK_SKEW_NS)
        )
        self.truth = GroundTruthWriter(truth_path(self.run_dir, self.rank))
        self.truth.write(
            "run",
            format=1,
            workload=self.config.workload,
            rank=self.rank,
            world_size=self.config.ranks,
            local_rank=self.rank % self.config.ranks_per_node,
            node=self.rank // self.config.ranks_per_node,
            pid=os.getpid(),
            abi=self.config.abi,
            plugin=self.config.plugin,
            plugin_name=abi.name,
            kernel_channels=abi.kernel_channels,  # "c" or "python": which loop makes them
            seed=self.config.seed,
            time_scale=self.scale,
            gpu_tick_offset_ns=tick_offset,
            clock="CLOCK_MONOTONIC",
            process=self.rank // self.config.ranks_per_process,
            cuda_device=self.config.cuda_device_of(self.rank) if process.cuda else None,
        )
        self.nccl = SimNccl(
            abi,
            self.plan.comms,
            self.plan.instances,
            self.rank,
            self.board,
            self.truth,
            self.scale,
            tick_offset,
            self.config.comm_names,
            mask=process.mask,
            cuda=process.cuda,
            cuda_device=self.config.cuda_device_of(self.rank),
            user_tags=self.config.user_tags,
        )
        self.nccl.proxy.start()
        status = "done"
        try:
            self._rendezvous()
            self._play()
            self._blocked(self.nccl.proxy.wait_idle)
        except RunAborted:
            status = "aborted"
        except RankLeft:
            status = "left"
        for issued in self.nccl.proxy.shutdown() + self.nccl.unlaunched():
            self.truth.write("op", **issued.record)
        self._close_open_step()
        self.nccl.finalize_all(aborted=status == "aborted")
        self.truth.write(
            "end",
            status=status,
            ops_issued=self.nccl.ops_issued,
            ops_completed=self.nccl.proxy.completed,
            nonzero_returns=abi.nonzero_returns,
            end_ns=time.monotonic_ns(),
        )
        self.truth.close()
        ended = RankState.ABORTED if status == "aborted" else RankState.DONE
        self.board.set_state(self.rank, ended)
        return 0

    # ---- the program ----

    def _play(self) -> None:
        for action in self.plan.programs[self.rank]:
            if self.board.aborted:
                raise RunAborted()
            if isinstance(action, Compute):
                self._sleep(action.ns * self.scale / 1e9)
                if action.label in OPTIMIZER_LABELS and self.markers is not None:
                    self.markers.on_step(_OPTIMIZER, (), {})
            elif isinstance(action, Issue):
                self._issue(action.op)
            elif isinstance(action, GroupStart):
                self.nccl.group_start()
            elif isinstance(action, GroupEnd):
                self.nccl.group_end()
            elif isinstance(action, StepBegin):
                self.step_start[action.step] = time.monotonic_ns()
                self.current_step = action
            elif isinstance(action, HostSync):
                self._blocked(self.nccl.proxy.wait_idle)
            elif isinstance(action, StepEnd):
                self._blocked(self.nccl.proxy.wait_idle)
                self._write_step(action.step, completed=True)
                self.current_step = None

    def _issue(self, op: RankOp) -> None:
        fault = next((f for f in self.faults if f.targets(self.plan, op)), None)
        if fault is None:
            self.nccl.issue(op)
            return
        record = {
            "fault": fault.kind,
            "spec": str(fault),
            "op_index": op.op_index,
            "comm_id": self.plan.comms[op.comm].comm_id_hex,
            "comm_op_index": op.comm_op_index,
            "instance": op.instance,
            "func": op.func,
            "at_ns": time.monotonic_ns(),
        }
        if fault.kind == "sleep":
            self.truth.write("fault", seconds=fault.seconds, **record)
            self._sleep(fault.seconds)
            self.nccl.issue(op)
        elif fault.kind == "mismatch":
            changed, what = mismatched_op(op, fault.field)
            self.truth.write("fault", mismatch=what, **record)
            self.nccl.issue(changed, what)
        elif fault.kind == "skip":
            # the rank never calls NCCL for this op and is stuck elsewhere from now on
            self.truth.write("fault", **record)
            self._blocked(self._wait_for_abort)
        elif fault.kind == "die":
            # the earlier ops are done on its GPU (it crashed in Python, after a sync)
            self._blocked(self.nccl.proxy.wait_idle)
            record["at_ns"] = time.monotonic_ns()
            self.truth.write("fault", **record)
            self.truth.close()
            os.kill(os.getpid(), signal.SIGKILL)
        elif fault.kind == "leave":
            # as a rank out of data leaves its training loop: after its last step's ops
            # finished on its GPU (the loss it printed synchronized), never during one
            self._blocked(self.nccl.proxy.wait_idle)
            record["at_ns"] = time.monotonic_ns()
            self.truth.write("fault", **record)
            raise RankLeft()

    def _blocked(self, wait) -> None:
        self.board.set_state(self.rank, RankState.BLOCKED)
        wait()
        self.board.set_state(self.rank, RankState.RUNNING)

    def _rendezvous(self) -> None:
        """Wait until every rank's process is up, as torch.distributed's rendezvous and the
        first communicator's bootstrap hold a real job's ranks: no rank enters the first op
        while a peer is still starting (on a loaded machine, seconds later), which a short hang
        threshold would otherwise report as that peer missing."""
        self.board.ready(self.rank)
        pause = 0.001
        while self.board.not_ready():
            if self.board.aborted:
                raise RunAborted()
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    def _wait_for_abort(self) -> None:
        while not self.board.aborted:
            time.sleep(0.02)
        raise RunAborted()

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.board.aborted:
                raise RunAborted()
            time.sleep(min(left, 0.05))

    # ---- steps ----

    def _write_step(self, step: int, completed: bool) -> None:
        ops = self.step_ops.get(step, [])
        self.truth.write(
            "step",
            step=step,
            warmup=step < self.config.warmup_steps,
            first_op=min(ops) if ops else None,
            last_op=max(ops) if ops else None,
            n_ops=len(ops),
            start_ns=self.step_start[step],
            end_ns=time.monotonic_ns() if completed else None,
            completed=completed,
        )

    def _close_open_step(self) -> None:
        if self.current_step is not None:
            self._write_step(self.current_step.step, completed=False)


def run_ranks(run_dir: Path, ranks: list[int]) -> int:
    """Several ranks of one process, a thread each; 1 when any of them failed."""
    config = SimConfig.load(run_dir / "config.json")
    process = SharedProcess.load(config)
    failed: list[int] = []

    def run(rank: int) -> None:
        runner = RankRunner(run_dir, rank, process)
        try:
            runner.run()
        except BaseException:
            traceback.print_exc()
            failed.append(rank)
            # not left RUNNING: the launcher then sees the run hang and aborts it
            runner.board.set_state(rank, RankState.DEAD)

    threads = [threading.Thread(target=run, args=(r,), name=f"sim-rank-{r}") for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        usage = "usage: python -m comminsight.sim.rank_process RUN_DIR RANK [RANK...]"
        print(usage, file=sys.stderr)
        return 2
    if len(args) == 2:
        return RankRunner(Path(args[0]), int(args[1])).run()
    return run_ranks(Path(args[0]), [int(r) for r in args[1:]])


if __name__ == "__main__":
    sys.exit(main())
