"""GPU timing scenarios for the Profiler plugin, each run in a fresh process.

    python tests/gpu_timing_scenarios.py SCENARIO PLUGIN.so

Each op goes the way NCCL 2.28-2.32 takes it: NCCL reads the activation mask for the call's
task (the start of taskAppend), then gives its CollApi event, then the Coll event, and
KernelCh events only where that mask had the KernelCh bit. So what the plugin writes at an
API event is the next call's mask. Each scenario prints one JSON object: what the SHM ring
and header show.
"""

from __future__ import annotations

import json
import os
import sys
import time

from plugin_scenarios import COLL, DEADLINE_S, Driver, region, settled, snapshot
from waiting import wait_until

from comminsight.shm_reader import RingCursor
from comminsight_gen.abi import shm_v1
from comminsight_gen.abi.nccl_profiler_v7 import EventType as EventTypeV7

KERNEL_CH = 0x40


def api(d: Driver, ctx, func: str = "AllReduce", count: int = 1024, **v7):
    """The mask the call's task reads, as NCCL reads it; then the op's CollApi event."""
    task_mask = int(d.mask[0])
    handle = d.abi.start_coll_api(ctx, None, func, count, "ncclFloat32", 0, 0x77, **v7)
    d.abi.stop(handle)
    return handle, task_mask


def task(d: Driver, ctx, handle, task_mask: int, seq: int, count: int = 1024, **fields) -> bool:
    """The op's Coll event and, where its mask asked for them, its channels; whether timed."""
    coll = {**COLL, "seq": seq, "count": count, **fields}
    op = d.abi.start_coll(ctx, handle, None, 0, coll)
    d.abi.stop(op)
    timed = bool(task_mask & KERNEL_CH)
    if timed:
        d.channels(ctx, op, coll["n_channels"], base=1_000_000 * (seq + 1))
    return timed


def op(d: Driver, ctx, seq: int, count: int = 1024, **fields) -> bool:
    handle, task_mask = api(d, ctx, count=count)
    return task(d, ctx, handle, task_mask, seq, count, **fields)


def header(r) -> dict:
    return {
        "gpu_timing": r.counter("gpu_timing"),
        "mask_overridden": r.counter("mask_overridden"),
        "overriding_event_mask": r.counter("overriding_event_mask"),
    }


def records() -> list[dict]:
    ring = RingCursor(region()).poll()
    return [
        {
            "comm": int(r["comm_id"]),
            "seq": int(r["op_seq"]),
            "count": int(r["count"]),
            "timing": int(r["timing_source"]),
            "flags": int(r["flags"]),
            "channels": int(r["kernel_ch_count"]),
            "user_tag": int(r["user_tag"]),
            "kernel_variant": bytes(r["kernel_variant"]).split(b"\0")[0].decode(),
        }
        for r in ring
        if r["kind"] in (shm_v1.RecordKind.COLL, shm_v1.RecordKind.P2P)
    ]


def sampled(d: Driver) -> dict:
    """Two shapes on one communicator (4 KiB and 4 MiB all-reduces), one in EVERY timed."""
    ctx = d.init(0xC1).context
    timed = [op(d, ctx, seq, count=1024 if seq % 3 else 1 << 20) for seq in range(12)]
    out = {"timed": timed, "records": records(), **header(settled(region()))}
    out["mask_after"] = int(d.mask[0])
    d.abi.finalize(ctx)
    return out


def read_mask(d: Driver) -> int:
    """The mask a call's task gets: NCCL reads it first, before the call's API event."""
    return int(d.mask[0])


def api_event(d: Driver, ctx, count: int = 1024):
    handle = d.abi.start_coll_api(ctx, None, "AllReduce", count, "ncclFloat32", 0, 0x77)
    d.abi.stop(handle)
    return handle


def untimed_mask_then_asked(d: Driver, a, b) -> int:
    """Leave NCCL's mask without KernelCh (b's second op of its shape), and return it as the
    task of a's next call reads it; then b's call of a new shape asks for timing before a's
    API event, which so finds KernelCh that a's task lacks."""
    op(d, b, 0)  # timed (the mask set at init); the first of its shape asks for the next
    op(d, b, 1)  # timed as asked; the second of its shape asks for none
    a_mask = read_mask(d)
    b_mask = read_mask(d)
    b_api = api_event(d, b, count=1 << 20)  # b's new shape asks for timing
    task(d, b, b_api, b_mask, 2, count=1 << 20)
    return a_mask


