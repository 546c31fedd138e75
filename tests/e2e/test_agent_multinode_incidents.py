"""A two-node job's fault as the master sees it: one incident across nodes, the culprit's stack
fetched from its node, and the incident resolved when the job ends or an operator says so.

A master and two slave `comminsight-agent` processes over real gRPC and HTTP; four simulated
ranks of TP x DP (tp=2 inside a node, dp=2 across the nodes) drive the real plugin, two per
slave home. Rank 3 on node-1 skips a tensor-parallel all-reduce and waits outside NCCL: its TP
peer (rank 2) waits for it on node-1, and node-0's ranks wait in data-parallel collectives
that ranks 2 and 3 never reach. Only the master sees all four ranks, so only its incident can
hold node-0's reports under a root that blames rank 3 on node-1.

With Inject in the ranks (a sitecustomize does what a training process's .pth line and first
process group do: the simulated ranks are Python processes, their main thread sleeps between
polls, so Inject's stack handler runs there) the master asks node-1 for rank 3's stack over
gRPC and the incident carries its frames; node-1 signals the process once, however many of
its own and the master's incidents ask. Without Inject the incident says why there is none.
"""

from __future__ import annotations

import os
import re
import textwrap
import threading
from pathlib import Path

import httpx
import pytest
from agent_processes import cli
from multinode_job import SIM_ENV, TOKEN, start_job
from prometheus_client.parser import text_string_to_metric_families
from stack_processes import FAKE_TORCH
from waiting import wait_until

from comminsight.sim import SimConfig, parse_fault, read_ground_truth, run_simulation
from comminsight.sim.board import Board
from comminsight.sim.workloads import build_plan

RANKS, NODES = 4, 2
CULPRIT, CULPRIT_NODE = 3, "node-1"
FAULT = "skip:rank=3,op=5,comm=tp"
# The test ends the run itself (Board.abort) once it has looked; the hold only bounds a run
# whose test failed before that.
HOLD_S = 240.0
DEADLINE_S = 120  # generous: a loaded 2-core machine runs four ranks and three agents
# The job's stack settings, the same on every Agent (the master waits for a slave's answer
# its own timeout plus a margin): one signal per process for the whole test, whatever asks
STACKS = {
    "COMMINSIGHT_AGENT_STACK_INTERVAL_S": "3600",
    "COMMINSIGHT_AGENT_STACK_TIMEOUT_S": "20",
}
SLAVE_EXTRA = {"COMMINSIGHT_SEMANTIC_ENABLE": "0", **STACKS}

# What the .pth line and a first process group do in a training process: Inject installs its
# import hook, and the group's creation registers the stack handler and announces it
SITECUSTOMIZE = textwrap.dedent(
    """
    from comminsight.inject import startup
    startup.install()
    import torch.distributed.distributed_c10d as c10d
    c10d._new_process_group_helper(
        1, 0, [], "gloo", None, "0", timeout=5, group_desc="sim_rank_probe"
    )
    """
)


class SimRun:
    """The simulated job in a thread of the test; `end()` aborts it as a launcher would."""

    def __init__(self, plugin, root: Path, job) -> None:
        self.config = SimConfig(
            plugin=str(plugin),
            home=str(root / "sim"),
            out=str(root / "run"),
            workload="tp-dp",
            ranks=RANKS,
            nodes=NODES,
            tp=2,
            node_homes=tuple(str(s.home) for s in job.slaves),
            steps=2,
            time_scale=0.02,
            hang_hold_s=HOLD_S,
            faults=(parse_fault(FAULT),),
            env=SIM_ENV,
        )
        self.result = {}
        self.thread = threading.Thread(
            target=lambda: self.result.setdefault("sim", run_simulation(self.config))
        )

    def start(self) -> SimRun:
        self.thread.start()
        return self

    def stop(self) -> None:
        """Abort the run (every rank leaves its wait and exits) and wait for it."""
        board_path = Path(self.config.out) / "board.bin"
        # the launcher may still be preparing the run
        wait_until(
            lambda: not self.thread.is_alive() or board_path.exists(), 120, "the run's board"
        )
        if self.thread.is_alive():
            instances = len(build_plan(self.config).instances)
            Board.attach(board_path, RANKS, instances).abort()
        self.thread.join()

    def end(self) -> list:
        """stop(), then the run's ground truth."""
        self.stop()
        sim = self.result["sim"]
        assert not sim.errors, sim.errors
        return read_ground_truth(sim.run_dir)


