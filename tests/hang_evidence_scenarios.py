"""Scenarios for tests/test_profiler_hang_evidence.py: the real plugin, driven through the
profiler ABI in a fresh process each, raising NCCL's activation mask on a suspected hang.

    python tests/hang_evidence_scenarios.py SCENARIO PLUGIN.so

The driver plays NCCL: it reads the mask int it gave the plugin when it issues an op, and
sends that op's ProxyOp/ProxyStep events only when that value asks for them (NCCL copies the
mask into the task at the API call and into its proxy ops at launch). Each scenario prints one
JSON object. Waits poll for a condition with a generous deadline; none is a measurement.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import msgspec
from plugin_scenarios import COLL, Driver, hold_agent_lock, home, region
from waiting import wait_until

from comminsight.agent.hangs.diagnosis import diagnose
from comminsight.agent.state.snapshot import build_snapshot
from comminsight_gen.abi import shm_v1
from comminsight_gen.abi.nccl_profiler_v5 import EventState, EventType

DEADLINE_S = 90.0
PROXY_BITS = EventType.PROXY_OP | EventType.PROXY_STEP
CHANNELS = 4
PEER = 1


def header(r, *names: str) -> dict:
    return {n: int(r.header[n]) for n in names}


def entry_json(e) -> dict:
    """An evidence entry, with the channels that saw a proxy op."""
    out = {
        k: int(e[k])
        for k in (
            "state",
            "end_reason",
            "comm_id",
            "rank",
            "evidence_mask",
            "flagged_op_index",
            "flagged_op_kind",
            "first_proxy_op_index",
            "last_proxy_op_index",
            "events_dropped",
            "proxy_events",
        )
    }
    out["raised"] = int(e["raised_mono_ns"]) > 0
    out["lowered"] = int(e["lowered_mono_ns"]) > 0
    for side in ("send", "recv"):
        out[side] = {
            str(ch): {k: int(c[k]) for k in shm_v1.CHANNEL_PROGRESS_DTYPE.names}
            for ch, c in enumerate(e[side])
            if int(c["ops_started"])
        }
    return out


def evidence(r) -> list[dict]:
    return [entry_json(e) for e in r.evidence_entries()]


def stuck_collective(d: Driver, ctx, seq: int):
    """A collective whose kernel started on every channel and never ends."""
    op = d.coll(ctx, seq, finish=False)
    channels = [d.abi.start_kernel_ch(ctx, op, c, 1_000 + c) for c in range(CHANNELS)]
    return op, channels


def finish_channels(d: Driver, channels) -> None:
    for h in channels:
        d.abi.record_state(h, EventState.KERNEL_CH_STOP, ptimer=9_000_000)
        d.abi.stop(h)


def issue_with_proxy(d: Driver, ctx, seq: int):
    """An op issued now, as NCCL would: its mask read at the call; with proxy bits in it, a
    send and a receive ProxyOp per channel (2 steps each), progressing differently per
    channel: 0 done both ways, 1 the GPU filled the send and data arrived, 2 and 3 posted."""
    task_mask = int(d.mask[0])
    op = d.abi.start_coll(ctx, None, None, 0, {**COLL, "seq": seq, "n_channels": CHANNELS})
    d.abi.stop(op)
    kernel = [d.abi.start_kernel_ch(ctx, op, c, 2_000 + c) for c in range(CHANNELS)]
    late = []  # handles NCCL would still stop or update later
    if task_mask & PROXY_BITS:
        pid = os.getpid()
        for ch in range(CHANNELS):
            send = d.abi.start_proxy_op(ctx, op, 0, pid, ch, PEER, 2, 4096, True)
            recv = d.abi.start_proxy_op(ctx, op, 0, pid, ch, PEER, 2, 4096, False)
            late += [send, recv]
            d.abi.record_state(send, EventState.PROXY_OP_IN_PROGRESS)
            s0 = d.abi.start_proxy_step(ctx, send, 0, 0)
            d.abi.record_state(s0, EventState.PROXY_STEP_SEND_GPU_WAIT, trans_size=0)
            r0 = d.abi.start_proxy_step(ctx, recv, 0, 0)
            d.abi.record_state(r0, EventState.PROXY_STEP_RECV_WAIT, trans_size=0)
            if ch <= 1:
                d.abi.record_state(s0, EventState.PROXY_STEP_SEND_PEER_WAIT, trans_size=0)
                d.abi.record_state(r0, EventState.PROXY_STEP_RECV_FLUSH_WAIT, trans_size=4096)
            if ch == 0:
                d.abi.record_state(s0, EventState.PROXY_STEP_SEND_WAIT, trans_size=4096)
                d.abi.stop(s0)
                d.abi.record_state(r0, EventState.PROXY_STEP_RECV_GPU_WAIT, trans_size=4096)
                d.abi.stop(r0)
            else:
                late.append(s0)
        # a channel beyond the table: counted, not recorded
        assert d.abi.start_proxy_op(ctx, op, 0, pid, 70, PEER, 2, 4096, True) is None
    return op, kernel, late, task_mask


def agent_report(r, comm_id: int) -> dict | None:
    """The Agent's diagnosis of this one region: the report on comm_id, as JSON."""
    threshold_ns = int(float(os.environ["COMMINSIGHT_PROFILER_HANG_TIMEOUT_S"]) * 1e9)
    snap = build_snapshot([r])
    reports = diagnose(snap, time.monotonic_ns(), threshold_ns)
    for report in reports:
        if report.comm.comm_id == f"{comm_id:016x}":
            return msgspec.to_builtins(report)
    return None


