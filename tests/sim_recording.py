"""Test helpers for the simulated NCCL: build the recording plugin, run the sim, read its calls.

The recording plugin (tests/plugins/recording_plugin.c) writes one line per call it receives to
calls-<pid>.log; `ProcessCalls` indexes one process's lines by handle so tests can check the
event trees the simulated NCCL produced against what NCCL 2.28 does.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from comminsight.sim import SimConfig, run_simulation, summarize
from comminsight.sim.truth import RankTruth, read_ground_truth

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_SOURCE = ROOT / "tests" / "plugins" / "recording_plugin.c"
NULL = "(nil)"
TASK_TYPES = ("Coll", "P2p")


def build_recording_plugin(dest: Path) -> Path:
    cc = shutil.which("gcc") or shutil.which("cc")
    assert cc, "a C compiler is needed to build the recording plugin"
    out = dest / "librecording-plugin.so"
    subprocess.run(
        [
            cc,
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-shared",
            "-fPIC",
            "-pthread",
            f"-I{ROOT / 'generated' / 'c' / 'include'}",
            str(PLUGIN_SOURCE),
            "-o",
            str(out),
        ],
        check=True,
    )
    return out


@dataclass
class Call:
    index: int  # line number within the process's log
    name: str  # load, init, context, init_failed, start, stop, state, finalize, mask_switch
    fields: dict[str, str]

    def __getitem__(self, key: str) -> str:
        return self.fields[key]

    def get(self, key: str, default=None):
        return self.fields.get(key, default)

    def int(self, key: str) -> int:
        return int(self.fields[key])


def parse_line(index: int, line: str) -> Call:
    name, _, rest = line.partition(" ")
    fields = dict(item.split("=", 1) for item in rest.split() if "=" in item)
    return Call(index, name, fields)


@dataclass
class ProcessCalls:
    """Everything one process's plugin instance was called with, indexed by handle."""

    pid: int
    rank: int
    calls: list[Call]
    starts: dict[str, Call] = field(default_factory=dict)  # handle -> its start
    stops: dict[str, list[Call]] = field(default_factory=lambda: defaultdict(list))
    states: dict[str, list[Call]] = field(default_factory=lambda: defaultdict(list))
    children: dict[str, list[Call]] = field(default_factory=lambda: defaultdict(list))

    def __post_init__(self) -> None:
        for call in self.calls:
            if call.name == "start":
                assert call["h"] not in self.starts, f"handle reused: {call}"
                self.starts[call["h"]] = call
                self.children[call["parent"]].append(call)
            elif call.name == "stop":
                self.stops[call["h"]].append(call)
            elif call.name == "state":
                self.states[call["h"]].append(call)

    def of(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]

    def started(self, event_type: str) -> list[Call]:
        return [c for c in self.calls if c.name == "start" and c["type"] == event_type]

    def tasks(self) -> list[Call]:
        """Coll and P2p starts in the order the host issued them."""
        return [c for c in self.calls if c.name == "start" and c["type"] in TASK_TYPES]

    def kernel_channels(self, task: Call) -> list[Call]:
        return [c for c in self.children[task["h"]] if c["type"] == "KernelCh"]

    @property
    def types(self) -> set[str]:
        return {c["type"] for c in self.calls if c.name == "start"}

    @property
    def contexts(self) -> dict[str, str]:
        """context -> comm id"""
        return {c["ctx"]: c["comm"] for c in self.of("context")}


def load_calls(calls_dir: Path) -> dict[int, ProcessCalls]:
    """By rank (the RANK the plugin saw when it loaded)."""
    by_rank = {}
    for path in sorted(calls_dir.glob("calls-*.log")):
        lines = path.read_text().splitlines()
        calls = [parse_line(i, line) for i, line in enumerate(lines)]
        load = calls[0]
        assert load.name == "load", path
        by_rank[int(load["rank"])] = ProcessCalls(int(load["pid"]), int(load["rank"]), calls)
    return by_rank


@dataclass
class SimRun:
    summary: dict
    truths: list[RankTruth]
    calls: dict[int, ProcessCalls]
    run_dir: Path


def run_sim(plugin: Path, work: Path, *, plugin_env: dict | None = None, **settings) -> SimRun:
    """Run the simulation with the recording plugin; fast defaults, overridable."""
    calls_dir = work / "calls"
    calls_dir.mkdir(parents=True)
    env = {"RECORDING_PLUGIN_DIR": str(calls_dir), **(plugin_env or {})}
    defaults = {
        "ranks": 2,
        "steps": 2,
        "warmup_steps": 1,
        "model_params": 20_000_000,
        "layers": 4,
        "time_scale": 0.01,
        "hang_hold_s": 5.0,  # a loaded machine must not look hung
        "timeout_s": 120.0,
    }
    config = SimConfig(
        plugin=str(plugin),
        home=str(work / "home"),
        out=str(work / "truth"),
        env=tuple(env.items()),
        **{**defaults, **settings},
    )
    summary = summarize(run_simulation(config))
    run_dir = Path(summary["run_dir"])
    return SimRun(summary, read_ground_truth(run_dir), load_calls(calls_dir), run_dir)


