"""A reading resumed from a checkpoint's position inside a segment places the ops after it as
a reading of the whole segment does. The GPU clock's offset to the host's is taken over the
segment's kernel-timed ops (op_times): when the op that sets it lies before the position, a
resumed reading that computed it over the rest of the segment alone put every later op's
start and end elsewhere, and a resumed run's Steps were not the uninterrupted run's bytes."""

from __future__ import annotations

import numpy as np
import pytest

from comminsight.agent.receivers.inspector_lines import ProcessLines
from comminsight.semantic.log_input import GpuLog
from comminsight.shm_reader import COMM, HEADER, SLOT
from comminsight_gen.abi import shm_v1

START_MONO, START_REAL = 1_000, 1_796_000_000_000_000_000
GPU_AHEAD = 5_000_000_000  # the GPU clock reads this much ahead of the host's


def lines_maker(compact: bool) -> ProcessLines:
    header = np.zeros(1, HEADER)[0]
    header["hostname"], header["pid"] = b"vm", 7
    header["start_mono_ns"], header["start_real_ns"] = START_MONO, START_REAL
    header["plugin_version"] = 0x000100
    comms = np.zeros(1, COMM)
    comms[0]["state"] = shm_v1.CommState.ACTIVE
    comms[0]["comm_id"], comms[0]["nranks"], comms[0]["nnodes"] = 0xAB, 2, 1
    return ProcessLines(header, comms, compact)


def op_line(lines: ProcessLines, seq: int, seen_late_ns: int) -> bytes:
    """An all-reduce the host saw complete `seen_late_ns` after the GPU finished it."""
    s = np.zeros(1, SLOT)[0]
    s["seq"], s["kind"], s["func"] = seq, shm_v1.RecordKind.COLL, shm_v1.Func.ALL_REDUCE
    s["comm_id"], s["nranks"], s["op_seq"], s["comm_op_index"] = 0xAB, 2, seq, seq
    s["count"], s["bytes"] = 256, 1024
    issue = 1_000_000_000 + seq * 10_000_000
    s["host_start_mono_ns"], s["host_stop_mono_ns"] = issue, issue + 5_000
    gpu_end = issue + 2_000_000
    s["gpu_start_ticks"], s["gpu_end_ticks"] = GPU_AHEAD + issue + 1_000_000, GPU_AHEAD + gpu_end
    s["complete_mono_ns"] = gpu_end + seen_late_ns
    s["timing_source"] = shm_v1.TimingSource.KERNEL_GPU
    s["n_channels"] = s["kernel_ch_count"] = 1
    return lines.record(s, seq, 0)


@pytest.mark.parametrize("compact", [True, False], ids=["compact", "inspector"])
def test_a_resumed_reading_places_ops_as_the_whole_segments_reading(tmp_path, compact):
    lines = lines_maker(compact)
    start = lines.segment_start(0, 1, START_MONO, START_REAL)
    # the first op's completion was seen at once: it alone sets the offset to GPU_AHEAD
    body = [op_line(lines, seq, 0 if seq == 1 else 3_000_000) for seq in range(1, 9)]
    segment = tmp_path / "ci-vm-7-1000-000000.jsonl.partial"
    segment.write_bytes(start + b"".join(body))
    log = GpuLog("ci-vm-7-1000", [segment])
    whole = list(log.ops())
    assert len(whole) == 8
    resumed = list(GpuLog("ci-vm-7-1000", [segment]).ops(whole[4].position.resume_here()))
    assert [op.ring_seq for op in resumed] == [5, 6, 7, 8]
    for got, want in zip(resumed, whole[4:], strict=True):
        assert (got.start_ns, got.end_ns, got.duration_ns) == (
            want.start_ns,
            want.end_ns,
            want.duration_ns,
        )
    # and the offset is the GPU's lead: each op ends on the host clock where the GPU ended it
    assert whole[5].end_ns == 1_000_000_000 + 6 * 10_000_000 + 2_000_000
