"""Faults inside real training, checked as the Agent's incidents (GPU machine, 2 ranks).

    python3 bench/gpu/faults_driver.py --out $OUT --faults none,sleep,skip,extra,sendsend

For each fault: a fresh COMMINSIGHT_HOME and a live Agent on its own port with the hang
threshold (COMMINSIGHT_PROFILER_HANG_TIMEOUT_S, also given to the ranks' plugin), then the two
ranks of bench/gpu/fault_train.py started directly (no torchrun: a launcher would tear a hung
job down). /api/v1/incidents?status=all is polled every 0.1 s. A fault run ends once an
incident has been open for --settle-s (a second incident would show by then) and the stacks
of its root's culprits are attached (or --stack-wait-s passed); the control (`none`) ends when
its ranks exit. Then the ranks are SIGKILLed, each incident is read whole
(/api/v1/incidents/{id}), the Agent is stopped, and bench/gpu/faults_report.py scores the run.

Writes under --out: faults.jsonl (one scored line per fault), incidents.jsonl (every incident
with its reports, as served), faults_summary.md (the table). Started by
bench/gpu/run_faults.sh, which builds the plugin, installs Inject and the Agent's dependencies
and exports AGENT_PYTHONPATH. Standard library only.

`--cpu` (or E2E_CPU=1): the ranks run on gloo without GPUs or plugin, a dry run of the logic;
no incident can open then, so the fault lines fail by design.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agent_api  # noqa: E402
import faults_report  # noqa: E402
from agent_api import Incident, IncidentDetail  # noqa: E402
from e2e_driver import (  # noqa: E402
    PLUGIN,
    PY,
    ROOT,
    Agent,
    Out,
    clean_shm,
    env_with,
    free_port,
    log,
    read_events,
)

JOB = ROOT / "bench" / "gpu" / "fault_train.py"


def start_ranks(home: Path, fault: str, args) -> list[subprocess.Popen]:
    port = free_port()
    ranks = []
    for r in range(2):
        env = env_with(
            COMMINSIGHT_HOME=home,
            COMMINSIGHT_PROFILER_HANG_TIMEOUT_S=args.threshold_s,
            NCCL_PROFILER_PLUGIN="none" if args.cpu else PLUGIN,
            RANK=r,
            LOCAL_RANK=r,
            WORLD_SIZE=2,
            LOCAL_WORLD_SIZE=2,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            TORCH_NCCL_ASYNC_ERROR_HANDLING=args.async_error_handling or None,
        )
        cmd = [
            PY,
            str(JOB),
            "--fault",
            fault,
            "--at",
            str(args.at),
            "--events",
            str(home / "events"),
        ]
        cmd += ["--fault-rank", str(args.fault_rank), "--sleep-s", str(args.sleep_s)]
        if args.cpu:
            cmd.append("--cpu")
        cmd += args.job_args.split()
        logf = open(home / f"rank{r}.log", "wb")  # noqa: SIM115 - closed with the process
        ranks.append(
            subprocess.Popen(
                cmd, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True
            )
        )
    return ranks


def incidents_now(agent: Agent | None) -> list[Incident]:
    if agent is None:
        return []
    try:
        return agent_api.incidents(agent.url)
    except agent_api.UNREACHABLE as e:
        log(f"incidents poll: {e}")
        return []


def incident_whole(agent: Agent | None, incident_id: str, last: Incident) -> dict:
    """The incident with its reports, as the API served it (what faults_report scores); the
    last listed version when the Agent cannot say."""
    if agent is not None:
        try:
            detail = agent_api.incident_detail(agent.url, incident_id)
        except agent_api.UNREACHABLE as e:
            detail = None
            log(f"incident {incident_id}: {e}")
        if detail is not None:
            return detail.to_dict()
        log(f"incident {incident_id}: not served")
    return IncidentDetail(incident=last, reports=[]).to_dict()


def stacks_cover_culprits(incident: Incident) -> bool:
    # a culprit is named by its global rank where known, as the stacks are
    culprits = {
        g if (g := agent_api.known(c.global_rank)) is not None else c.comm_rank
        for c in incident.root.culprits
    }
    return culprits <= {s.rank for s in incident.stacks}


def nccl_warnings(text: str, limit: int = 6) -> list[str]:
    return [line[:300] for line in text.splitlines() if "NCCL WARN" in line][:limit]


def watch(fault: str, agent: Agent | None, ranks: list[subprocess.Popen], args):
    """Poll the incidents until the run has shown what it will show: (first sighting per
    incident id, the latest listing of each, why the watch ended)."""
    seen: dict[str, int] = {}  # incident id -> CLOCK_MONOTONIC of the poll that first listed it
    latest: dict[str, Incident] = {}
    first_at = exited_at = None
    deadline = time.monotonic() + args.job_deadline_s
    while time.monotonic() < deadline:
        now_ns = time.monotonic_ns()
        for inc in incidents_now(agent):
            iid = inc.incident_id
            if iid not in seen:
                seen[iid] = now_ns
                log(f"{fault}: incident {iid} {inc.root.verdict.value}: {inc.root.summary[:200]}")
            latest[iid] = inc
        now = time.monotonic()
        # reap every rank each pass (an unreaped dead rank is a zombie whose pid still answers)
        done = all([p.poll() is not None for p in ranks])
        if done and exited_at is None:
            exited_at = now
        if latest and first_at is None:
            first_at = now
        if first_at is not None and fault != "none":
            oldest = min(latest.values(), key=lambda i: i.opened_mono_ns)
            waited = now - first_at
            if waited >= args.settle_s and (
                stacks_cover_culprits(oldest) or waited >= args.stack_wait_s
            ):
                return seen, latest, "incident"
        if exited_at is not None and now - exited_at >= args.exit_grace_s:
            return seen, latest, "ranks_exited"
        time.sleep(0.1)
    return seen, latest, "deadline"


def run_one(fault: str, args, out: Out, incidents_path: Path) -> dict:
    home = Path(tempfile.mkdtemp(prefix=f"ci_fault_{fault}_"))
    agent = None
    ranks: list[subprocess.Popen] = []
    t_start = time.monotonic()
    try:
        if not args.no_agent:
            agent = Agent(home, COMMINSIGHT_PROFILER_HANG_TIMEOUT_S=args.threshold_s)
        ranks = start_ranks(home, fault, args)
        seen, latest, ended = watch(fault, agent, ranks, args)
        details = [incident_whole(agent, iid, latest[iid]) for iid in sorted(seen)]
    finally:
        for p in ranks:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # it may end meanwhile
                    os.killpg(p.pid, signal.SIGKILL)
        rcs = [p.wait() for p in ranks]
        if agent is not None:
            agent.stop()
    events = read_events(home / "events")
    res = faults_report.evaluate(fault, args.threshold_s, events, details, seen, rcs)
    logs = {r: (home / f"rank{r}.log").read_text(errors="replace") for r in range(2)}
    res.update(
        ended=ended,
        wall_s=round(time.monotonic() - t_start, 1),
        async_error_handling=args.async_error_handling,
        nccl_warnings={r: nccl_warnings(t) for r, t in logs.items() if nccl_warnings(t)},
    )
    if not res["pass"]:
        res["rank_log_tails"] = {r: t[-1200:] for r, t in logs.items()}
        res["agent_log_tail"] = agent.tail()[-1200:] if agent is not None else ""
    with open(incidents_path, "a") as f:
        for d in details:
            f.write(json.dumps({"fault": fault, **d}) + "\n")
    out("gpu_fault", f"fault_{fault}", res["pass"], "pass", **res)
    clean_shm(home)
    if args.keep_homes:
        log(f"{fault}: home kept at {home}")
    else:
        shutil.rmtree(home, ignore_errors=True)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--faults", default="none,sleep,skip,extra,sendsend")
    ap.add_argument("--threshold-s", type=float, default=5.0)
    ap.add_argument("--at", type=int, default=8)
    ap.add_argument("--fault-rank", type=int, default=1)
    ap.add_argument("--sleep-s", type=float, default=120.0)
    ap.add_argument("--settle-s", type=float, default=2.0, help="watch for a 2nd incident")
    ap.add_argument("--stack-wait-s", type=float, default=6.0)
    ap.add_argument("--exit-grace-s", type=float, default=3.0)
    ap.add_argument("--job-deadline-s", type=float, default=75.0)
    ap.add_argument("--deadline-s", type=float, default=330.0, help="no fault starts past it")
    ap.add_argument(
        "--async-error-handling",
        default="0",
        help="TORCH_NCCL_ASYNC_ERROR_HANDLING for the ranks ('' leaves torch's default)",
    )
    ap.add_argument("--job-args", default="", help="more fault_train.py arguments")
    ap.add_argument("--cpu", action="store_true", default=bool(os.environ.get("E2E_CPU")))
    ap.add_argument("--no-agent", action="store_true")
    ap.add_argument("--keep-homes", action="store_true")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = Out(out_dir / "faults.jsonl")
    t_end = time.monotonic() + args.deadline_s
    results = []
    for fault in args.faults.split(","):
        if time.monotonic() > t_end:
            log(f"deadline: fault {fault} not run")
            results.append(
                out(
                    "gpu_fault",
                    f"fault_{fault}",
                    False,
                    "pass",
                    fault=fault,
                    error="not run: past --deadline-s",
                )
            )
            continue
        log(f"== fault {fault}")
        try:
            results.append(run_one(fault, args, out, out_dir / "incidents.jsonl"))
        except Exception as e:  # one fault's breakage must not cost the others
            results.append(
                out("gpu_fault", f"fault_{fault}", False, "pass", fault=fault, error=repr(e))
            )
    table = faults_report.markdown(results)
    (out_dir / "faults_summary.md").write_text(table)
    print(table, flush=True)
    return 0 if all(r.get("pass") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