def decided_then_overwritten(d: Driver) -> dict:
    """Two communicators' calls interleave (two enqueuing threads): a's task read a mask
    without KernelCh, then b's call asked for timing before a's API event, where the plugin
    takes a's op for a timed one. It then waits for channels that never come, until a later
    op of its communicator starts on the GPU; it is recorded with host times, and nothing is
    left in flight."""
    a = d.init(0xC2).context
    b = d.init(0xC3).context
    a_mask = untimed_mask_then_asked(d, a, b)
    a_api = api_event(d, a)
    task(d, a, a_api, a_mask, 0)  # no channels come
    late_mask = read_mask(d)  # a's first op asked for timing: a new shape follows
    handle = api_event(d, a, count=1 << 22)
    late = task(d, a, handle, late_mask, 1, count=1 << 22)
    r = settled(settled(region()))
    out = {"a_asked": bool(a_mask & KERNEL_CH), "late_timed": late, "records": records()}
    out["in_flight"] = int(r.comms[0]["inflight_count"])
    d.abi.finalize(a)
    d.abi.finalize(b)
    return out


def overridden(d: Driver) -> dict:
    """An operator sets NCCL's mask (as ncclras CONTROL PROFILER_MASK does): it stays as set,
    every op is timed as it says, and the header reports it."""
    ctx = d.init(0xC4).context
    op(d, ctx, 0)
    theirs = 0x46 | 0x8  # KernelCh kept, ProxyOp added
    d.mask[0] = theirs
    timed = [op(d, ctx, seq) for seq in range(1, 9)]
    r = settled(region())
    out = {"timed": timed, "mask_after": int(d.mask[0]), "theirs": theirs, **header(r)}
    out["records"] = records()
    d.abi.finalize(ctx)
    return out


def all_ops(d: Driver) -> dict:
    """COMMINSIGHT_PROFILER_GPU_TIMING=all: every op's mask has KernelCh."""
    ctx = d.init(0xC5).context
    timed = [op(d, ctx, seq) for seq in range(6)]
    out = {"timed": timed, **header(settled(region()))}
    d.abi.finalize(ctx)
    return out


def v7_tags(d: Driver) -> dict:
    """ABI v7: a call's user tag, kernel variant and symmetric flag reach the record; a kernel
    phase gets no handle and is no unknown event."""
    ctx = d.init(0xC7).context
    variant = "AllReduce_Sum_f32_RING_LL_with_a_long_name"
    for seq, tag in enumerate((7, 7, 8, 0)):
        handle, task_mask = api(d, ctx, user_tag=tag)
        fields = {"user_tag": tag, "kernel_variant": variant, "sym_coll": seq == 1}
        task(d, ctx, handle, task_mask, seq, **fields)
    ffi = d.abi.ffi
    descr = ffi.new("ci_nccl_event_descr_v7_t *")
    descr.type = int(EventTypeV7.KERNEL_PHASE)
    phase = ffi.new("void **")
    rc = d.abi._plugin.startEvent(ctx, phase, descr)
    out = {"records": records(), "phase_rc": rc, "phase_handle": phase[0] != ffi.NULL}
    out["events_unknown"] = snapshot(settled(region()))["counters"]["events_unknown"]
    d.abi.finalize(ctx)
    return out


def kernel_ch_taken_out(d: Driver) -> dict:
    """Every op timed (the default), then an operator takes KernelCh out of NCCL's mask: the
    later ops get no channels, and none of them is left in flight."""
    ctx = d.init(0xC8).context
    op(d, ctx, 0)
    d.mask[0] = 0x06  # Coll|P2p
    timed = [op(d, ctx, seq) for seq in range(1, 6)]
    wait_until(lambda: len(records()) == 6, DEADLINE_S, "every op recorded")
    r = settled(region())
    out = {"timed": timed, "records": records(), "in_flight": int(r.comms[0]["inflight_count"])}
    out.update(header(r))
    d.abi.finalize(ctx)
    return out


