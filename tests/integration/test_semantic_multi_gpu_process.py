"""One process driving several GPUs (JAX, ncclCommInitAll): each of its ranks is its own GPU.

The simulated job runs through the real plugin with `ranks_per_process` ranks per OS process,
one thread per device as XLA runs them, and the simulated CUDA runtime loaded (the plugin
asks it for the device current at each communicator init). The logs are read offline: every
rank must come out as its own GPU (its own stream and identity) with exactly its true Steps.
Without a CUDA runtime the devices are unknown, and the process is reported, never merged
silently."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from profiler_builds import builds

from comminsight.log_segments import segments_in
from comminsight.semantic.log_input import read_gpu_logs
from comminsight.semantic.offline import recover_steps
from comminsight.semantic.process_gpus import split_process
from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.step_accuracy import ENV, score
from comminsight.sim.truth import read_ground_truth

# a minute or more of simulated jobs and Agents: scheduled first (conftest)
pytestmark = pytest.mark.slow

RANKS = 4
EVERY = 200  # ops between checkpoints: several per GPU, each costs an fsync
# (settings, time scale): the TP x DP job's micro-batches and Steps differ in idle time
# alone, so it runs slower, its gaps above a loaded machine's jitter (as in the accuracy suite)
WORKLOADS = {
    "ddp": (dict(workload="ddp", steps=4, grad_accum=2), 0.02),
    "tp_dp": (dict(workload="tp-dp", tp=2, steps=4, grad_accum=2), 0.1),
}


def simulate(home: Path, workload: str, ranks_per_process: int, **settings):
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(home),
        time_scale=WORKLOADS[workload][1],
        env=ENV + tuple(settings.pop("env", ())),
        ranks=RANKS,
        ranks_per_process=ranks_per_process,
        **{"cuda_runtime": "sim", **WORKLOADS[workload][0], **settings},
    )
    sim = run_simulation(config)
    assert not sim.errors, sim.errors
    return read_ground_truth(sim.run_dir), home / "inspector_logs"


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """simulate() for tests that only read the run: a job already run in this module with the
    same settings is handed out again instead of being run once more."""
    runs = {}

    def run(workload: str, ranks_per_process: int, **settings):
        key = (workload, ranks_per_process, tuple(sorted(settings.items())))
        if key not in runs:
            runs[key] = simulate(tmp_path_factory.mktemp("job"), *key[:2], **settings)
        return runs[key]

    return run


def assert_exact(truths, result) -> None:
    s = score(truths, result)
    assert s.exact_fraction == 1.0 and s.wrong == 0, s.first_wrong
    assert set(s.step_counts.values()) == {len(truths[0].records["step"])}, s.step_counts


@pytest.mark.parametrize("names", [True, False], ids=["names", "names_null"])
@pytest.mark.parametrize("ranks_per_process", [2, 4])
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_every_gpu_of_a_process_gets_exactly_its_own_steps(
    simulated, workload, ranks_per_process, names
):
    truths, logs = simulated(workload, ranks_per_process, comm_names=names)
    result = recover_steps(logs)
    assert result.problems == []
    assert sorted(g.gpu.global_rank for g in result.gpus) == list(range(RANKS))
    assert len({g.stream for g in result.gpus}) == RANKS
    assert_exact(truths, result)


def test_each_gpu_has_its_own_stream_and_identity(simulated):
    truths, logs = simulated("tp_dp", 2, comm_names=True)
    gpu_logs, problems = read_gpu_logs(logs)
    assert problems == []
    by_rank = {log.identity.global_rank: log for log in gpu_logs}
    assert sorted(by_rank) == list(range(RANKS))
    for truth in truths:
        run, log = truth.run, by_rank[truth.rank]
        process_stream = log.device.process_stream
        assert log.stream == f"{process_stream}.dev{run['cuda_device']}"
        assert Path(log.stream).name == log.stream  # a file name of its own
        assert log.identity.pid == run["pid"]
        assert log.identity.local_rank == run["local_rank"]
        assert log.identity.cuda_device == run["cuda_device"]
        # every op of the stream is the rank's own: its communicator ranks, all of them
        comm_ranks = {(c["comm_id"], c["rank"]) for c in truth.of("comm")}
        ops = list(log.ops())
        assert {(op.comm_id, op.comm_rank) for op in ops} == comm_ranks
        assert len(ops) == len(truth.ops)
    pids = {truth.run["pid"] for truth in truths}
    assert len(pids) == RANKS // 2  # two ranks per process, for real


def test_a_process_of_one_gpu_keeps_its_stream_and_learns_its_device(simulated):
    truths, logs = simulated("ddp", 1)
    gpu_logs, problems = read_gpu_logs(logs)
    assert problems == [] and len(gpu_logs) == RANKS
    for log in gpu_logs:
        assert log.device is None and not log.stream.endswith(tuple(f".dev{d}" for d in range(8)))
        truth = truths[log.identity.global_rank]
        assert log.identity.cuda_device == truth.run["cuda_device"] == truth.rank


def test_unknown_devices_and_several_communicators_are_reported_not_merged_silently(simulated):
    _, logs = simulated("tp_dp", 2, cuda_runtime="")
    gpu_logs, problems = read_gpu_logs(logs)
    assert len(gpu_logs) == RANKS // 2  # one stream per process: nothing tells its GPUs apart
    assert len(problems) == len(gpu_logs)
    for log in gpu_logs:
        (said,) = [p for p in problems if p.startswith(str(log.segments[0]))]
        assert "device" in said and "cannot be told" in said and "one stream" in said


def test_unknown_devices_of_a_lone_communicator_each_rank_is_a_gpu(simulated):
    truths, logs = simulated("ddp", 2, cuda_runtime="")
    result = recover_steps(logs)
    assert len(result.problems) == RANKS // 2
    assert all("each rank of its only communicator is one GPU" in p for p in result.problems)
    assert sorted(g.stream.rsplit(".", 1)[1] for g in result.gpus) == [
        f"rank{r}" for r in range(RANKS)
    ]
    assert_exact(truths, result)


class Interrupted(Exception):
    pass


def test_each_gpu_resumes_from_its_own_checkpointed_position(tmp_path):
    """Small segments, so that a GPU stops mid-process; every interruption point resumes to
    the same bytes as a run never interrupted."""
    small = (("COMMINSIGHT_PROFILER_LOG_SEGMENT_BYTES", "65536"),)
    truths, logs = simulate(tmp_path / "home", "tp_dp", 2, env=small)
    reference = tmp_path / "reference"
    result = recover_steps(logs, out_dir=reference, checkpoint_every_ops=EVERY)
    assert result.problems == []
    assert_exact(truths, result)
    expected = {p.name: p.read_bytes() for p in reference.glob("*.jsonl")}
    assert len(expected) == RANKS and all(expected.values())
    assert len(segments_in(logs)) > 4 * RANKS  # several segments per process

    batches = sum(1 for _ in _counting(logs))
    for stop_after in (batches // 3, batches * 3 // 4):
        out = tmp_path / f"stopped-{stop_after}"
        seen = 0

        def stop(_ops, stop_after=stop_after):
            nonlocal seen
            seen += 1
            if seen == stop_after:
                raise Interrupted()

        with pytest.raises(Interrupted):
            recover_steps(logs, out_dir=out, checkpoint_every_ops=EVERY, on_ops=stop)
        checkpoint = json.loads((out / "engine.checkpoint.json").read_text())
        # a GPU stopped inside a segment its process's other GPU's ops interleave with
        assert any(
            g["output"]["file"].endswith(".partial") and g["input"]["byte_offset"] > 0
            for g in checkpoint["gpus"]
        ), checkpoint["gpus"]
        again = recover_steps(logs, out_dir=out, checkpoint_every_ops=EVERY)
        assert again.resumed > 0
        assert {p.name: p.read_bytes() for p in out.glob("*.jsonl")} == expected
        shutil.rmtree(out)


def _counting(logs: Path):
    """Every batch recover_steps feeds (on_ops is called once per batch)."""
    gpu_logs, _ = read_gpu_logs(logs)
    for log in gpu_logs:
        yield from log.batches()


def _segment(path: Path, members: list[dict], lines: list[dict] = ()) -> Path:
    start = {
        "ci": {
            "kind": "segment_start",
            "schema_version": 1,
            "segment_index": 0,
            "process": {"host": "h", "pid": 7, "start_real_ns": 1},
            "clock": {"mono_ns": 1, "real_ns": 1},
            "communicators": members,
            "next_ring_seq": 1,
        }
    }
    compact = {"separators": (",", ":")}  # as the Profiler writes
    path.write_text("".join(json.dumps(x, **compact) + "\n" for x in [start, *lines]))
    return path


def _member(comm_id: str, rank: int, device: int | None, nranks: int = 4) -> dict:
    m = {"comm_id": comm_id, "comm_rank": rank, "nranks": nranks, "name_source": "none"}
    m.update(nnodes=1, pid=7, host="h")
    return m | ({} if device is None else {"cuda_device": device})


def test_devices_that_contradict_nccl_are_not_trusted(tmp_path):
    # two ranks of one communicator on one device: NCCL refuses that, so the record is wrong
    seg = _segment(
        tmp_path / "ci-h-7-1-000000.jsonl.partial",
        [_member("00000000000000aa", 0, 0), _member("00000000000000aa", 1, 0)],
    )
    split = split_process([seg])
    assert not split.split and "several ranks on device 0" in split.problems[0]


def test_devices_from_comm_init_lines_split_communicators_created_later(tmp_path):
    init = {
        "ci": {
            "kind": "comm_init",
            "schema_version": 1,
            "ring_seq": 3,
            "comm": _member("00000000000000bb", 1, 1, nranks=2),
            "profiler_abi": "v5",
            "init_mono_ns": 2,
            "init_real_ns": 2,
        }
    }
    seg = _segment(
        tmp_path / "ci-h-7-1-000000.jsonl.partial",
        [_member("00000000000000aa", 0, 0, nranks=8), _member("00000000000000aa", 1, 1, nranks=8)],
        [init],
    )
    split = split_process([seg])
    assert split.problems == [] and [g.suffix for g in split.gpus] == [".dev0", ".dev1"]
    dev1 = split.gpus[1]
    assert dev1.members == {("00000000000000aa", 1), ("00000000000000bb", 1)}
    assert dev1.global_rank == 1  # its rank in the widest communicator
