"""NVIDIA Inspector's ends are the times its dump thread wrote the lines: the step from one
dump to the next is the dump interval, wherever in the op stream it falls, and is no idle
time of the GPU. The inputs are built here, op by op, with their times given, so what the
engine sees does not depend on how busy the machine is."""

from __future__ import annotations

import json
from itertools import count

import numpy as np
import pytest

from comminsight.semantic.dump_times import dump_resolution
from comminsight.semantic.offline import recover_steps

US = 1_000  # ns
OP_NS = 100 * US  # each gather or reduce-scatter runs this long on the GPU
COMPUTE_NS = 50 * US  # the host computes between two ops
STEP_GAP_NS = 2_000 * US  # optimizer and data loading between Steps
LAYERS, STEPS, WARMUP = 6, 6, 1
SHARD_BYTES = 41_600_000


def tp_ops() -> list[tuple[str, int, int | None]]:
    """One rank's ops as tensor parallelism alone issues them, four micro-batches a Step: the
    same all-reduces in every micro-batch and no op of the optimizer's own, so only the
    GPU's idle time before each Step tells Steps from micro-batches."""
    ops: list[tuple[str, int, int | None]] = [("AllReduce", 4, None)]
    for step in range(WARMUP + STEPS):
        for _ in range(4):
            ops += [("AllReduce", 8_388_608, step), ("AllReduce", 2_097_152, step)] * 2
    return ops


def fsdp_ops() -> list[tuple[str, int, int | None]]:
    """One rank's ops as FSDP with two micro-batches a Step issues them: (function, bytes,
    Step or None for the start-up's barrier), in order."""
    ops: list[tuple[str, int, int | None]] = [("AllReduce", 4, None)]
    for step in range(WARMUP + STEPS):
        for micro in range(2):
            ops += [("AllGather", SHARD_BYTES, step)] * LAYERS
            for _ in range(LAYERS):
                ops.append(("AllGather", SHARD_BYTES, step))
                if micro == 1:
                    ops.append(("ReduceScatter", 2 * SHARD_BYTES, step))
    return ops


def true_ends(ops) -> list[int]:
    """When each op ended on the GPU (ns from the first op's start): back to back with the
    host's compute between them, the optimizer and the next batch between Steps."""
    t, ends, step_before = 0, [], None
    for _, _, step in ops:
        if step != step_before and step_before is not None:
            t += STEP_GAP_NS
        step_before = step
        t += COMPUTE_NS + OP_NS
        ends.append(t)
    return ends


