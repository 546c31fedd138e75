"""More evidence when a hang is suspected: the Profiler raises NCCL's activation mask by
ProxyOp|ProxyStep, records the flagged communicator's proxy progress per channel into SHM for
the Agent's report, and goes back to the normal mask when the op completes, the communicator
is finalized or the bound passes. The real plugin in every build (plain, ASan+UBSan, TSan),
driven through the profiler ABI (hang_evidence_scenarios.py); the reader and the report on
forged input.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import msgspec
import numpy as np
import pytest
from profiler_builds import run_scenario
from waiting import wait_until

from comminsight.agent.receivers.proxy_evidence import evidence_by_row, hang_evidence
from comminsight.shm_reader import EVIDENCE, HEADER, ShmRegion
from comminsight_gen.abi import shm_v1

# a minute or more of simulated jobs and Agents: scheduled first (conftest)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "hang_evidence_scenarios.py"
BUILDS = ["plain", "asan", "tsan"]
NORMAL = 0x46  # the default mask: Coll|P2p|KernelCh
RAISED = NORMAL | shm_v1.HANG_EVIDENCE_BITS
SCHEMA = json.loads((ROOT / "protocols/hang-report/v1/hang-report.schema.json").read_text())
HANG = {"COMMINSIGHT_PROFILER_HANG_TIMEOUT_S": "0.5"}


def run(scenario: str, build: str, home: Path, **env) -> dict:
    return run_scenario(scenario, build, home, script=SCRIPT, **{**HANG, **env})


def channel(posted=1, arrived=0, transmitted=0, done=0) -> dict:
    return {
        "peer": 1,
        "ops_started": 1,
        "ops_stopped": 0,
        "steps_expected": 2,
        "steps_posted": posted,
        "steps_arrived": arrived,
        "steps_transmitted": transmitted,
        "steps_done": done,
    }


# channel 0 done one step both ways, 1 got data (from the GPU / the network), 2 and 3 posted
EXPECTED_CHANNELS = {
    "0": channel(arrived=1, transmitted=1, done=1),
    "1": channel(arrived=1),
    "2": channel(),
    "3": channel(),
}


@pytest.mark.parametrize("build", BUILDS)
def test_a_flagged_hang_raises_the_mask_records_proxy_progress_and_lowers_it(build, tmp_path):
    out = run("raise_record_lower", build, tmp_path)
    assert out["normal_mask"] == NORMAL and out["nonzero_returns"] == 0
    assert out["raised_mask"] == RAISED
    h = out["header_raised"]
    assert (h["event_mask"], h["normal_event_mask"], h["evidence_active"]) == (RAISED, NORMAL, 1)
    assert h["evidence_raises"] == 1 and h["raised_at"]
    assert h["flags"] & shm_v1.HeaderFlags.HANG_EVIDENCE
    assert out["mask_after_other_init"] == RAISED, "an init meanwhile must not lower it"
    assert out["task_mask"] == RAISED, "the next op is issued with proxy events asked for"

    (e,) = out["evidence_raised"]
    assert e["state"] == shm_v1.EvidenceState.RAISED and e["end_reason"] == 0
    assert (e["comm_id"], e["rank"], e["evidence_mask"]) == (0xE1, 0, RAISED)
    assert (e["flagged_op_index"], e["flagged_op_kind"]) == (1, shm_v1.RecordKind.COLL)
    # the stuck op (index 1) had its mask fixed before the raise: only op 2 brought proxy events
    assert (e["first_proxy_op_index"], e["last_proxy_op_index"]) == (2, 2)
    assert e["events_dropped"] == 1, "channel 70 is beyond the table"
    assert e["send"] == EXPECTED_CHANNELS and e["recv"] == EXPECTED_CHANNELS
    assert e["raised"] and not e["lowered"] and e["proxy_events"] > 0

    report = out["report"]
    jsonschema.validate(report, SCHEMA)
    (mine,) = [r for r in report["evidence"] if r["comm_rank"] == 0]
    ev = mine["hang_evidence"]
    assert (ev["state"], ev["evidence_mask"], ev["flagged_op"]) == ("raised", RAISED, 1)
    assert (ev["first_proxy_op"], ev["last_proxy_op"], ev["events_dropped"]) == (2, 2, 1)
    assert "end_reason" not in ev and "lowered_at_real_ns" not in ev
    assert [(c["channel_id"], c["direction"]) for c in ev["channels"]] == [
        (ch, d) for ch in range(4) for d in ("send", "recv")
    ]
    first = ev["channels"][0]
    assert first == {
        "channel_id": 0,
        "peer": 1,
        "direction": "send",
        "n_steps": 2,
        "steps_done": 1,
        "proxy_ops_started": 1,
        "proxy_ops_completed": 0,
        "steps_posted": 1,
        "steps_arrived": 1,
        "steps_transmitted": 1,
    }
    assert [c["steps_arrived"] for c in ev["channels"]] == [1, 1, 1, 1, 0, 0, 0, 0]

    assert out["mask_after"] == NORMAL
    a = out["header_after"]
    assert (a["event_mask"], a["normal_event_mask"], a["evidence_active"]) == (NORMAL, NORMAL, 0)
    assert a["evidence_raises"] == 1
    (after,) = out["evidence_after"]
    assert after["state"] == shm_v1.EvidenceState.LOWERED and after["lowered"]
    assert after["end_reason"] == shm_v1.EvidenceEnd.OP_COMPLETED
    assert after["send"] == EXPECTED_CHANNELS and after["recv"] == EXPECTED_CHANNELS, (
        "events after the lowering are not recorded"
    )


def test_profiler_abi_v4_records_the_same(tmp_path):
    out = run("raise_record_lower", "plain", tmp_path, SCENARIO_ABI="4")
    (e,) = out["evidence_raised"]
    assert e["send"] == EXPECTED_CHANNELS and e["recv"] == EXPECTED_CHANNELS
    assert out["mask_after"] == NORMAL


@pytest.mark.parametrize("build", BUILDS)
def test_evidence_off_leaves_the_mask_alone_on_a_hang(build, tmp_path):
    out = run("evidence_off", build, tmp_path, COMMINSIGHT_PROFILER_HANG_EVIDENCE="0")
    assert out["masks"] == [NORMAL] == [out["normal_mask"]]
    h = out["header"]
    assert (h["evidence_offset"], h["evidence_capacity"], h["evidence_active"]) == (0, 0, 0)
    assert h["evidence_raises"] == 0 and h["event_mask"] == NORMAL
    assert not h["flags"] & shm_v1.HeaderFlags.HANG_EVIDENCE
    assert out["evidence"] == []


@pytest.mark.parametrize("build", BUILDS)
def test_the_normal_path_never_changes_the_mask(build, tmp_path):
    out = run("normal_path", build, tmp_path)
    assert out["masks"] == [NORMAL] and out["ops"] > 0
    h = out["header"]
    assert h["evidence_offset"] > 0, "evidence is on, and stays unused"
    assert (h["evidence_active"], h["evidence_raises"], h["hangs_flagged"]) == (0, 0, 0)
    assert h["event_mask"] == h["normal_event_mask"] == NORMAL
    assert out["evidence"] == []


@pytest.mark.parametrize("build", BUILDS)
def test_the_mask_goes_back_after_the_bound_and_stays_back(build, tmp_path):
    out = run("bound_reached", build, tmp_path, COMMINSIGHT_PROFILER_HANG_EVIDENCE_MAX_S="1")
    assert (out["normal_mask"], out["raised_mask"]) == (NORMAL, RAISED)
    assert out["mask_after_bound"] == out["mask_later"] == NORMAL
    assert out["still_in_flight"]
    assert out["header"] == {"evidence_active": 0, "evidence_raises": 1}
    (e,) = out["evidence"]
    assert e["state"] == shm_v1.EvidenceState.LOWERED
    assert e["end_reason"] == shm_v1.EvidenceEnd.BOUND_REACHED
    assert e["send"] == {} and e["first_proxy_op_index"] == shm_v1.NO_OP_INDEX


@pytest.mark.parametrize("build", BUILDS)
def test_finalizing_the_flagged_communicator_lowers_the_mask_at_once(build, tmp_path):
    out = run("finalized", build, tmp_path)
    assert (out["raised_mask"], out["mask_after_finalize"]) == (RAISED, NORMAL)
    assert out["header"] == {"evidence_active": 0, "evidence_raises": 1}
    (e,) = out["evidence"]
    assert e["state"] == shm_v1.EvidenceState.LOWERED
    assert e["end_reason"] == shm_v1.EvidenceEnd.COMM_FINALIZED


@pytest.mark.parametrize(
    "key, value",
    [
        ("COMMINSIGHT_PROFILER_HANG_EVIDENCE", "maybe"),
        ("COMMINSIGHT_PROFILER_HANG_EVIDENCE_MAX_S", "soon"),
        ("COMMINSIGHT_PROFILER_HANG_EVIDENCE_MAX_S", "0"),
    ],
)
def test_a_bad_hang_evidence_value_is_named_and_the_default_used(tmp_path, key, value):
    out = run("bad_keys", "plain", tmp_path, **{key: value})
    assert f"{key}='{value}'" in out["stderr"] and "using the default" in out["stderr"]
    # on by default; the 600 s bound not reached, so only the finalize lowered it
    assert (out["raised_mask"], out["mask_after_finalize"]) == (RAISED, NORMAL)
    (e,) = out["evidence"]
    assert e["end_reason"] == shm_v1.EvidenceEnd.COMM_FINALIZED


# ---- the Agent's side, on forged input ----


@pytest.fixture(scope="module")
def left_region(tmp_path_factory) -> bytes:
    """A real Profiler's region after `finalized` (one lowered entry), as bytes to forge from."""
    home = tmp_path_factory.mktemp("evidence")
    run("finalized", "plain", home)
    return (home / "region-copy.shm").read_bytes()