class PythonPath:
    """PYTHONPATH with `directory` first while the ranks start (the launcher hands the test
    process's PYTHONPATH on to them); the agents started before it and keep their own."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.before = os.environ.get("PYTHONPATH")

    def __enter__(self) -> PythonPath:
        parts = [str(self.directory)] + ([self.before] if self.before else [])
        os.environ["PYTHONPATH"] = os.pathsep.join(parts)
        return self

    def __exit__(self, *exc) -> None:
        if self.before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = self.before


def inject_path(root: Path) -> Path:
    """A directory with the sitecustomize above and a stand-in torch for it to import."""
    directory = root / "inject-path"
    directory.mkdir()
    (directory / "sitecustomize.py").write_text(SITECUSTOMIZE)
    for rel, text in FAKE_TORCH.items():
        target = directory / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return directory


# ---- what the master shows -----------------------------------------------------------------


def open_incidents(agent) -> list[dict]:
    return agent.get("/api/v1/incidents").json()["items"]


def detail(agent, incident_id: str) -> dict:
    return agent.get(f"/api/v1/incidents/{incident_id}").json()


def open_hangs(agent) -> list[dict]:
    items = agent.get("/api/v1/hangs").json()["items"]
    return [r for r in items if r["verdict"] != "straggler"]


def culprits(report_or_root: dict) -> list[tuple]:
    return [(c.get("global_rank"), c["node_name"]) for c in report_or_root["culprits"]]


def waits_on(report: dict, node: str) -> bool:
    """Some rank of `node` has the report's op in flight: it waits there."""
    return any(e["node_name"] == node and e.get("inflight") for e in report["evidence"])


def without_numbers(text: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "N", text)


def whole_picture(master, stack_settled):
    """The master's one incident once every report it holds is in it, node-0's waits among
    them, and the culprit's stack entry has arrived (`stack_settled(entries)`); else None."""
    incidents = open_incidents(master)
    if len(incidents) != 1 or culprits(incidents[0]["root"]) != [(CULPRIT, CULPRIT_NODE)]:
        return None
    got = detail(master, incidents[0]["incident_id"])
    held = {r["report_id"] for r in got["reports"]}
    if not {r["report_id"] for r in open_hangs(master)} <= held:
        return None  # a report not (yet) folded in
    root_id = got["incident"]["root"]["report_id"]
    consequences = [r for r in got["reports"] if r["report_id"] != root_id]
    if not any(waits_on(r, "node-0") for r in consequences):
        return None  # node-0's ranks not yet waiting past the threshold
    culprit_pid = got["incident"]["root"]["culprits"][0].get("pid")
    entries = [s for s in got["incident"]["stacks"] if s["pid"] == culprit_pid]
    if not stack_settled(entries):
        return None
    return got


