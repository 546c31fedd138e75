"""One process driving several GPUs, live: the Agent splits its ring by communicator member.

A process of JAX's single-controller runtime or one built on ncclCommInitAll publishes one SHM
region for all its GPUs. The Agent must hand each GPU's ops to an engine of its own (as the
offline reader does), or the live Steps are those of one merged sequence. The simulated job
runs through the real plugin into a real Agent; every GPU's live summaries are scored against
the simulator's ground truth."""

from __future__ import annotations

import msgspec
import numpy as np
from live_agent import LiveAgent
from profiler_builds import builds
from waiting import wait_until

from comminsight.agent.receivers.producer_gpus import ProcessGpus
from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.step_accuracy import ENV, op_identity
from comminsight.sim.truth import read_ground_truth
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.step_summary_v1 import StepSummary

RANKS = 4


def steps_of(path) -> list[StepSummary]:
    return [msgspec.json.decode(line, type=StepSummary) for line in path.read_bytes().splitlines()]


def boundaries(summaries: list[StepSummary]) -> list[tuple]:
    return [
        (
            (s.first_op.comm_id, s.first_op.func, s.first_op.seq),
            (s.last_op.comm_id, s.last_op.func, s.last_op.seq),
        )
        for s in summaries
    ]


def test_each_gpu_of_a_process_gets_its_own_live_steps(tmp_path):
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(tmp_path),
        workload="tp-dp",
        ranks=RANKS,
        tp=2,
        steps=6,
        grad_accum=2,
        ranks_per_process=2,
        cuda_runtime="sim",
        time_scale=0.1,
        env=ENV,
    )
    step_dir = tmp_path / "semantics" / "step"
    with LiveAgent(tmp_path):
        result = run_simulation(config)
        assert not result.errors, result.errors
        wait_until(
            lambda: len(list(step_dir.glob("live-*.jsonl"))) >= RANKS,
            120,
            lambda: f"every GPU's sealed summaries: {sorted(p.name for p in step_dir.iterdir())}",
        )
    truths = read_ground_truth(result.run_dir)
    assert len({t.run["pid"] for t in truths}) == RANKS // 2  # two GPUs a process, for real
    files = sorted(step_dir.glob("live-*.jsonl"))
    assert len(files) == RANKS, [p.name for p in files]
    seen = set()
    for path in files:
        summaries = steps_of(path)
        truth = truths[summaries[0].global_rank]
        run = truth.run
        # one file per GPU, named as the offline reader names the GPU's stream
        assert path.name.endswith(f"-{run['pid']}-{path.name.split('-')[-1]}")
        assert path.name.endswith(f".dev{run['cuda_device']}.jsonl"), path.name
        assert {(s.pid, s.cuda_device, s.local_rank) for s in summaries} == {
            (run["pid"], run["cuda_device"], run["local_rank"])
        }
        ids = op_identity(truth)
        expected = [(ids[s["first_op"]], ids[s["last_op"]]) for s in truth.records["step"]]
        assert boundaries(summaries) == expected, path.name
        assert [s.step_index for s in summaries] == list(range(len(expected)))
        seen.add(truth.rank)
    assert seen == set(range(RANKS))


def _rows(members: list[tuple[int, int, int, int]]) -> np.ndarray:
    """Communicator table rows: (comm id, rank, nranks, device)."""
    rows = np.zeros(len(members), shm_v1.COMM_ENTRY_DTYPE)
    for i, (comm_id, rank, nranks, device) in enumerate(members):
        rows[i]["state"] = shm_v1.CommState.ACTIVE
        rows[i]["comm_id"], rows[i]["rank"], rows[i]["nranks"] = comm_id, rank, nranks
        rows[i]["cuda_device"], rows[i]["init_mono_ns"] = device, i + 1
    return rows


def _records(keys: list[tuple[int, int]]) -> np.ndarray:
    records = np.zeros(len(keys), shm_v1.OP_SLOT_DTYPE)
    for i, (comm_id, rank) in enumerate(keys):
        records[i]["seq"], records[i]["comm_id"], records[i]["rank"] = i, comm_id, rank
    return records


def test_records_go_to_the_gpu_of_their_member_in_ring_order():
    world, tp = 0xA1, 0xFFFF_0000_0000_00B2  # an id with its top bit set: unsigned in the ring
    gpus = ProcessGpus("p.shm")
    assert gpus.update(_rows([(world, 0, 4, 0), (world, 1, 4, 1), (tp, 0, 2, 0), (tp, 1, 2, 1)]))
    assert gpus.split and [g.suffix for g in gpus.gpus] == [".dev0", ".dev1"]
    keys = [(world, 0), (tp, 1), (world, 1), (tp, 0), (0xDEAD, 0), (world, 0)]
    parts = {g.suffix: list(r["seq"]) for g, r in gpus.partition(_records(keys))}
    assert parts == {".dev0": [0, 3, 5], ".dev1": [1, 2]}
    assert gpus.unattributed == 1  # a member the table never showed: on no GPU
    # the same table again: nothing to decide; a communicator created later joins its device
    assert not gpus.update(_rows([(world, 0, 4, 0), (world, 1, 4, 1)]))
    later = _rows([(0xC3, 1, 2, 1)])
    later["init_mono_ns"] = 10
    assert gpus.update(later)
    parts = {g.suffix: list(r["seq"]) for g, r in gpus.partition(_records([(0xC3, 1)]))}
    assert parts == {".dev1": [0]}


def test_a_process_of_one_gpu_is_one_stream_and_unknown_devices_are_named():
    one = ProcessGpus("p.shm")
    one.update(_rows([(0xA1, 3, 8, 3), (0xB2, 1, 2, 3)]))
    assert not one.split and one.problems == []
    records = _records([(0xA1, 3), (0xB2, 1)])
    ((gpu, whole),) = one.partition(records)
    assert gpu.members is None and len(whole) == 2
    unknown = ProcessGpus("q.shm")
    unknown.update(_rows([(0xA1, 0, 4, -1), (0xA1, 1, 4, -1), (0xB2, 0, 2, -1), (0xB2, 1, 2, -1)]))
    assert not unknown.split  # which members share a GPU cannot be told: one stream, named
    (problem,) = unknown.problems
    assert problem.startswith("q.shm: ") and "cannot be told" in problem