def one_kernel_two_choices(d: Driver) -> dict:
    """X and Y are one NCCL group of one communicator, so one kernel. X's task read a mask
    without KernelCh and gets no channels, though the plugin took it for timed (another
    thread's call asked for timing in between); Y's channels start and the kernel runs on: X
    is not done while it runs (only a later group's kernel proves it)."""
    a = d.init(0xC9).context
    b = d.init(0xCA).context
    d.abi.start_group_api(a, 1)
    x_mask = untimed_mask_then_asked(d, a, b)
    x_api = api_event(d, a)  # X: the first of its shape, asks for the next call
    y_mask = read_mask(d)
    y_api = api_event(d, a, count=1 << 22)  # Y
    group = d.abi.start_group(a)
    x = d.abi.start_coll(a, x_api, group, 0, {**COLL, "seq": 0})
    y = d.abi.start_coll(a, y_api, group, 0, {**COLL, "seq": 1, "count": 1 << 22})
    d.abi.stop(x)
    d.abi.stop(y)
    for c in range(COLL["n_channels"]):  # Y's kernel starts, and does not end
        d.abi.start_kernel_ch(a, y, c, 5000 + c)
    r = settled(settled(settled(region())))
    out = {"x_asked": bool(x_mask & KERNEL_CH), "y_asked": bool(y_mask & KERNEL_CH)}
    out["recorded_on_a"] = [rec["count"] for rec in records() if rec["comm"] == 0xC9]
    out["in_flight"] = int(r.comms[0]["inflight_count"])
    d.abi.finalize(a)
    d.abi.finalize(b)
    return out


def due_survives_a_call_without_task(d: Driver) -> dict:
    """A communicator with no op timed for a period has its next op timed; a call that makes
    no task (a copy-engine collective, an empty one) does not use that up."""
    ctx = d.init(0xCB).context
    first = op(d, ctx, 0)  # timed: the mask set at init; the first of its shape asks next
    second = op(d, ctx, 1)  # timed as asked; asks for none (one in EVERY)
    r = region()
    beat = r.counter("heartbeat_count")  # a period (2 heartbeats here) passes with none timed
    wait_until(lambda: r.counter("heartbeat_count") >= beat + 6, DEADLINE_S, "heartbeats")
    api(d, ctx)  # a call that yields no task: asks for the next call, the sample still due
    api(d, ctx)  # another: asks again, as the sample is still due
    third = op(d, ctx, 2)
    out = {"timed": [first, second, third]}
    d.abi.finalize(ctx)
    return out


def timed_op_stuck_while_sampling(d: Driver) -> dict:
    """A timed op whose kernel never starts stays in flight, though the next op's choice took
    KernelCh out of NCCL's mask: while sampling, a mask without it says nothing for good."""
    ctx = d.init(0xCC).context
    op(d, ctx, 0)  # timed (the mask set at init), and the first of its shape asks for the next
    handle, task_mask = api(d, ctx)  # timed as asked; the second of its shape asks for none
    stuck = d.abi.start_coll(ctx, handle, None, 0, {**COLL, "seq": 1})
    d.abi.stop(stuck)  # enqueued; its kernel never starts
    later = op(d, ctx, 2)  # not timed, and the mask's bit stays out
    r = region()
    beat = r.counter("heartbeat_count")  # past the sweep's 2 s of quiet (50 ms heartbeats)
    wait_until(lambda: r.counter("heartbeat_count") >= beat + 60, DEADLINE_S, "heartbeats")
    out = {"asked": bool(task_mask & KERNEL_CH), "later": later, "mask": int(d.mask[0])}
    out["recorded_seqs"] = [rec["seq"] for rec in records()]
    out["in_flight"] = int(settled(r).comms[0]["inflight_count"])
    d.abi.finalize(ctx)
    return out


def untimed_shown_unproven(d: Driver) -> dict:
    """Only ops the sample left untimed are in flight: the communicator's row shows the
    newest of them and says it may be done; once a later kernel starts, nothing is in flight
    and the flag goes. Point-to-point ops are asked for every time, the same shape again
    included."""
    ctx = d.init(0xCD).context
    timed = [op(d, ctx, seq) for seq in range(5)]  # the last three, asked for none, stay
    r = settled(settled(region()))
    row = r.comms[0]
    out = {"timed": timed, "in_flight": int(row["inflight_count"])}
    out["shown_index"] = int(row["inflight_op_index"])
    out["shown_unproven"] = int(row["inflight_unproven"])
    sends = []
    for _ in range(3):
        sends.append(bool(int(d.mask[0]) & KERNEL_CH))
        handle = d.abi.start_p2p_api(ctx, None, "Send", 256, "ncclFloat32", 0x77)
        d.abi.stop(handle)
    sends.append(bool(int(d.mask[0]) & KERNEL_CH))  # what the call after the last Send reads
    out["sends_asked"] = sends
    handle, task_mask = api(d, ctx, count=1 << 22)  # a new shape: timed, its kernel proves
    out["later"] = task(d, ctx, handle, task_mask, 5, count=1 << 22)  # the untimed ones done
    row = settled(settled(region())).comms[0]
    out["in_flight_after"] = int(row["inflight_count"])
    out["unproven_after"] = int(row["inflight_unproven"])
    d.abi.finalize(ctx)
    return out


