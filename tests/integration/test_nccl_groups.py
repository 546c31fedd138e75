"""NCCL groups end to end: the simulated NCCL issues grouped ops as NCCL 2.28 does, the real
Profiler gives every op the per-process id of its group (ABI 4, 5 and 6), and the logs, the SHM
ring and the Semantic Engine's inputs all carry it.

The workload is MoE with its all-to-alls issued as PyTorch's NCCL backend issues
all_to_all_single: ncclGroupStart, a Send and a Recv per peer, ncclGroupEnd. Its barrier and
gradient all-reduces are ops alone in their implicit groups.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from agent_home import hold_agent_lock
from log_files import segment_data
from logged_ops import logged_ops
from profiler_builds import builds
from sim_pipeline import log_key, logs_by_rank, simulate, truth_key
from sim_recording import assert_well_formed, host_sequence, run_sim

from comminsight.semantic import native
from comminsight.semantic.log_input import _DECODER, _op, read_gpu_logs
from comminsight.semantic.op_batch import CommTable, SegmentTable
from comminsight.semantic.shm_input import engine_batch
from comminsight.shm_reader import RingCursor, ShmRegion
from comminsight.sim import SimConfig, parse_fault
from comminsight.sim.plan import GroupEnd, GroupStart, Issue, PlanBuilder
from comminsight.sim.workloads import build_plan
from comminsight_gen.abi import shm_v1

ROOT = Path(__file__).resolve().parents[2]
RANKS, LAYERS, STEPS, WARMUP = 3, 2, 1, 1
MOE = {
    "workload": "moe",
    "moe_alltoall": "grouped-p2p",
    "ranks": RANKS,
    "layers": LAYERS,
    "steps": STEPS,
    "warmup_steps": WARMUP,
    "model_params": 20_000_000,
}
# dispatch and combine, in forward and in backward, per layer and step
ALLTOALLS_PER_RANK = (STEPS + WARMUP) * LAYERS * 4


@dataclass
class GroupedRun:
    abi: int
    home: Path
    truths: list
    logs: dict[int, list]  # rank -> its op lines
    shm: dict[int, np.ndarray]  # rank -> its Coll/P2P ring records

    def ops_with_lines(self, rank: int) -> list[tuple[dict, object]]:
        """Each completed truth op of the rank with the log line the Profiler wrote for it."""
        by_key = {log_key(line): line for line in self.logs[rank]}
        p2p_seen: Counter = Counter()
        out = []
        for op in self.truths[rank].ops:
            index = p2p_seen[op["comm_id"]] if op["seq"] is None else None
            if op["seq"] is None:
                p2p_seen[op["comm_id"]] += 1
            out.append((op, by_key[truth_key(op, index)]))
        return out


@pytest.fixture(scope="module", params=[4, 5, 6], ids=lambda abi: f"abi{abi}")
def grouped(request, tmp_path_factory) -> GroupedRun:
    abi = request.param
    home = tmp_path_factory.mktemp(f"groups-v{abi}")
    lock = hold_agent_lock(home)
    _, truths = simulate(home, abi=abi, **MOE)
    logs = {rank: logged_ops(lines) for rank, lines in logs_by_rank(home).items()}
    shm = {}
    for path in (home / "shms").glob("*.shm"):
        region = ShmRegion(path)
        records = RingCursor(region).poll(1 << 20)
        ops = (records["kind"] == shm_v1.RecordKind.COLL) | (
            records["kind"] == shm_v1.RecordKind.P2P
        )
        shm[int(region.header["rank"])] = records[ops]
    lock.close()
    assert sorted(logs) == sorted(shm) == list(range(RANKS))
    return GroupedRun(abi, home, truths, logs, shm)


# ---- the plan and the simulated NCCL ----


def test_nccl_group_brackets_the_ops_issued_inside_it():
    b = PlanBuilder(SimConfig(plugin="unused", home="unused", ranks=2))
    world = b.add_comm("world", "default_pg", (0, 1))
    for rank in range(2):
        with b.nccl_group(rank) as group:
            b.send(rank, world, 1 - rank, 16, "ncclFloat32", phase="pp", step=0)
            with b.nccl_group(rank) as inner:  # nested: joins the outer group, as in NCCL
                b.recv(rank, world, 1 - rank, 16, "ncclFloat32", phase="pp", step=0)
            assert inner == group == 0
        b.collective(rank, world, "AllReduce", 4, "ncclFloat32", phase="grad", step=0)
    plan = b.build()
    actions = plan.programs[0]
    assert [type(a) for a in actions] == [GroupStart, Issue, Issue, GroupEnd, Issue]
    assert [op.group for op in plan.rank_ops(0)] == [0, 0, None]
    send, recv = plan.rank_ops(0)[:2]
    assert send.instance == plan.rank_ops(1)[1].instance  # rank 0's send is rank 1's recv


def test_the_moe_variants_move_the_same_kinds_of_ops():
    base = {"plugin": "unused", "home": "unused", "workload": "moe", "ranks": 4, "layers": 2}
    collective = build_plan(SimConfig(**base))
    grouped = build_plan(SimConfig(**base, moe_alltoall="grouped-p2p"))
    alltoalls = [op for op in collective.rank_ops(0) if op.func == "AlltoAll"]
    for rank in range(4):
        ops = grouped.rank_ops(rank)
        groups = defaultdict(list)
        for op in ops:
            if op.group is not None:
                groups[op.group].append(op)
        assert len(groups) == len(alltoalls)
        for members in groups.values():  # a Send and a Recv per peer, itself included
            assert [(o.func, o.peer) for o in members] == [
                (func, peer) for peer in range(4) for func in ("Send", "Recv")
            ]
        rest = [(op.func, op.count) for op in ops if op.group is None]
        assert rest == [
            (op.func, op.count) for op in collective.rank_ops(rank) if op.func != "AlltoAll"
        ]
    # what one rank sends another receives: the router's sizes agree pairwise
    for instance in (i for i in grouped.instances if i.func == "SendRecv"):
        sender, receiver = instance.participants
        counts = {
            op.func: op.count
            for rank in (sender, receiver)
            for op in grouped.rank_ops(rank)
            if op.instance == instance.id
        }
        assert counts["Send"] == counts["Recv"]


# NCCL 2.28's calls on the host thread for a user group of n ops (v5, every event enabled)
def grouped_host_sequence(n_ops: int) -> list[tuple[str, str]]:
    return (
        [("start", "GroupApi"), ("state", "23")]
        + [("start", "*Api"), ("stop", "*Api")] * n_ops
        + [("state", "24"), ("start", "KernelLaunch"), ("stop", "KernelLaunch"), ("start", "Group")]
        + [("start", "task")] * n_ops
        + [("stop", "task")] * n_ops
        + [("stop", "Group"), ("stop", "GroupApi")]
    )


@pytest.mark.parametrize("abi", [4, 5])
def test_grouped_ops_reach_the_plugin_as_nccl_issues_them(recording_plugin, tmp_path, abi):
    run = run_sim(recording_plugin, tmp_path, abi=abi, **MOE)
    assert run.summary["status"] == "completed", run.summary
    for truth in run.truths:
        assert all(op["completed"] for op in truth.ops)
        proc = run.calls[truth.rank]
        assert_well_formed(proc, abi=abi)
        tasks = proc.tasks()
        assert len(tasks) == len(truth.ops)
        groups = proc.started("Group")
        singles = [op for op in truth.ops if op["group"] is None]
        assert len(groups) == ALLTOALLS_PER_RANK + len(singles)  # one kernel plan each
        # every task of a group names the same Group event
        parent_key = "parent" if abi == 4 else "pgroup"
        by_truth_group = defaultdict(set)
        for op, task in zip(truth.ops, tasks, strict=True):
            by_truth_group[op["group"] if op["group"] is not None else -op["op_index"] - 1].add(
                task[parent_key]
            )
        assert all(len(parents) == 1 for parents in by_truth_group.values())
        assert len({next(iter(p)) for p in by_truth_group.values()}) == len(by_truth_group)
        if abi == 5:
            grouped_apis = [g for g in proc.started("GroupApi") if g.int("depth") == 2]
            assert len(grouped_apis) == ALLTOALLS_PER_RANK
            for group_api in grouped_apis:
                assert host_sequence(proc, group_api) == grouped_host_sequence(2 * RANKS)
            alone = [g for g in proc.started("GroupApi") if g.int("depth") == 1]
            assert len(alone) == len(singles)


def test_a_rank_stuck_inside_a_group_leaves_its_ops_unlaunched(recording_plugin, tmp_path):
    # ops of rank 1: 0 the barrier, 1..6 the first all-to-all group (3 peers), 7 inside the next
    run = run_sim(
        recording_plugin,
        tmp_path,
        faults=(parse_fault("skip:rank=1,op=8"),),
        hang_hold_s=0.5,
        **MOE,
    )
    assert (run.summary["status"], run.summary["abort_reason"]) == ("aborted", "hang")
    ops = run.truths[1].ops
    assert all(op["completed"] for op in ops[:7])
    assert ops[7]["group"] == 1 and not ops[7]["completed"] and ops[7]["host_start_ns"] is None
    assert len(run.calls[1].tasks()) == 7, "the group never ended, so nothing was launched"


# ---- through the real Profiler ----


def run_group_scenario(scenario: str, build: str, home: Path, abi: int) -> dict:
    """One tests/group_scenarios.py scenario in a fresh interpreter: op -> group id."""
    b = builds()[build]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
        "COMMINSIGHT_HOME": str(home),
        "COMMINSIGHT_AGENT_AUTOSTART": "0",
        "COMMINSIGHT_PROFILER_COMM_SLOTS": "2",
        "PYTHONPATH": str(ROOT / "tests"),
        "SCENARIO_ABI": str(abi),
        **b.env,
    }
    script = ROOT / "tests" / "group_scenarios.py"
    proc = subprocess.run(
        [sys.executable, str(script), scenario, str(b.path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"{scenario} on {build}: {proc.stderr[-4000:]}"
    assert "WARNING: ThreadSanitizer" not in proc.stderr, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("build", ["plain", "tsan"])
@pytest.mark.parametrize("abi", [5, 6])
def test_a_group_spans_its_plans_on_the_thread_that_began_it(build, abi, tmp_path):
    ids = run_group_scenario("v5_groups", build, tmp_path, abi)
    assert ids["a/0"] == ids["b/0"] == 1, "one group over two communicators; ids start at 1"
    lone, callback, after_untracked = ids["a/1"], ids["a/2"], ids["a/4"]
    assert ids["a/3"] == callback, "a plan from another thread is still one group"
    assert len({ids["a/0"], lone, callback, after_untracked}) == 4
    assert 0 not in (lone, callback, after_untracked)
    assert ids["a/5"] == 0, "a task naming no group: unknown"


def test_abi_v4_groups_are_its_group_events(tmp_path):
    ids = run_group_scenario("v4_groups", "plain", tmp_path, 4)
    assert ids["a/0"] == ids["a/1"] >= 1
    assert ids["a/2"] not in (0, ids["a/0"])


def test_ops_of_one_group_share_an_id_in_the_logs(grouped):
    for rank in range(RANKS):
        by_truth_group = defaultdict(set)
        alone = []
        for op, line in grouped.ops_with_lines(rank):
            assert line.group_id is not None and line.group_id > 0, line
            if op["group"] is None:
                alone.append(line.group_id)
            else:
                by_truth_group[op["group"]].add(line.group_id)
        assert len(by_truth_group) == ALLTOALLS_PER_RANK  # one group per all-to-all
        assert all(len(ids) == 1 for ids in by_truth_group.values())
        grouped_ids = [next(iter(ids)) for ids in by_truth_group.values()]
        assert len(set(grouped_ids)) == len(grouped_ids), "different groups, different ids"
        assert len(set(alone)) == len(alone), "an op alone has a group of its own"
        assert not set(alone) & set(grouped_ids)
        members = Counter(
            line.group_id for op, line in grouped.ops_with_lines(rank) if op["group"] is not None
        )
        assert set(members.values()) == {2 * RANKS}  # a Send and a Recv per peer


def test_the_shm_ring_carries_the_same_ids(grouped):
    for rank in range(RANKS):
        by_ring_seq = {line.ring_seq: line.group_id for line in grouped.logs[rank]}
        records = grouped.shm[rank]
        assert len(records) == len(by_ring_seq)
        for record in records:
            assert int(record["group_id"]) == by_ring_seq[int(record["seq"])]
        p2p = records[records["kind"] == shm_v1.RecordKind.P2P]
        assert len(set(p2p["group_id"].tolist())) == ALLTOALLS_PER_RANK


def test_the_engine_inputs_carry_the_ids(grouped):
    gpu_logs, problems = read_gpu_logs(grouped.home / "inspector_logs")
    assert not problems and len(gpu_logs) == RANKS
    seen = 0
    for gpu_log in gpu_logs:
        batches = list(gpu_log.batches())
        ring_seq = np.concatenate([b["ring_seq"] for b in batches])
        group_id = np.concatenate([b["group_id"] for b in batches])
        rank = gpu_log.identity.global_rank  # known once its segments were read
        want = {line.ring_seq: line.group_id for line in grouped.logs[rank]}
        assert dict(zip(ring_seq.tolist(), group_id.tolist(), strict=True)) == want
        assert batches[0].op(0).group_id == want[int(batches[0]["ring_seq"][0])]
        seen += 1
    assert seen == RANKS
    for records in grouped.shm.values():
        batch = engine_batch(records, {}, 0, 0, CommTable(), SegmentTable())
        assert batch["group_id"].tolist() == records["group_id"].astype(np.int64).tolist()
        assert batch.op(len(batch) - 1).group_id == int(records["group_id"][-1])


def test_every_reading_of_a_line_gives_its_group_id(grouped):
    """The C scanner's writer-layout path, its JSON walker and the Python decoder agree."""
    for _, data in segment_data(grouped.home / "inspector_logs"):
        columns = {}
        for trusted in (True, False):
            rows, _ = native.scan(
                data, 0, native.InternTable(), native.InternTable(), trusted=trusted
            )
            columns[trusted] = rows["group_id"].tolist()
        assert columns[True] == columns[False]
        for line, group_id in zip(data.split(b"\n"), columns[True], strict=False):
            decoded = _DECODER.decode(line)
            if decoded.ci is None or decoded.ci.kind not in ("coll", "p2p", "c", "p"):
                continue
            compact = decoded.ci.kind in ("c", "p")
            assert group_id == (decoded.ci.gr if compact else decoded.ci.group_id) > 0
            assert _op(decoded, (0, 0), None).group_id == group_id


def test_a_line_without_a_group_reads_as_unknown(grouped):
    line = grouped.logs[0][0]
    raw = next(
        raw
        for _, data in segment_data(grouped.home / "inspector_logs")
        for raw in data.split(b"\n")
        if b'"group_id":' in raw or b'"gr":' in raw
    )
    # an older writer, or an unknown group
    without = raw.replace(b'"group_id":', b'"x":', 1).replace(b'"gr":', b'"x":', 1)
    for trusted in (True, False):
        rows, _ = native.scan(
            without + b"\n", 0, native.InternTable(), native.InternTable(), trusted=trusted
        )
        assert rows["group_id"].tolist() == [0]
    assert line.group_id > 0
    assert _op(_DECODER.decode(without), (0, 0), None).group_id == 0