def metric_samples(text: str, name: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def stack_metrics(agent) -> dict:
    text = agent.get("/metrics").text
    outcomes = metric_samples(text, "comminsight_stack_requests_total")
    return {
        "requests": {dict(k)["outcome"]: v for k, v in outcomes.items()},
        "signals": metric_samples(text, "comminsight_stack_signals_total")[()],
        "pending": metric_samples(text, "comminsight_stack_requests_pending")[()],
    }


def master_stack_metrics(master) -> dict[str, float]:
    samples = metric_samples(master.get("/metrics").text, "comminsight_master_stack_requests_total")
    return {dict(k)["outcome"]: v for k, v in samples.items()}


def node_incident_with_stack(agent, pid: int) -> dict | None:
    """An incident of this node's own diagnosis that carries a stack entry for `pid`."""
    for incident in open_incidents(agent):
        got = detail(agent, incident["incident_id"])["incident"]
        if any(s["pid"] == pid for s in got["stacks"]):
            return got
    return None


def ended(master, incident_id: str) -> dict | None:
    got = detail(master, incident_id)["incident"]
    return got if got["status"] == "resolved" else None


# ---- the jobs ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def with_inject(plugin, tmp_path_factory):
    """The fault with Inject in every rank: what the master and node-1 showed while it hung,
    what the CLI printed, and how it ended."""
    root = tmp_path_factory.mktemp("incidents-inject")
    (root / "sim").mkdir()
    job = start_job(root, NODES, master_extra=STACKS, slave_extra=SLAVE_EXTRA)
    seen = {}
    sim = SimRun(plugin, root, job)
    try:
        with PythonPath(inject_path(root)):
            sim.start()
            seen["open"] = wait_until(
                lambda: whole_picture(job.master, lambda e: e and e[0]["status"] == "captured"),
                DEADLINE_S,
                lambda: (
                    "no single incident with the culprit's stack on the master:\n"
                    f"{open_incidents(job.master)}\n{job.master.log_text()[-3000:]}"
                ),
            )
        pid = seen["open"]["incident"]["root"]["culprits"][0]["pid"]
        node1 = job.slaves[1]
        seen["node1_incident"] = wait_until(
            lambda: node_incident_with_stack(node1, pid),
            DEADLINE_S,
            lambda: f"node-1's own incident got no stack:\n{open_incidents(node1)}",
        )
        seen["node1_metrics"] = wait_until(
            lambda: (m := stack_metrics(node1))["pending"] == 0 and m,
            DEADLINE_S,
            "node-1 still waits for a stack",
        )
        seen["node0_metrics"] = stack_metrics(job.slaves[0])
        seen["master_metrics"] = master_stack_metrics(job.master)
        seen["stack_files"] = sorted(
            p.name for p in (node1.home / "metadata" / "stacks").glob("*.json")
        )
        url = f"http://{job.master.listen}"
        incident_id = seen["open"]["incident"]["incident_id"]
        seen["cli"] = cli("incidents", url=url)
        seen["cli_tree"] = cli("incidents", "--tree", url=url)
        seen["cli_id"] = cli("incidents", "--id", incident_id, url=url)
        seen["truths"] = sim.end()
        seen["ended"] = wait_until(
            lambda: ended(job.master, incident_id),
            DEADLINE_S,
            lambda: f"the incident stayed open after the job ended:\n{open_incidents(job.master)}",
        )
        seen["all_after"] = job.master.get("/api/v1/incidents", status="all").json()["items"]
        seen["open_after"] = open_incidents(job.master)
        yield seen
    finally:
        sim.stop()
        job.stop()


@pytest.fixture(scope="module")
def without_inject(plugin, tmp_path_factory):
    """The same fault with no Inject anywhere, resolved by an operator while it hangs."""
    root = tmp_path_factory.mktemp("incidents-plain")
    (root / "sim").mkdir()
    job = start_job(root, NODES, master_extra=STACKS, slave_extra=SLAVE_EXTRA)
    seen = {}
    sim = SimRun(plugin, root, job).start()
    try:
        seen["open"] = wait_until(
            lambda: whole_picture(job.master, lambda e: bool(e)),
            DEADLINE_S,
            lambda: (
                "no single incident with a stack entry on the master:\n"
                f"{open_incidents(job.master)}\n{job.master.log_text()[-3000:]}"
            ),
        )
        seen["node1_metrics"] = stack_metrics(job.slaves[1])
        seen["master_metrics"] = master_stack_metrics(job.master)
        incident_id = seen["open"]["incident"]["incident_id"]
        resolve = f"http://{job.master.listen}/api/v1/incidents/{incident_id}/resolve"
        seen["unauthorized"] = httpx.post(resolve, json={}, timeout=10).status_code
        seen["resolved"] = httpx.post(
            resolve,
            json={"note": "rank 3 restarted"},
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        ).json()
        seen["open_after_resolve"] = open_incidents(job.master)
        seen["hangs_after_resolve"] = job.master.get("/api/v1/hangs", status="all").json()["items"]
        seen["truths"] = sim.end()
        seen["after_end"] = detail(job.master, incident_id)["incident"]
        yield seen
    finally:
        sim.stop()
        job.stop()


# ---- with Inject ---------------------------------------------------------------------------


def test_the_master_holds_one_incident_rooted_at_the_culprit_on_its_node(with_inject):
    got = with_inject["open"]
    incident, reports = got["incident"], got["reports"]
    assert incident["diagnosed_by"] == "master" and incident["severity"] == "critical"
    assert culprits(incident["root"]) == [(CULPRIT, CULPRIT_NODE)]
    pid = incident["root"]["culprits"][0]["pid"]
    assert pid == with_inject["truths"][CULPRIT].run["pid"]
    root_id = incident["root"]["report_id"]
    consequences = [r for r in reports if r["report_id"] != root_id]
    # the reports of node-0's waits are consequences (info), never a root of their own
    assert any(waits_on(r, "node-0") for r in consequences)
    assert all(r["severity"] == "info" for r in consequences)
    assert [r["severity"] for r in reports if r["report_id"] == root_id] == ["critical"]
    assert {c["report_id"] for c in incident["consequences"]} == {
        r["report_id"] for r in consequences
    }
    # every consequence names the report it follows from, inside this incident
    held = {r["report_id"] for r in reports}
    assert all(c["follows_from"] in held for c in incident["consequences"])


def test_the_culprits_stack_comes_from_its_node_through_the_master(with_inject):
    incident = with_inject["open"]["incident"]
    pid = incident["root"]["culprits"][0]["pid"]
    entries = [s for s in incident["stacks"] if s["pid"] == pid]
    main = entries[0]
    assert main["status"] == "captured" and main["node_name"] == CULPRIT_NODE
    assert main["rank"] == CULPRIT
    # where the rank that skipped the all-reduce waits instead of calling NCCL
    functions = [f["function"] for f in main["frames"]]
    assert functions[0].endswith("_wait_for_abort"), functions
    assert any(f["file"].endswith("rank_process.py") for f in main["frames"])


def test_node1_signals_the_culprit_once_for_every_incident_that_asks(with_inject):
    """node-1's own diagnosis (ranks 2 and 3) opens an incident of its own and asks too: one
    signal answers both, counted in node-1's metrics."""
    pid = with_inject["open"]["incident"]["root"]["culprits"][0]["pid"]
    own = with_inject["node1_incident"]
    assert any(s["status"] == "captured" for s in own["stacks"] if s["pid"] == pid)
    # Inject wrote one dump per process signalled: the culprit's is its first and only one
    files = with_inject["stack_files"]
    assert f"{pid}-0.json" in files and all(f.endswith("-0.json") for f in files), files
    metrics = with_inject["node1_metrics"]
    assert metrics["signals"] == len(files) and metrics["pending"] == 0
    requests = metrics["requests"]
    assert requests["captured"] == len(files)
    assert requests["rate_limited"] >= 1  # the second asker got the first one's answer
    assert sum(requests.values()) == requests["captured"] + requests["rate_limited"]
    # node-0 holds none of the culprits: it sends nothing
    assert with_inject["node0_metrics"]["signals"] == 0
    # the master asked node-1 (once per root it fetched for) and got every answer
    master = with_inject["master_metrics"]
    assert master["answered"] >= 1
    assert sum(master.values()) == master["answered"]


def test_the_cli_against_the_master_shows_the_root_first(with_inject):
    incident = with_inject["open"]["incident"]
    pid = incident["root"]["culprits"][0]["pid"]
    out = with_inject["cli"]
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Incidents (open): 1" in text and incident["incident_id"] in text
    root_line = next(line for line in text.splitlines() if "root cause:" in line)
    assert f"rank {CULPRIT} (" in root_line and f"pid {pid})" in root_line
    assert f"+ {len(incident['consequences'])} consequence(s) blocked behind it" in text
    tree = with_inject["cli_tree"].stdout.splitlines()
    first = next(i for i, line in enumerate(tree) if "(root)" in line)
    assert incident["root"]["report_id"] in tree[first]
    below = [without_numbers(line) for line in tree[first + 1 :]]
    for c in incident["consequences"]:  # each below the root
        # (as the master listed it a moment before: how long it has waited has changed since)
        assert any(without_numbers(c["reason"])[:60] in line for line in below), c
    shown = with_inject["cli_id"].stdout
    assert "Python stacks:" in shown and "_wait_for_abort" in shown
    assert shown.index("root cause:") < shown.index("Python stacks:")


def test_the_incident_resolves_when_the_job_ends(with_inject):
    incident_id = with_inject["open"]["incident"]["incident_id"]
    ended_incident = with_inject["ended"]
    assert ended_incident["resolution"] in ("comm_finalized", "op_completed"), ended_incident
    assert with_inject["open_after"] == []
    # the teardown opened nothing new: every other incident the master ever held was merged
    # into this one
    others = [i for i in with_inject["all_after"] if i["incident_id"] != incident_id]
    assert all(i.get("merged_into") == incident_id for i in others), others


# ---- without Inject ------------------------------------------------------------------------


def test_without_inject_the_incident_says_why_there_is_no_stack(without_inject):
    incident = without_inject["open"]["incident"]
    assert culprits(incident["root"]) == [(CULPRIT, CULPRIT_NODE)]
    pid = incident["root"]["culprits"][0]["pid"]
    (entry,) = [s for s in incident["stacks"] if s["pid"] == pid]
    assert entry["status"] == "unavailable" and entry["node_name"] == CULPRIT_NODE
    assert entry["unavailable_reason"].startswith("Inject is not in this process")
    requests = without_inject["node1_metrics"]["requests"]
    assert requests["unavailable_no_inject"] >= 1 and requests["captured"] == 0
    assert without_inject["node1_metrics"]["signals"] == 0
    master = without_inject["master_metrics"]  # node-1 answered: with the reason
    assert master["answered"] >= 1 and sum(master.values()) == master["answered"]


def test_an_operator_resolves_the_masters_incident(without_inject):
    assert without_inject["unauthorized"] == 401
    resolved = without_inject["resolved"]
    assert resolved["status"] == "resolved" and resolved["resolution"] == "operator"
    assert resolved["resolution_note"] == "rank 3 restarted"
    assert without_inject["open_after_resolve"] == []
    incident = without_inject["open"]["incident"]
    mine = {incident["root"]["report_id"], *(c["report_id"] for c in incident["consequences"])}
    hangs = {r["report_id"]: r for r in without_inject["hangs_after_resolve"]}
    assert {hangs[rid]["resolution"] for rid in mine} == {"operator"}
    # the job's end does not re-resolve it: an operator's resolution stands
    after = without_inject["after_end"]
    assert after["status"] == "resolved" and after["resolution"] == "operator"