def untimed_past_the_threshold(d: Driver) -> dict:
    """Untimed ops stay in flight, unproven, past the hang threshold: the watchdog flags
    nothing (only peers can tell whether they are done). A timed op whose kernel never
    starts is flagged."""
    ctx = d.init(0xCE).context
    timed = [op(d, ctx, seq) for seq in range(4)]  # the last two untimed: in flight
    r = region()
    beat = r.counter("heartbeat_count")  # well past the threshold (50 ms heartbeats)
    wait_until(lambda: r.counter("heartbeat_count") >= beat + 20, DEADLINE_S, "heartbeats")
    row = settled(r).comms[0]
    out = {"timed": timed, "in_flight": int(row["inflight_count"])}
    out["unproven"] = int(row["inflight_unproven"])
    out["flagged_untimed"] = r.counter("hangs_flagged")
    api(d, ctx, count=1 << 22)  # a call of a new shape that makes no task asks for the next
    handle, task_mask = api(d, ctx, count=1 << 22)  # timed as asked
    stuck = d.abi.start_coll(ctx, handle, None, 0, {**COLL, "seq": 4, "count": 1 << 22})
    d.abi.stop(stuck)  # its kernel never starts
    out["stuck_timed"] = bool(task_mask & KERNEL_CH)
    wait_until(lambda: r.counter("hangs_flagged") >= 1, DEADLINE_S, "the timed op flagged")
    out["flagged_index"] = int(settled(r).comms[0]["hang_flagged_seq"])
    d.abi.finalize(ctx)
    return out


def pause_edges(d: Driver) -> dict:
    """Three runs of five calls with a pause of PAUSE_S after each (a training loop's Steps
    with the optimizer and data loading between them), then one call."""
    ctx = d.init(0xCF).context
    timed = []
    for run in range(3):
        timed += [op(d, ctx, 5 * run + i) for i in range(5)]
        time.sleep(PAUSE_S)
    timed.append(op(d, ctx, 15))
    out = {"timed": timed, "records": records()}
    d.abi.finalize(ctx)
    return out


def pause_irregular(d: Driver) -> dict:
    """Runs of 3, 5 and 2 calls with a pause of PAUSE_S after each, then one call: no run
    foretells the next."""
    ctx = d.init(0xD0).context
    timed, seq = [], 0
    for length in (3, 5, 2):
        for _ in range(length):
            timed.append(op(d, ctx, seq))
            seq += 1
        time.sleep(PAUSE_S)
    timed.append(op(d, ctx, seq))
    out = {"timed": timed, "records": records()}
    d.abi.finalize(ctx)
    return out


PAUSE_S = 0.6  # the tests set the pause threshold to a third of it


SCENARIOS = {
    f.__name__: f
    for f in (
        pause_edges,
        pause_irregular,
        untimed_past_the_threshold,
        untimed_shown_unproven,
        sampled,
        decided_then_overwritten,
        overridden,
        all_ops,
        v7_tags,
        kernel_ch_taken_out,
        one_kernel_two_choices,
        due_survives_a_call_without_task,
        timed_op_stuck_while_sampling,
    )
}


def with_nccl_library(d: Driver) -> Driver:
    """With SCENARIO_NCCL_LIB (a library defining ncclGetVersion and a logger), that library
    loaded as NCCL's is: in the global scope (a program linked to it), or with
    SCENARIO_NCCL_LOCAL=1 only where its logger, handed to init, leads (PyTorch loads it as
    a dependency of an extension module, RTLD_LOCAL)."""
    lib = os.environ.get("SCENARIO_NCCL_LIB")
    if lib:
        import ctypes

        local = os.environ.get("SCENARIO_NCCL_LOCAL") == "1"
        nccl = ctypes.CDLL(lib, mode=ctypes.RTLD_LOCAL if local else ctypes.RTLD_GLOBAL)
        logger = ctypes.cast(nccl.ncclDebugLog, ctypes.c_void_p).value
        d.abi.logger = d.abi.ffi.cast("void *", logger)
    return d


if __name__ == "__main__":
    scenario, plugin = sys.argv[1], sys.argv[2]
    version = int(os.environ.get("SCENARIO_ABI", "5"))
    print(json.dumps(SCENARIOS[scenario](with_nccl_library(Driver(plugin, version)))))
    sys.stdout.flush()