# ---- checks shared by the tests ----

# NCCL's calls on the host thread for one op in its implicit group, every event enabled (v5)
HOST_SEQUENCE_V5 = [
    ("start", "GroupApi"),
    ("state", "23"),
    ("start", "*Api"),
    ("stop", "*Api"),
    ("state", "24"),
    ("start", "KernelLaunch"),
    ("stop", "KernelLaunch"),
    ("start", "Group"),
    ("start", "task"),
    ("stop", "task"),
    ("stop", "Group"),
    ("stop", "GroupApi"),
]

PARENT_TYPES_V5 = {
    "GroupApi": {None},
    "CollApi": {"GroupApi"},
    "P2pApi": {"GroupApi"},
    "KernelLaunch": {"GroupApi"},
    "Group": {None},
    "Coll": {"CollApi"},
    "P2p": {"P2pApi"},
    "KernelCh": {"Coll", "P2p"},
    "ProxyOp": {"Coll", "P2p"},
    "ProxyStep": {"ProxyOp"},
}
PARENT_TYPES_V4 = {
    "Group": {None},
    "Coll": {"Group"},
    "P2p": {"Group"},
    "KernelCh": {"Coll", "P2p"},
    "ProxyOp": {"Coll", "P2p"},
    "ProxyStep": {"ProxyOp"},
}


def assert_well_formed(proc: ProcessCalls, abi: int, *, all_stopped: bool = True) -> None:
    """Handles, parents, contexts, channel counts and stops of one process's event trees."""
    contexts = proc.contexts
    parent_types = PARENT_TYPES_V5 if abi == 5 else PARENT_TYPES_V4
    masks = {c["mask_ptr"] for c in proc.of("init")}
    assert len(masks) == 1, f"rank {proc.rank}: one process-global mask, got {masks}"
    assert {c["abi"] for c in proc.of("init")} == {str(abi)}
    for start in proc.starts.values():
        assert start["abi"] == str(abi)
        assert start["ctx"] in contexts, f"start on a context init never returned: {start}"
        parent = start["parent"]
        parent_start = proc.starts.get(parent) if parent != NULL else None
        if parent != NULL:
            assert parent_start is not None, f"parent is not a handle the plugin returned: {start}"
            assert parent_start.index < start.index, f"child before its parent: {start}"
            assert parent_start["ctx"] == start["ctx"]
        expected = parent_types[start["type"]]
        assert (parent_start["type"] if parent_start else None) in expected, start
        if abi == 5 and start["type"] in TASK_TYPES:
            group = proc.starts[start["pgroup"]]
            assert group["type"] == "Group" and group.index < start.index
        stops = proc.stops.get(start["h"], [])
        assert len(stops) <= 1, f"stopped twice: {start}"
        if all_stopped:
            assert len(stops) == 1, f"never stopped: {start}"
        if stops:
            assert stops[0].index > start.index
    for handle in proc.stops:
        assert handle in proc.starts, f"stop of a handle never started: {handle}"
    for task in proc.tasks():
        channels = proc.kernel_channels(task)
        if channels:
            assert len(channels) == task.int("nch") or abi == 4 and task["type"] == "P2p"
            assert sorted(c.int("ch") for c in channels) == list(range(len(channels)))
        for ch in channels:
            assert ch["tid"] != task["tid"], "KernelCh comes from the proxy thread, not the caller"
            states = proc.states.get(ch["h"], [])
            if proc.stops.get(ch["h"]):
                assert [s.int("state") for s in states] == [22]
                assert states[0].int("ptimer") > ch.int("ptimer")
                assert states[0].index < proc.stops[ch["h"]][0].index
    finalized = {c["ctx"] for c in proc.of("finalize")}
    if all_stopped:
        assert finalized == set(contexts), f"rank {proc.rank}: every context finalized once"
    assert len(proc.of("finalize")) == len(finalized)


def host_sequence(proc: ProcessCalls, group_api: Call) -> list[tuple[str, str]]:
    """The calls on the host thread from a GroupApi start to its stop, as (call, type)."""
    out = []
    for call in proc.calls[group_api.index :]:
        if call["tid"] != group_api["tid"]:
            continue
        if call.name == "start":
            kind = call["type"]
            kind = (
                "*Api" if kind in ("CollApi", "P2pApi") else "task" if kind in TASK_TYPES else kind
            )
            out.append(("start", kind))
        elif call.name == "stop":
            started = proc.starts[call["h"]]["type"]
            kind = "*Api" if started in ("CollApi", "P2pApi") else started
            out.append(("stop", "task" if started in TASK_TYPES else kind))
        elif call.name == "state":
            out.append(("state", call["state"]))
        if call.name == "stop" and call["h"] == group_api["h"]:
            return out
    return out
