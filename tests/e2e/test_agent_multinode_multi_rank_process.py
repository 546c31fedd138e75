"""A multi-node job whose processes drive two ranks each, as the master sees it.

A process that drives several GPUs (ncclCommInitAll, or one thread per local GPU as JAX runs)
holds two ranks of one communicator: two rows of its SHM communicator table with the same
communicator id and pid, each in its first generation. The master must keep both, or it sees
one rank per process, an incomplete communicator, half the ops, and no hang it can diagnose.

A master and two slave `comminsight-agent` processes over real gRPC and HTTP; four simulated
DDP ranks, one process of two ranks on each slave's node, drive the real plugin. Rank 3 skips
its last all-reduce: every earlier op completes on every rank, so the job's totals are known
exactly, and the master must name rank 3, on node-1, although the other rank of its process
waits in that very op."""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from multinode_job import SIM_ENV, start_job
from waiting import wait_until

from comminsight.sim import SimConfig, parse_fault, read_ground_truth, run_simulation
from comminsight.sim.board import Board
from comminsight.sim.workloads import build_plan

RANKS, NODES, RANKS_PER_PROCESS = 4, 2, 2
CULPRIT, CULPRIT_NODE = 3, "node-1"
# The test aborts the hung run itself once it has looked; the hold only bounds a run whose
# test failed before that.
HOLD_S = 240.0
DEADLINE_S = 120  # generous: a loaded 2-core machine runs two processes and three agents
SLAVE_EXTRA = {"COMMINSIGHT_SEMANTIC_ENABLE": "0"}


def sim_config(plugin, root: Path, job) -> SimConfig:
    """The job, with rank 3 skipping its last op."""
    config = SimConfig(
        plugin=str(plugin),
        home=str(root / "sim"),
        out=str(root / "run"),
        workload="ddp",
        ranks=RANKS,
        nodes=NODES,
        ranks_per_process=RANKS_PER_PROCESS,
        cuda_runtime="sim",
        node_homes=tuple(str(s.home) for s in job.slaves),
        steps=3,
        time_scale=0.02,
        hang_hold_s=HOLD_S,
        env=SIM_ENV,
    )
    fault = parse_fault(f"skip:rank={CULPRIT},op={skipped_op(config)}")
    return replace(config, faults=(fault,))


def skipped_op(config: SimConfig) -> int:
    return len(build_plan(config).rank_ops(CULPRIT)) - 1


def ops_before_the_hang(config: SimConfig) -> int:
    """Every rank completes all its ops but the last (DDP ranks issue the same ops)."""
    plan = build_plan(config)
    return sum(len(plan.rank_ops(rank)) - 1 for rank in range(RANKS))


