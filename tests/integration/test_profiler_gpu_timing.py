"""Which ops the Profiler asks NCCL to time on the GPU, and what it does when NCCL's mask is
not what it asked for (tests/gpu_timing_scenarios.py drives the calls as NCCL makes them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from profiler_builds import builds, run_scenario

from comminsight_gen.abi import shm_v1

SCRIPT = Path(__file__).resolve().parents[1] / "gpu_timing_scenarios.py"
BUILDS = ["plain", "asan", "tsan"]
T = shm_v1.TimingSource
KERNEL_CH = 0x40


def run(scenario: str, build: str, home: Path, **env) -> dict:
    # no pause rule unless a test asks for it: a loaded machine may pause between any calls
    env = {
        "COMMINSIGHT_PROFILER_GPU_TIMING": "sampled",
        "COMMINSIGHT_PROFILER_GPU_TIMING_QUIET_US": "0",
        **env,
    }
    return run_scenario(scenario, build, home, script=SCRIPT, **env)


@pytest.mark.parametrize("build", BUILDS)
def test_one_op_in_every_of_each_shape_is_timed_and_every_op_recorded(build, tmp_path):
    out = run(
        "sampled",
        build,
        tmp_path,
        COMMINSIGHT_PROFILER_GPU_TIMING_EVERY="2",
        COMMINSIGHT_PROFILER_GPU_TIMING_PERIOD_MS="0",
    )
    # shape 4 MiB: ops 0, 3, 6, 9; shape 4 KiB: ops 1, 2, 4, 5, 7, 8, 10, 11; the first of each
    # and one in EVERY asks for timing, at its API event, where NCCL (2.28 on) has read the
    # mask for its own task already: the call after it is timed (the first call: the mask
    # the plugin set at init, with KernelCh)
    big = [0, 3, 6, 9]
    small = [1, 2, 4, 5, 7, 8, 10, 11]
    asked = [False] * 12
    for shape in (big, small):
        for n, seq in enumerate(shape):
            asked[seq] = n % 2 == 0
    want = [True, *asked[:-1]]
    assert out["timed"] == want
    recs = {r["seq"]: r for r in out["records"]}
    assert sorted(recs) == list(range(12))
    for seq, timed in enumerate(want):
        assert recs[seq]["timing"] == (T.KERNEL_GPU if timed else T.COLLECTIVE_CPU), seq
        assert recs[seq]["channels"] == (COLL_CHANNELS if timed else 0)
        assert not recs[seq]["flags"] & shm_v1.SlotFlags.CHANNELS_INCOMPLETE
    assert out["gpu_timing"] == shm_v1.GpuTiming.SAMPLED
    assert out["mask_overridden"] == 0


COLL_CHANNELS = 4


@pytest.mark.parametrize("build", BUILDS)
def test_an_op_whose_task_read_another_calls_choice_completes_when_a_later_op_starts(
    build, tmp_path
):
    out = run(
        "decided_then_overwritten", build, tmp_path, COMMINSIGHT_PROFILER_GPU_TIMING_PERIOD_MS="0"
    )
    assert out["a_asked"] is False and out["late_timed"]
    recs = [(r["comm"], r["count"], r["timing"]) for r in out["records"]]
    assert (0xC2, 1024, T.COLLECTIVE_CPU) in recs  # a's first op, with host times
    assert (0xC2, 1 << 22, T.KERNEL_GPU) in recs
    assert len(out["records"]) == 5
    assert out["in_flight"] == 0


# not under TSan: the scenario's own write of the mask (Python, no atomics) is what it reports
@pytest.mark.parametrize("build", ["plain", "asan"])
@pytest.mark.parametrize("timing", ["sampled", "all"])
def test_an_operators_mask_wins_and_is_reported(build, timing, tmp_path):
    out = run(
        "overridden",
        build,
        tmp_path,
        COMMINSIGHT_PROFILER_GPU_TIMING=timing,
        COMMINSIGHT_PROFILER_GPU_TIMING_EVERY="1000",
    )
    assert out["mask_after"] == out["theirs"]  # never written over
    assert out["timed"] == [True] * 8  # their mask has KernelCh: every op is timed
    assert out["mask_overridden"] == 1
    assert out["overriding_event_mask"] == out["theirs"]
    assert all(r["timing"] == T.KERNEL_GPU for r in out["records"])


def test_every_op_is_timed_by_default(tmp_path):
    out = run_scenario("all_ops", "plain", tmp_path, script=SCRIPT)
    assert out["timed"] == [True] * 6
    assert out["gpu_timing"] == shm_v1.GpuTiming.ALL


def test_no_op_is_timed_without_kernel_ch_in_the_mask(tmp_path):
    out = run("all_ops", "plain", tmp_path, COMMINSIGHT_PROFILER_EVENT_MASK="6")
    assert out["timed"] == [False] * 6
    assert out["gpu_timing"] == shm_v1.GpuTiming.OFF


def nccl_reporting(version: int, tmp_path: Path) -> str:
    """A library whose ncclGetVersion says `version` (NCCL's code: 2.31.0 is 23100), with a
    logger as NCCL's."""
    src, lib = tmp_path / "nccl_version.c", tmp_path / "libnccl_version.so"
    src.write_text(
        f"int ncclGetVersion(int* v) {{ *v = {version}; return 0; }}\n"
        "void ncclDebugLog(int level, unsigned long flags, const char* file, int line,\n"
        "                  const char* fmt, ...) {}\n"
    )
    subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    return str(lib)


@pytest.mark.parametrize(
    ("abi", "nccl", "local"),
    [("7", None, "0"), ("6", 23100, "0"), ("5", 23200, "0"), ("6", 23100, "1")],
    ids=["abi_v7", "nccl_2.31.0_abi_v6", "nccl_2.32.0_abi_v5", "nccl_2.31.0_loaded_locally"],
)
def test_sampled_times_every_op_on_nccl_231_on(abi, nccl, local, tmp_path):
    # NCCL 2.31 on matches a channel's KernelCh events to tasks by a counter that only timed
    # tasks advance: one untimed op would give later ops another op's GPU times. NCCL's
    # version is read from the library its logger is in where that is not global (PyTorch)
    env = {"SCENARIO_NCCL_LIB": nccl_reporting(nccl, tmp_path)} if nccl else {}
    env["SCENARIO_NCCL_LOCAL"] = local
    out = run(
        "sampled",
        "plain",
        tmp_path / "home",
        SCENARIO_ABI=abi,
        COMMINSIGHT_PROFILER_GPU_TIMING_EVERY="2",
        COMMINSIGHT_PROFILER_GPU_TIMING_PERIOD_MS="0",
        **env,
    )
    assert out["timed"] == [True] * 12
    assert [r["timing"] for r in out["records"]] == [T.KERNEL_GPU] * 12
    assert out["gpu_timing"] == shm_v1.GpuTiming.ALL
    assert out["mask_after"] & KERNEL_CH


def test_sampled_still_samples_on_nccl_230(tmp_path):
    out = run(
        "sampled",
        "plain",
        tmp_path / "home",
        SCENARIO_ABI="6",
        SCENARIO_NCCL_LIB=nccl_reporting(23007, tmp_path),
        COMMINSIGHT_PROFILER_GPU_TIMING_EVERY="2",
        COMMINSIGHT_PROFILER_GPU_TIMING_PERIOD_MS="0",
    )
    assert out["gpu_timing"] == shm_v1.GpuTiming.SAMPLED
    assert out["timed"].count(False) == 5


@pytest.mark.parametrize("build", BUILDS)
def test_abi_v7_user_tags_and_kernel_variants_reach_the_record(build, tmp_path):
    out = run("v7_tags", build, tmp_path, SCENARIO_ABI="7")
    recs = out["records"]
    assert [r["user_tag"] for r in recs] == [7, 7, 8, 0]
    assert [bool(r["flags"] & shm_v1.SlotFlags.SYM_COLL) for r in recs] == [
        False,
        True,
        False,
        False,
    ]
    variant = "AllReduce_Sum_f32_RING_LL_with_a_long_name"
    assert all(r["kernel_variant"] == variant[:31] for r in recs)
    assert out["phase_rc"] == 0 and not out["phase_handle"]
    assert out["events_unknown"] == 0


@pytest.mark.parametrize("build", ["plain", "asan"])
def test_ops_after_an_operator_takes_kernel_ch_out_are_recorded_not_left_in_flight(build, tmp_path):
    out = run_scenario("kernel_ch_taken_out", build, tmp_path, script=SCRIPT)  # default: all
    assert out["timed"] == [False] * 5
    assert [r["timing"] for r in out["records"]] == [T.KERNEL_GPU] + [T.COLLECTIVE_CPU] * 5
    assert out["in_flight"] == 0
    assert out["mask_overridden"] == 1 and out["overriding_event_mask"] == 0x06


@pytest.mark.parametrize("build", BUILDS)
def test_an_untimed_op_is_not_done_while_its_own_kernel_runs(build, tmp_path):
    out = run(
        "one_kernel_two_choices", build, tmp_path, COMMINSIGHT_PROFILER_GPU_TIMING_PERIOD_MS="0"
    )
    assert out["x_asked"] is False and out["y_asked"] is True
    assert out["recorded_on_a"] == []  # X is not done while the kernel (Y) runs
    assert out["in_flight"] == 2


def test_a_period_without_timing_times_the_next_task_not_a_call_without_one(tmp_path):
    out = run(
        "due_survives_a_call_without_task",
        "plain",
        tmp_path,
        COMMINSIGHT_PROFILER_GPU_TIMING_EVERY="1000",
        COMMINSIGHT_PROFILER_GPU_TIMING_PERIOD_MS="100",  # 2 heartbeats of the tests' 50 ms
    )
    assert out["timed"] == [True, True, True]


def test_a_stuck_timed_op_stays_in_flight_while_sampling_clears_the_mask(tmp_path):
    out = run(
        "timed_op_stuck_while_sampling",
        "plain",
        tmp_path,
        COMMINSIGHT_PROFILER_GPU_TIMING_PERIOD_MS="0",
    )
    assert out["asked"] and not out["later"] and not out["mask"] & KERNEL_CH
    assert 1 not in out["recorded_seqs"]
    assert out["in_flight"] >= 1


def test_bad_gpu_timing_values_fall_back_to_the_defaults_and_are_named(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
        "COMMINSIGHT_HOME": str(tmp_path),
        "COMMINSIGHT_AGENT_AUTOSTART": "0",
        "COMMINSIGHT_PROFILER_HEARTBEAT_MS": "50",
        "COMMINSIGHT_PROFILER_GPU_TIMING": "sometimes",
        "COMMINSIGHT_PROFILER_GPU_TIMING_EVERY": "0",
        "COMMINSIGHT_PROFILER_GPU_TIMING_PERIOD_MS": "soon",
        "PYTHONPATH": str(SCRIPT.parent),
    }
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "all_ops", str(builds()["plain"].path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["gpu_timing"] == shm_v1.GpuTiming.ALL and out["timed"] == [True] * 6
    for said in (
        "COMMINSIGHT_PROFILER_GPU_TIMING='sometimes' (environment)",
        "COMMINSIGHT_PROFILER_GPU_TIMING_EVERY='0' (environment): out of range",
        "COMMINSIGHT_PROFILER_GPU_TIMING_PERIOD_MS='soon' (environment): expected an integer",
    ):
        assert said in proc.stderr, proc.stderr


@pytest.mark.parametrize("build", BUILDS)
def test_an_untimed_op_in_flight_is_shown_unproven_and_p2p_ops_are_always_timed(build, tmp_path):
    out = run(
        "untimed_shown_unproven", build, tmp_path, COMMINSIGHT_PROFILER_GPU_TIMING_PERIOD_MS="0"
    )
    # the first call's task reads the mask set at init; each later one, what the call
    # before it asked for (the first of a shape does, the second does not)
    assert out["timed"] == [True, True, False, False, False]
    assert out["in_flight"] == 3
    # the newest untimed op: if it is done, all are, and it is the one a peer may not have
    # joined (the oldest would name an op every peer joined)
    assert (out["shown_index"], out["shown_unproven"]) == (4, 1)
    # a Send asks for the call after it, whatever its shape has had
    assert out["sends_asked"] == [False, True, True, True]
    assert out["later"] is True
    assert (out["in_flight_after"], out["unproven_after"]) == (0, 0)


@pytest.mark.parametrize("build", BUILDS)
def test_the_watchdog_flags_a_timed_op_past_the_threshold_never_an_untimed_one(build, tmp_path):
    out = run(
        "untimed_past_the_threshold",
        build,
        tmp_path,
        COMMINSIGHT_PROFILER_GPU_TIMING_PERIOD_MS="0",
        COMMINSIGHT_PROFILER_HANG_TIMEOUT_S="0.2",
    )
    assert out["timed"] == [True, True, False, False]
    assert (out["in_flight"], out["unproven"]) == (2, 1)
    assert out["flagged_untimed"] == 0
    assert out["stuck_timed"] is True
    assert out["flagged_index"] == 4


def run_pauses(scenario: str, build: str, home: Path, **env) -> dict:
    """A pause scenario with no op timed by its shape past the first, nor by the period, and
    a pause of at least a third of the scenario's."""
    env = {
        "COMMINSIGHT_PROFILER_GPU_TIMING_EVERY": "1000",
        "COMMINSIGHT_PROFILER_GPU_TIMING_PERIOD_MS": "0",
        "COMMINSIGHT_PROFILER_GPU_TIMING_QUIET_US": "200000",
        **env,
    }
    return run(scenario, build, home, **env)


def assert_timed(out: dict, want: list[bool]) -> None:
    """Which calls NCCL was asked to time, and that their records say so."""
    assert out["timed"] == want
    recs = {r["seq"]: r["timing"] for r in out["records"]}
    assert [recs[i] == T.KERNEL_GPU for i in range(len(want))] == want


@pytest.mark.parametrize("build", BUILDS)
def test_the_ops_on_either_side_of_a_pause_are_timed(build, tmp_path):
    """Runs of calls between pauses of the host: once a run's length is known, the last call
    of the next run and the first after it are timed (NCCL 2.28 on reads the mask before the
    call's API event, so each is decided at the call before it)."""
    # no heartbeat after the first within the scenario: the foresight alone
    out = run_pauses("pause_edges", build, tmp_path, COMMINSIGHT_PROFILER_HEARTBEAT_MS="10000")
    want = [False] * 16
    want[0] = True  # the mask the plugin set at init
    want[1] = True  # asked by the first op of its shape
    # the first run ends unforeseen (no run length yet), and so the second begins untimed;
    # the second run's last call (9) and the third's first (10) are foreseen, as are the
    # third's last (14) and the call after the last pause (15)
    for i in (9, 10, 14, 15):
        want[i] = True
    assert_timed(out, want)


@pytest.mark.parametrize("build", ["plain"])
def test_no_op_is_timed_for_a_pause_when_the_rule_is_off(build, tmp_path):
    out = run_pauses("pause_edges", build, tmp_path, COMMINSIGHT_PROFILER_GPU_TIMING_QUIET_US="0")
    assert_timed(out, [True, True] + [False] * 14)


@pytest.mark.parametrize("build", BUILDS)
def test_a_pause_a_heartbeat_falls_in_has_the_next_call_timed(build, tmp_path):
    """Runs of 3, 5 and 2 calls: no run foretells the next, but the background thread sees
    each pause (50 ms heartbeats in a pause of 600 ms) and has the call after it timed."""
    out = run_pauses("pause_irregular", build, tmp_path)
    # 0: init's mask; 1: the first op of its shape; 3, 8, 10: after a pause, by the heartbeat;
    # 5, 6: the run of 3 before foretold a last call at 5 (and 6 as the next run's first)
    want = [True, True, False, True, False, True, True, False, True, False, True]
    assert_timed(out, want)