def forged(tmp_path: Path, data: bytes, **fields) -> ShmRegion:
    buf = bytearray(data)
    h = np.frombuffer(buf, dtype=HEADER, count=1)
    for key, value in fields.items():
        h[0][key] = value
    path = tmp_path / "forged.shm"
    path.write_bytes(bytes(buf))
    os.chmod(path, 0o600)
    return ShmRegion(path)


def test_the_left_region_holds_one_lowered_entry(tmp_path, left_region):
    r = forged(tmp_path, left_region)
    assert r.evidence_problem is None
    (e,) = r.evidence_entries()
    assert int(e["state"]) == shm_v1.EvidenceState.LOWERED
    assert len(r.comm_entries()) == 2


@pytest.mark.parametrize(
    "fields, problem",
    [
        ({"evidence_entry_size": 4096}, "evidence_entry_size: 4096"),
        ({"evidence_capacity": 0}, "evidence_capacity: 0"),
        ({"evidence_capacity": 1 << 30}, "evidence_capacity"),
        ({"evidence_offset": 4096 + 64 + 1}, "evidence_offset"),  # not a cache line
        ({"evidence_offset": 4096}, "evidence_offset"),  # inside the comm table / ring
        ({"evidence_offset": 1 << 40}, "past the end of the file"),
    ],
    ids=["entry-size", "no-entries", "huge-count", "unaligned", "overlaps-ring", "past-end"],
)
def test_a_bad_evidence_table_is_named_and_the_region_still_read(
    tmp_path, left_region, fields, problem
):
    r = forged(tmp_path, left_region, **fields)
    assert problem in r.evidence_problem
    assert len(r.evidence_entries()) == 0
    assert len(r.comm_entries()) == 2, "the rest of the region is still read"