class SimRun:
    """The simulated job in a thread of the test; `stop()` aborts the hung run as a launcher
    would after its hold."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.result = {}
        self.thread = threading.Thread(
            target=lambda: self.result.setdefault("sim", run_simulation(config))
        )
        self.thread.start()

    def stop(self) -> None:
        board_path = Path(self.config.out) / "board.bin"
        # the launcher may still be preparing the run
        wait_until(
            lambda: not self.thread.is_alive() or board_path.exists(), 120, "the run's board"
        )
        if self.thread.is_alive():
            instances = len(build_plan(self.config).instances)
            Board.attach(board_path, RANKS, instances).abort()
        self.thread.join()

    def truths(self) -> list:
        self.stop()
        sim = self.result["sim"]
        assert not sim.errors, sim.errors
        return read_ground_truth(sim.run_dir)


def the_communicator(agent) -> dict | None:
    items = agent.get("/api/v1/communicators").json()["items"]
    return items[0] if len(items) == 1 else None


def hangs(agent) -> list[dict]:
    return agent.get("/api/v1/hangs", status="all").json()["items"]


def names_the_skip(report: dict, skipped: int) -> bool:
    """The skipped op with the whole picture: a rank whose node has not reported it yet is
    missing from the evidence (the report is diagnosed again on every poll, so it fills in)."""
    evidence = report["evidence"]
    return (
        sorted(e["comm_rank"] for e in evidence) == list(range(RANKS))
        and sorted(e["comm_rank"] for e in evidence if e.get("joined")) == [0, 1, 2]
        and any(e.get("last_enqueued", {}).get("seq", -1) >= skipped for e in evidence)
    )


@dataclass
class Seen:
    """What the master and the slaves showed while the job hung with every rank alive (an
    ended process's rows leave the master with its region, and an aborted rank force-completes
    its ops at finalize, which the ground truth does not count as completed)."""

    comm: dict
    ranks: list[dict]
    nodes: dict[str, dict]
    report: dict
    local_comms: list[dict]
    local_reports: list[list[dict]]


def watch_the_hang(job, config: SimConfig) -> Seen:
    """Waits until the master counts every op completed before the hang and holds a report
    that names the skip: from then on nothing in the job moves until it is aborted."""
    expected, skipped = ops_before_the_hang(config), skipped_op(config)

    def settled():
        comm = the_communicator(job.master)
        if comm is None or comm["ops_completed_total"] != expected:
            return None
        if not any(r["culprits"] for r in hangs(job.slaves[1])):
            return None  # the culprit's node diagnoses at its own pace
        return next((r for r in hangs(job.master) if names_the_skip(r, skipped)), None)

    report = wait_until(
        settled,
        DEADLINE_S,
        lambda: (
            f"{expected} ops and a report at the master: {the_communicator(job.master)} "
            f"{hangs(job.master)}\n{job.master.log_text()[-3000:]}"
        ),
    )
    comm = the_communicator(job.master)
    full = job.master.get(f"/api/v1/communicators/{comm['comm_id']}").json()
    nodes = job.master.get("/api/v1/nodes").json()["items"]
    return Seen(
        comm=comm,
        ranks=full["ranks"],
        nodes={n["node_name"]: n for n in nodes},
        report=report,
        local_comms=[s.get(f"/api/v1/communicators/{comm['comm_id']}").json() for s in job.slaves],
        local_reports=[hangs(s) for s in job.slaves],
    )


@pytest.fixture(scope="module")
def hung_job(plugin, tmp_path_factory):
    root = tmp_path_factory.mktemp("multi-rank")
    job = start_job(root, NODES, slave_extra=SLAVE_EXTRA)
    run = SimRun(sim_config(plugin, root, job))
    try:
        seen = watch_the_hang(job, run.config)
        yield seen, run.truths()
    finally:
        run.stop()
        job.stop()


def completed(truths) -> list[dict]:
    return [op for t in truths for op in t.ops if op["completed"]]


def test_the_job_runs_two_ranks_in_each_process(hung_job):
    _, truths = hung_job
    pids = {t.run["pid"] for t in truths}
    assert len(truths) == RANKS and len(pids) == RANKS // RANKS_PER_PROCESS


def test_the_master_keeps_every_rank_of_a_process(hung_job):
    seen, truths = hung_job
    assert seen.comm["ranks_seen"] == list(range(RANKS)) and seen.comm["complete"]
    assert seen.comm["nodes"] == ["node-0", "node-1"]
    placed = [(r["comm_rank"], r["node_name"], r["pid"]) for r in seen.ranks]
    assert placed == [(t.rank, f"node-{t.rank // 2}", t.run["pid"]) for t in truths]
    for rank in seen.ranks:
        done = [op for op in truths[rank["comm_rank"]].ops if op["completed"]]
        assert rank["progress"]["collectives"]["last_completed_seq"] == len(done) - 1
    for i in range(NODES):
        # one process a node: the launcher's RANK counts processes
        assert seen.nodes[f"node-{i}"]["processes_total"] == 1
        assert seen.nodes[f"node-{i}"]["global_ranks"] == [i]


def test_the_master_totals_are_exact(hung_job):
    seen, truths = hung_job
    assert seen.comm["ops_completed_total"] == len(completed(truths))
    assert seen.comm["bytes_completed_total"] == sum(op["bytes"] for op in completed(truths))
    # and the union of what each slave reads from its SHM
    assert [c["ranks_seen"] for c in seen.local_comms] == [[0, 1], [2, 3]]
    assert seen.comm["ops_completed_total"] == sum(
        c["ops_completed_total"] for c in seen.local_comms
    )


def test_the_master_names_the_stalled_rank_beside_its_waiting_sibling(hung_job):
    seen, truths = hung_job
    report = seen.report
    assert report["diagnosed_by"] == "master"
    assert [(c["comm_rank"], c["node_name"]) for c in report["culprits"]] == [
        (CULPRIT, CULPRIT_NODE)
    ]
    # the culprit's process is alive with its other rank inside the op the peers wait in
    assert report["culprits"][0]["pid"] == truths[CULPRIT].run["pid"] == truths[2].run["pid"]
    evidence = {e["comm_rank"]: e for e in report["evidence"]}
    assert {r: e["node_name"] for r, e in evidence.items()} == {
        r: f"node-{r // 2}" for r in range(RANKS)
    }
    # node-0 sees only its own ranks and can never name rank 3; node-1 sees the culprit's
    # process whole, and the master says what it says, for the whole communicator
    node0, node1 = seen.local_reports
    assert all(c["comm_rank"] in (0, 1) for r in node0 for c in r["culprits"]), node0
    (local,) = [r for r in node1 if r["culprits"]]
    assert [c["comm_rank"] for c in local["culprits"]] == [CULPRIT]
    assert report["verdict"] == local["verdict"]
    assert report["verdict"] in ("rank_not_joined", "stuck_outside_nccl")