# ---- scenarios ----


def raise_record_lower(d: Driver) -> dict:
    """Flagged hang: the mask is raised; the next op's proxy events land per channel in SHM
    and in the Agent's report; once the flagged op completes the mask is back."""
    comm_id = 0xE1
    ctx = d.abi.init(d.mask, comm_id, "dp:0", 2, 2, 0).context  # two nodes: a network proxy
    out = {"normal_mask": int(d.mask[0])}
    d.coll(ctx, 0)
    _, stuck_channels = stuck_collective(d, ctx, 1)
    r = region()
    wait_until(lambda: int(r.header["evidence_active"]), DEADLINE_S, "the mask raised")
    out["raised_mask"] = wait_until(
        lambda: int(d.mask[0]) & PROXY_BITS and int(d.mask[0]), DEADLINE_S, "NCCL's mask"
    )
    out["header_raised"] = header(
        r, "event_mask", "normal_event_mask", "evidence_active", "evidence_raises", "flags"
    )
    out["header_raised"]["raised_at"] = int(r.header["evidence_raised_mono_ns"]) > 0
    other = d.init(0xE2).context  # a communicator created meanwhile keeps the mask raised
    out["mask_after_other_init"] = int(d.mask[0])
    _, nxt_channels, late, task_mask = issue_with_proxy(d, ctx, 2)
    out["task_mask"] = task_mask
    out["evidence_raised"] = evidence(r)
    out["report"] = agent_report(r, comm_id)
    finish_channels(d, stuck_channels)  # the flagged op completes, then the next one
    finish_channels(d, nxt_channels)
    wait_until(lambda: int(r.header["evidence_active"]) == 0, DEADLINE_S, "the mask back")
    out["mask_after"] = int(d.mask[0])
    out["header_after"] = header(
        r, "event_mask", "normal_event_mask", "evidence_active", "evidence_raises"
    )
    for handle in late:  # proxy events after the lowering are not recorded
        d.abi.record_state(handle, EventState.PROXY_STEP_SEND_WAIT, trans_size=4096)
        d.abi.stop(handle)
    out["evidence_after"] = evidence(r)
    d.abi.finalize(other)
    d.abi.finalize(ctx)
    out["nonzero_returns"] = d.abi.nonzero_returns
    return out


def evidence_off(d: Driver) -> dict:
    """COMMINSIGHT_PROFILER_HANG_EVIDENCE=0: a flagged hang leaves the mask alone."""
    ctx = d.abi.init(d.mask, 0xE3, "dp:0", 2, 2, 0).context
    normal = int(d.mask[0])
    stuck_collective(d, ctx, 0)
    r = region()
    masks = set()
    # the predicates sample NCCL's mask on every poll: keep the polls close together
    wait_until(
        lambda: masks.add(int(d.mask[0])) or int(r.header["hangs_flagged"]),
        DEADLINE_S,
        "the flag",
        max_interval_s=0.01,
    )
    beat = int(r.header["heartbeat_count"])
    wait_until(
        lambda: masks.add(int(d.mask[0])) or int(r.header["heartbeat_count"]) >= beat + 5,
        DEADLINE_S,
        "five more watchdog scans",
        max_interval_s=0.01,
    )
    out = {"normal_mask": normal, "masks": sorted(masks)}
    out["header"] = header(
        r,
        "evidence_offset",
        "evidence_capacity",
        "evidence_active",
        "evidence_raises",
        "flags",
        "event_mask",
    )
    out["evidence"] = evidence(r)
    d.abi.finalize(ctx)
    return out


