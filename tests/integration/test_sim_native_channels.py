"""The simulated GPU's per-channel events are the same calls whether its C loops
(comminsight/sim/sim_channels.c, `make build-sim`) or its Python ones make them.

Both paths run the same job through the recording plugin, which asks for every event type,
on ABI v5 and v4; for every op of every rank the KernelCh events must come out alike: which
channels, in which order, with which parent, the GPU ticks one channel apart, KernelChStop
then stop for each, in the same place among the op's other events. Tick values themselves are
the run's clock and differ between runs; their spacing does not.
"""

from __future__ import annotations

import pytest
from sim_recording import ProcessCalls, assert_well_formed, run_sim

from comminsight.sim.abi import NATIVE_LIBRARY, NATIVE_SWITCH, ProfilerAbiV5
from comminsight.sim.proxy import CHANNEL_SKEW_NS

KERNEL_CH_STOP = "22"


def _channel_calls(proc: ProcessCalls) -> list[tuple]:
    """Per task, in issue order: its KernelCh children as (channel, start tick after the
    first channel's, the states each got, how many stops, stop tick after its start > 0)."""
    shape = []
    for task in proc.tasks():
        channels = proc.kernel_channels(task)
        first = channels[0].int("ptimer") if channels else 0
        per_channel = []
        for ch in channels:
            states = proc.states[ch["h"]]
            stop_ticks = [s.int("ptimer") for s in states if s["state"] == KERNEL_CH_STOP]
            per_channel.append(
                (
                    ch.int("ch"),
                    ch.int("ptimer") - first,
                    tuple(s["state"] for s in states),
                    len(proc.stops[ch["h"]]),
                    all(t > ch.int("ptimer") for t in stop_ticks),
                    ch.int("rank"),
                )
            )
        shape.append((task["type"], tuple(per_channel)))
    return shape


def _kernels_in_order(proc: ProcessCalls) -> int:
    """Checks that each kernel's channel calls are made as NCCL's proxy makes them, on one
    thread: its n starts back to back in channel order, and later, back to back, KernelChStop
    then stop for channel 0, then channel 1, ...; returns how many kernels were checked."""
    checked = 0
    for task in proc.tasks():
        channels = proc.kernel_channels(task)
        if not channels:
            continue
        handles = [ch["h"] for ch in channels]
        (tid,) = {ch["tid"] for ch in channels}
        on_thread = [c for c in proc.calls if c.get("tid") == tid]
        position = {id(c): i for i, c in enumerate(on_thread)}
        starts = [position[id(ch)] for ch in channels]
        assert starts == list(range(starts[0], starts[0] + len(starts))), task
        ends = []
        for h in handles:
            ends += [position[id(proc.states[h][0])], position[id(proc.stops[h][0])]]
        assert ends == list(range(ends[0], ends[0] + len(ends))), task
        assert ends[0] > starts[-1], task
        checked += 1
    return checked


def _call_kinds(proc: ProcessCalls) -> list[tuple[str, str]]:
    """The process's calls as (call, event type or state): the order of everything."""
    types = {c["h"]: c["type"] for c in proc.of("start")}
    kinds = []
    for call in proc.calls:
        if call.name == "start":
            kinds.append(("start", call["type"]))
        elif call.name in ("stop", "state"):
            kinds.append((call.name, types.get(call["h"], "?")))
    return kinds


@pytest.mark.parametrize("abi", [5, 4])
def test_c_and_python_channel_loops_make_the_same_calls(recording_plugin, tmp_path, abi):
    assert NATIVE_LIBRARY.is_file(), f"{NATIVE_LIBRARY} is not built: `make build-sim`"
    runs = {}
    for native in ("1", "0"):
        runs[native] = run_sim(
            recording_plugin,
            tmp_path / f"native-{native}",
            plugin_env={NATIVE_SWITCH: native},
            workload="tp-pp-dp",
            ranks=4,
            nodes=2,
            tp=2,
            pp=2,
            steps=1,
            abi=abi,
        )
    c_run, python_run = runs["1"], runs["0"]
    for run, loop in ((c_run, "c"), (python_run, "python")):
        assert run.summary["status"] == "completed", run.summary
        # each path is the one its run meant to take (a C part that failed to load would
        # leave both runs on the Python loop, and the comparison below empty of meaning)
        assert {t.run["kernel_channels"] for t in run.truths} == {loop}
    assert sorted(c_run.calls) == sorted(python_run.calls) == [0, 1, 2, 3]
    for rank, c_proc in c_run.calls.items():
        python_proc = python_run.calls[rank]
        assert_well_formed(c_proc, abi=abi)
        assert _kernels_in_order(c_proc) == _kernels_in_order(python_proc) > 0, f"rank {rank}"
        c_shape = _channel_calls(c_proc)
        assert c_shape == _channel_calls(python_proc), f"rank {rank}"
        assert any(channels for _, channels in c_shape), "no KernelCh event was made"
        for _, channels in c_shape:
            for index, (channel, tick, states, stops, after_start, _) in enumerate(channels):
                assert (channel, tick) == (index, index * CHANNEL_SKEW_NS)
                assert (states, stops, after_start) == ((KERNEL_CH_STOP,), 1, True)
        # the proxy thread's calls interleave with the host thread's differently run to run;
        # what each event got does not
        assert sorted(_call_kinds(c_proc)) == sorted(_call_kinds(python_proc)), f"rank {rank}"


def test_the_switch_leaves_the_c_loops_unused(recording_plugin, monkeypatch):
    """COMMINSIGHT_SIM_NATIVE=0 leaves the C functions unused (so the comparison above
    compares two paths), and without it they are used."""
    for switch, used in (("0", False), ("1", True)):
        monkeypatch.setenv(NATIVE_SWITCH, switch)
        plugin = ProfilerAbiV5(str(recording_plugin))
        assert (plugin._native_start is not None) == used, switch
        assert (plugin._native_stop is not None) == used, switch