def dumped_at(ends: list[int], interval_ns: int, phase_ns: int) -> list[int]:
    """The time each op's line was written (µs) by a thread that wakes every interval and
    writes what completed since, a microsecond a line."""
    written, line_in_dump, last_tick = [], 0, None
    for end in ends:
        tick = -(-(end + phase_ns) // interval_ns) * interval_ns
        line_in_dump = line_in_dump + 1 if tick == last_tick else 0
        last_tick = tick
        written.append((tick + 1_700_000_000_000_000_000) // US + line_in_dump)
    return written


def write_nvidia_logs(
    directory, interval_ns: int, phase_ns: int = 0, verbose: bool = False, ops=None
) -> list[tuple[tuple[str, int], tuple[str, int]]]:
    """Both ranks' NVIDIA Inspector files of `ops` (FSDP's by default); returns each Step's
    first and last op as (function, sequence number)."""
    ops = fsdp_ops() if ops is None else ops
    ends = true_ends(ops)
    dumps = dumped_at(ends, interval_ns, phase_ns)
    seqs: dict[str, count] = {}
    numbered = [(f, size, step, next(seqs.setdefault(f, count()))) for f, size, step in ops]
    for rank in range(2):
        lines = []
        for (func, size, _, seq), end, dump in zip(numbered, ends, dumps, strict=True):
            perf = {
                "coll": func,
                "coll_sn": seq,
                "coll_msg_size_bytes": size,
                "coll_exec_time_us": OP_NS // US,
                "coll_timing_source": "kernel_gpu",
                "coll_algobw_gbs": 400.0,
                "coll_busbw_gbs": 200.0,
            }
            if verbose:  # NVIDIA's verbose mode: the op's own stop time
                perf["event_trace_ts"] = {
                    "coll_start_ts": (end - OP_NS) // US,
                    "coll_stop_ts": (end + 1_700_000_000_000_000_000) // US,
                }
            lines.append(
                json.dumps(
                    {
                        "header": {"id": "0x5eed", "rank": rank, "n_ranks": 2, "nnodes": 1},
                        "metadata": {
                            "inspector_output_format_version": "v4.0",
                            "git_rev": "test",
                            "rec_mechanism": "nccl_profiler_interface",
                            "dump_timestamp_us": dump,
                            "hostname": "node0",
                            "pid": 100 + rank,
                        },
                        "coll_perf": perf,
                    }
                )
            )
        (directory / f"node0-pid{100 + rank}.log").write_text("\n".join(lines) + "\n")
    steps: dict[int, list[tuple[str, int]]] = {}
    for func, _, step, seq in numbered:
        if step is not None:
            steps.setdefault(step, []).append((func, seq))
    return [(s[0], s[-1]) for _, s in sorted(steps.items())]


def recovered(directory) -> list[list[tuple[tuple[str, int], tuple[str, int]]]]:
    result = recover_steps(directory)
    assert result.problems == []
    return [
        [((s.first_op.func, s.first_op.seq), (s.last_op.func, s.last_op.seq)) for s in g.summaries]
        for g in result.gpus
    ]


STEP_NS = true_ends(fsdp_ops())[-1] // (WARMUP + STEPS)


@pytest.mark.parametrize(
    "interval_ns, phase_ns",
    [
        # a dump every few Steps: dumps begin at the same op of the cycle every few Steps, the
        # beat that took them for long idle gaps around Steps of several repetitions (Steps
        # 1-5 of a simulated FSDP run once came out as one)
        (2 * STEP_NS, 0),
        (5 * STEP_NS // 2, 0),
        (3 * STEP_NS, 0),
        (7 * STEP_NS // 2, STEP_NS // 7),
        (5 * STEP_NS, STEP_NS // 3),
        # a dump every few milliseconds, inside the Steps
        (2 * STEP_NS // 3, 0),
    ],
    ids=["2-steps", "2.5-steps", "3-steps", "3.5-steps", "5-steps", "2/3-step"],
)
def test_the_dump_interval_is_not_taken_for_idle_time(tmp_path, interval_ns, phase_ns):
    expected = write_nvidia_logs(tmp_path, interval_ns, phase_ns)
    assert recovered(tmp_path) == [expected, expected]


@pytest.mark.parametrize("interval_ns", [100 * US, 500 * US])
def test_idle_time_beyond_the_dump_interval_still_places_steps(tmp_path, interval_ns):
    # dumps every few ops, Steps 2 ms apart: the idle time before each Step is seen
    expected = write_nvidia_logs(tmp_path, interval_ns, ops=tp_ops())
    assert recovered(tmp_path) == [expected, expected]


def test_a_dump_written_with_pauses_is_still_one_dump():
    # three dumps 200 ms apart (the last one sooner: the thread was stopped), and more
    # pauses inside the dumps than there are steps between them: small ops (1 µs) written
    # 50 µs to 2 ms after the line before, as a writer kept from the CPU writes them
    end, duration = [], []
    for dump, lines in enumerate((40, 40, 40)):
        t = dump * 200_000 * US - (170_000 * US if dump == 2 else 0)
        for line in range(lines):
            pause = {5: 50, 9: 300, 20: 2_000, 30: 900}.get(line, 1) * US
            t += pause
            end.append(t)
            duration.append(US if pause > US else OP_NS)
    ends = np.array(end, np.int64)
    resolution = dump_resolution(ends - np.array(duration, np.int64), ends)
    assert resolution > 200_000 * US


def test_measured_ends_keep_every_gap():
    ends = np.array(true_ends(fsdp_ops()), np.int64)
    assert dump_resolution(ends - OP_NS, ends) == 0


def test_verbose_stop_times_give_the_same_steps(tmp_path):
    expected = write_nvidia_logs(tmp_path, 5 * STEP_NS, verbose=True)
    assert recovered(tmp_path) == [expected, expected]
