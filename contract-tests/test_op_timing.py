"""The Profiler's log writer (C, profiler/src/op_timing.h) and the Agent with the live Semantic
Engine (numpy, comminsight/slot_timing.py) take the same duration and bus bandwidth from the
same op records, bit for bit: every timing source, clocks that run backwards, a call the host
never saw stop (swept at finalize), every bandwidth formula and degenerate communicator sizes;
and the lines the Agent writes for a dead process's records (core/inspector_lines.py) carry
what the writer prints for them."""

from __future__ import annotations

import itertools
import subprocess

import numpy as np
import pytest

from comminsight.agent.receivers.inspector_lines import timings as recovered_timings
from comminsight.slot_timing import bus_bandwidth_gbs, durations_ns, durations_s
from comminsight_gen.abi import shm_v1

from contract_helpers import ROOT

T = shm_v1.TimingSource
F = shm_v1.Func

# (timing source, host start, host stop, complete, GPU start, GPU end)
TIMES = [
    (T.KERNEL_GPU, 1_000, 2_000, 9_000, 50_000, 61_234),
    (T.KERNEL_GPU, 1_000, 2_000, 9_000, 61_234, 50_000),  # stop tick before start
    (T.KERNEL_CPU, 1_000, 2_000, 7_777, 0, 0),
    (T.KERNEL_CPU, 9_000, 2_000, 7_777, 0, 0),  # completion seen before the enqueue
    (T.COLLECTIVE_CPU, 1_000, 5_500, 5_500, 0, 0),
    (T.COLLECTIVE_CPU, 1_000, 0, 123_456_789, 0, 0),  # swept: no host stop, a late completion
    (T.COLLECTIVE_CPU, 3_000, 2_000, 3_000, 0, 0),
    (T.NONE, 1_000, 2_000, 3_000, 4_000, 5_000),
    (T.KERNEL_GPU, 0, 0, 0, 2**63, 2**64 - 1),  # the largest span
]
FUNCS = [F.ALL_REDUCE, F.ALL_GATHER, F.REDUCE_SCATTER, F.ALL_TO_ALL, F.BROADCAST, F.SEND, F.RECV]
RANKS = [-5, 0, 1, 2, 3, 8, 1_000_003]
BYTES = [0, 1, 8, 1 << 20, 3 * (1 << 30) + 7, 2**64 - 1]


def records() -> np.ndarray:
    cases = list(itertools.product(TIMES, FUNCS, RANKS, BYTES))
    out = np.zeros(len(cases), shm_v1.OP_SLOT_DTYPE)
    for r, (times, func, nranks, size) in zip(out, cases, strict=True):
        source, start, stop, complete, g0, g1 = times
        r["kind"] = shm_v1.RecordKind.COLL
        r["timing_source"], r["func"], r["nranks"], r["bytes"] = source, func, nranks, size
        r["host_start_mono_ns"], r["host_stop_mono_ns"], r["complete_mono_ns"] = (
            start,
            stop,
            complete,
        )
        r["gpu_start_ticks"], r["gpu_end_ticks"] = g0, g1
    return out


@pytest.fixture(scope="module")
def written(compiler, tmp_path_factory):
    """What the log writer's definition makes of records(): (ns, algbw, busbw) per record."""
    exe = compiler.build(
        "op_timing_dump",
        [ROOT / "contract-tests/c/op_timing_dump.c"],
        [f"-I{ROOT / 'profiler/src'}"],
    )
    path = tmp_path_factory.mktemp("op-timing") / "slots.bin"
    path.write_bytes(records().tobytes())
    lines = subprocess.run([str(exe), str(path)], capture_output=True, text=True, check=True)
    rows = [line.split() for line in lines.stdout.splitlines()]
    return [(int(ns), float(alg), float(bus)) for ns, alg, bus in rows]


def test_every_record_is_read_by_both(written):
    assert len(written) == len(records())


def test_durations_agree(written):
    ns = durations_ns(records())
    assert [int(x) for x in ns] == [w[0] for w in written]
    assert {w[0] for w in written} >= {0, 11_234, 6_777, 4_500, 2**63 - 1}, "cases unexercised"


def test_bus_bandwidths_agree_bit_for_bit(written):
    recs = records()
    busbw = bus_bandwidth_gbs(recs, durations_s(recs))
    differ = [
        (i, float(b), w[2])
        for i, (b, w) in enumerate(zip(busbw, written, strict=True))
        if b != w[2]
    ]
    assert not differ, differ[:5]
    assert any(w[2] > 0 for w in written) and any(w[2] == 0 for w in written)


def test_recovered_lines_print_what_the_writer_prints(written):
    """exec_us in whole microseconds, the bandwidths as the writer's %.6f prints them."""
    recs = records()
    one_by_one = [recovered_timings(recs[i : i + 1])[0] for i in range(len(recs))]
    assert recovered_timings(recs) == one_by_one
    differ = [
        (i, got, want)
        for i, (got, (ns, alg, bus)) in enumerate(zip(one_by_one, written, strict=True))
        if got != (want := (ns // 1000, round(alg, 6), round(bus, 6)))
    ]
    assert not differ, differ[:5]