def test_entries_breaking_the_protocol_are_left_out(tmp_path, left_region):
    r = forged(tmp_path, left_region)
    off = int(r.header["evidence_offset"])
    buf = bytearray(left_region)
    table = np.frombuffer(buf, dtype=EVIDENCE, count=shm_v1.EVIDENCE_SLOTS, offset=off)
    table[1] = table[0]
    table[1]["state"] = 7  # no evidence_state
    table[2] = table[0]
    table[2]["comm_id"] = 0xBAD
    table[2]["send"][3]["ops_started"] = 2
    table[2]["send"][3]["peer"] = -5  # no rank
    table[2]["send"][4]["ops_started"] = 1
    table[2]["send"][4]["peer"] = 3
    table[2]["evidence_mask"] = -1
    path = tmp_path / "entries.shm"
    path.write_bytes(bytes(buf))
    os.chmod(path, 0o600)
    views = evidence_by_row(ShmRegion(path).evidence_entries())
    assert len(views) == 2  # the unknown state left out
    (bad,) = [v for k, v in views.items() if k[0] == 0xBAD]
    assert [(c.channel, c.peer) for c in bad.channels] == [(4, 3)]
    report = hang_evidence(bad, lambda mono: mono, now_mono_ns=bad.raised_mono_ns)
    assert report.evidence_mask == 0 and len(report.channels) == 1
    full = {**SCHEMA, "$ref": "#/$defs/HangEvidence"}
    for key in ("title", "type", "properties", "required", "not", "additionalProperties"):
        full.pop(key, None)
    jsonschema.validate(msgspec.to_builtins(report), full)