def normal_path(d: Driver) -> dict:
    """No hang: ops complete while the watchdog scans; the mask never changes."""
    ctx = d.abi.init(d.mask, 0xE4, "dp:0", 2, 2, 0).context
    normal = int(d.mask[0])
    r = region()
    beat = int(r.header["heartbeat_count"])
    masks, seq = set(), 0
    while int(r.header["heartbeat_count"]) < beat + 10:
        d.coll(ctx, seq)
        masks.add(int(d.mask[0]))
        seq += 1
    out = {"normal_mask": normal, "masks": sorted(masks), "ops": seq}
    out["header"] = header(
        r,
        "evidence_offset",
        "evidence_active",
        "evidence_raises",
        "event_mask",
        "normal_event_mask",
        "hangs_flagged",
    )
    out["evidence"] = evidence(r)
    d.abi.finalize(ctx)
    return out


def bound_reached(d: Driver) -> dict:
    """The op never completes: the mask goes back after COMMINSIGHT_PROFILER_HANG_EVIDENCE_MAX_S
    and is not raised again for the same op."""
    ctx = d.abi.init(d.mask, 0xE5, "dp:0", 2, 2, 0).context
    normal = int(d.mask[0])
    stuck_collective(d, ctx, 0)
    r = region()
    wait_until(lambda: int(r.header["evidence_active"]), DEADLINE_S, "the mask raised")
    raised = int(d.mask[0])
    wait_until(lambda: int(r.header["evidence_active"]) == 0, DEADLINE_S, "the bound")
    lowered = int(d.mask[0])
    beat = int(r.header["heartbeat_count"])
    wait_until(
        lambda: int(r.header["heartbeat_count"]) >= beat + 5, DEADLINE_S, "five more watchdog scans"
    )
    row = r.comm_entries()[0]
    out = {
        "normal_mask": normal,
        "raised_mask": raised,
        "mask_after_bound": lowered,
        "mask_later": int(d.mask[0]),
        "still_in_flight": int(row["coll_completed"]) == 0 and int(row["inflight_count"]) == 1,
        "header": header(r, "evidence_active", "evidence_raises"),
        "evidence": evidence(r),
    }
    d.abi.finalize(ctx)
    return out


def finalized(d: Driver) -> dict:
    """The flagged communicator is finalized with its op in flight: the mask goes back at once.
    The region is copied to <home>/region-copy.shm for tests that forge from it."""
    lock = hold_agent_lock()
    ctx = d.abi.init(d.mask, 0xE6, "dp:0", 2, 2, 0).context
    keep = d.init(0xE7).context  # the process goes on with another communicator
    normal = int(d.mask[0])
    stuck_collective(d, ctx, 0)
    r = region()
    wait_until(lambda: int(r.header["evidence_active"]), DEADLINE_S, "the mask raised")
    raised = int(d.mask[0])
    d.abi.finalize(ctx)
    out = {
        "normal_mask": normal,
        "raised_mask": raised,
        "mask_after_finalize": int(d.mask[0]),
        "header": header(r, "evidence_active", "evidence_raises"),
        "evidence": evidence(r),
    }
    d.abi.finalize(keep)
    (home() / "region-copy.shm").write_bytes(r.target.read_bytes())
    lock.close()
    return out


def bad_keys(d: Driver) -> dict:
    """Unusable values of the two keys: each named on stderr, the defaults used (on, 600 s)."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as err:
        os.dup2(err.fileno(), 2)
        try:
            out = finalized(d)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        out["stderr"] = err.read().decode(errors="replace")
    return out


SCENARIOS = {
    f.__name__: f
    for f in (raise_record_lower, evidence_off, normal_path, bound_reached, finalized, bad_keys)
}

if __name__ == "__main__":
    scenario, plugin = sys.argv[1], sys.argv[2]
    version = int(os.environ.get("SCENARIO_ABI", "5"))
    result = SCENARIOS[scenario](Driver(plugin, version))
    print(json.dumps(result))
    sys.stdout.flush()