# ---- end to end: the simulated NCCL, the real plugin, the Agent's diagnosis ----


def test_a_simulated_hang_across_nodes_shows_proxy_progress_in_the_report(tmp_path):
    """Two ranks on two nodes; rank 1 never issues op 4, rank 0 waits in it and (after a
    pause longer than the threshold) issues op 5, whose proxy ops the raised mask brings."""
    import fcntl
    import threading
    import time

    from profiler_builds import builds

    from comminsight.agent.hangs.diagnosis import diagnose
    from comminsight.agent.state.snapshot import build_snapshot
    from comminsight.shm_reader import ShmError
    from comminsight.sim import SimConfig, parse_fault
    from comminsight.sim.launcher import run_simulation

    (tmp_path / "metadata").mkdir()
    lock = open(tmp_path / "metadata" / "agent.lock", "w")  # noqa: SIM115 - held for the run
    fcntl.flock(lock, fcntl.LOCK_EX)  # the plugin leaves its SHM files for us
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(tmp_path),
        workload="ddp",
        ranks=2,
        nodes=2,
        steps=1,
        time_scale=0.02,
        hang_hold_s=10.0,  # ends the run once rank 0 has been stuck this long
        faults=(parse_fault("skip:rank=1,op=4"), parse_fault("sleep:rank=0,op=5,seconds=2")),
        env=(
            ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
            ("COMMINSIGHT_PROFILER_HEARTBEAT_MS", "50"),
            ("COMMINSIGHT_PROFILER_HANG_TIMEOUT_S", "0.5"),
        ),
    )
    result = {}
    sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
    sim.start()

    def report_with_proxy_progress() -> dict | None:
        running = sim.is_alive()  # before the look: a run that ends meanwhile gets this last one
        regions = []
        for path in sorted((tmp_path / "shms").glob("*.shm")):
            try:
                regions.append(ShmRegion(path))
            except ShmError:
                continue  # still being created
        try:
            snap = build_snapshot(regions, node_name="test-node", heartbeat_stale_ms=1000)
            for report in diagnose(snap, time.monotonic_ns(), 500_000_000):
                for e in report.evidence:
                    ev = e.hang_evidence
                    settled = ev is not msgspec.UNSET and all(
                        c.steps_posted == c.proxy_ops_started for c in ev.channels
                    )  # the proxy has posted step 0 of every proxy op it started
                    if settled and ev.channels:
                        return msgspec.to_builtins(report)
        finally:
            for r in regions:
                r.close()
        assert running, f"no report carried proxy progress before the run ended: {result}"
        return None

    try:
        found = wait_until(report_with_proxy_progress, 120, "a report with proxy progress")
    finally:
        sim.join()
        lock.close()
    assert not result["sim"].errors, result["sim"].errors
    jsonschema.validate(found, SCHEMA)
    (waiting,) = [e for e in found["evidence"] if "hang_evidence" in e]
    assert waiting["comm_rank"] == 0 and waiting["inflight"]["channels_started"] > 0
    ev = waiting["hang_evidence"]
    assert ev["state"] == "raised" and ev["evidence_mask"] & shm_v1.HANG_EVIDENCE_BITS
    assert ev["first_proxy_op"] > ev["flagged_op"], "only ops issued after the raise"
    # op 5 is launched behind the stuck kernel: every step is posted, none moved on
    assert {(c["direction"], c["peer"]) for c in ev["channels"]} == {("send", 1), ("recv", 1)}
    for c in ev["channels"]:
        assert c["steps_posted"] == c["proxy_ops_started"] >= 1
        assert c["steps_arrived"] == c["steps_transmitted"] == c["steps_done"] == 0
