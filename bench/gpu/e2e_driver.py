"""End to end on the GPU machine: hang localization, training throughput with and without
CommInsight, fail-open, and the jobs whose logs score step recovery. Standard library only
(it runs under the image's python3; the Agent gets its own PYTHONPATH).

    python3 bench/gpu/e2e_driver.py --out $OUT --sections hangs,train,failopen,tpdp

Run by bench/gpu/run_e2e.sh, which builds the plugin, installs Inject and the Agent's
dependencies and exports AGENT_PYTHONPATH. Every job gets a fresh COMMINSIGHT_HOME; the Agent
is started here (COMMINSIGHT_AGENT_AUTOSTART=0) on its own port. Writes, under --out:
  hangs.jsonl          one line per fault: the first critical report on the job's communicator
                       (verdict, culprits, comm, op), detection latency, pass/fail
  hang_reports.jsonl   every hang report the Agent kept (metadata/hangs/, final status)
  train.jsonl          one line per training run (throughput, logs check), the ratios, the
                       fail-open runs
  steps.tar.gz         logs + Inject step markers + job output of the runs kept for step
                       recovery (bench/gpu/e2e_report.py runs the Semantic Engine on them)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agent_api  # noqa: E402
import ci_logs  # noqa: E402
from agent_api import Severity  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "dist" / "libnccl-profiler-comminsight.so"
INSPECTOR_PLUGIN = ROOT / "build" / "gpu" / "libnccl-profiler-inspector.so"
PY = sys.executable
BASE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "COMMINSIGHT_AGENT_AUTOSTART": "0",
    "PYTHONUNBUFFERED": "1",
    "NCCL_DEBUG": "WARN",
}
EXPECTED_VERDICTS = {
    "skip": {"stuck_outside_nccl", "rank_not_joined"},
    "sleep": {"stuck_outside_nccl", "rank_not_joined"},
    "kill": {"process_died"},
    "mismatch": {"op_mismatch"},
    "mismatch_count": {"op_mismatch"},
    "p2p_skip": {"stuck_outside_nccl", "rank_not_joined"},
}


class Out:
    def __init__(self, path: Path):
        self.f = open(path, "a", buffering=1)  # noqa: SIM115

    def __call__(self, bench: str, metric: str, value, unit: str = "", **kw) -> dict:
        line = {"bench": bench, "metric": metric, "value": value, "unit": unit, **kw}
        self.f.write(json.dumps(line) + "\n")
        print(json.dumps(line)[:600], flush=True)
        return line


def log(msg: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def env_with(**kw) -> dict:
    env = dict(os.environ)
    env.update(BASE_ENV)
    env.update({k: str(v) for k, v in kw.items() if v is not None})
    return env


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report_seen(report_id: str, sighting: dict, final, t0: int) -> dict:
    """One hang report as the run saw it: when it first appeared and how it ended."""
    report = sighting["report"]
    op = agent_api.known(report.op)
    resolution = agent_api.known(final.resolution)
    return {
        "report_id": report_id,
        "verdict": report.verdict.value,
        "severity": report.severity.value,
        "comm_name": agent_api.known(report.comm.comm_name),
        "culprits": [c.comm_rank for c in report.culprits],
        "op": op.to_dict() if op else None,
        "detected_after_s": round((report.detected_mono_ns - t0) / 1e9, 3),
        "api_seen_after_s": round((sighting["first_seen_mono_ns"] - t0) / 1e9, 3),
        "final_status": final.status.value,
        "resolution": resolution.value if resolution else None,
        "summary": report.summary,
    }


# ---- the Agent ----


class Agent:
    def __init__(self, home: Path, **extra):
        self.home, self.port = home, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = env_with(
            COMMINSIGHT_HOME=home,
            COMMINSIGHT_AGENT_LISTEN=f"127.0.0.1:{self.port}",
            PYTHONPATH=os.environ.get("AGENT_PYTHONPATH", ""),
            **extra,
        )
        self.logf = open(home / "agent.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [PY, "-m", "comminsight.agent.main"],
            env=env,
            cwd=home,  # not the checkout: AGENT_PYTHONPATH's comminsight is the one to import
            stdout=self.logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited rc={self.proc.returncode}: {self.tail()}")
            with contextlib.suppress(*agent_api.UNREACHABLE):
                if agent_api.health(self.url) is not None:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"agent not healthy in 30 s: {self.tail()}")

    def tail(self) -> str:
        try:
            return (self.home / "agent.log").read_text(errors="replace")[-1500:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        return self.proc.returncode


def clean_shm(home: Path) -> None:
    for link in (home / "shms").glob("*") if (home / "shms").is_dir() else []:
        try:
            target = Path(os.path.realpath(link))
            if str(target).startswith("/dev/shm/"):
                target.unlink(missing_ok=True)
        except OSError:
            pass


# ---- scenario 3: hangs ----


def read_events(d: Path) -> dict[int, list[dict]]:
    out = {}
    for p in sorted(d.glob("rank*.jsonl")):
        rows = []
        for line in p.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
        out[int(p.stem[4:])] = rows
    return out


def run_fault(out: Out, fault: str, threshold_s: float, at: int, sleep_s: float) -> dict:
    home = Path(tempfile.mkdtemp(prefix=f"ci_hang_{fault}_"))
    agent = Agent(home, COMMINSIGHT_PROFILER_HANG_TIMEOUT_S=threshold_s)
    port = free_port()
    ranks = []
    for r in range(2):
        env = env_with(
            COMMINSIGHT_HOME=home,
            COMMINSIGHT_PROFILER_HANG_TIMEOUT_S=threshold_s,
            NCCL_PROFILER_PLUGIN=PLUGIN,
            RANK=r,
            LOCAL_RANK=r,
            WORLD_SIZE=2,
            LOCAL_WORLD_SIZE=2,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        cmd = [PY, str(ROOT / "bench/gpu/hang_job.py"), "--fault", fault, "--at", str(at)]
        cmd += ["--sleep-s", str(sleep_s), "--events", str(home / "events")]
        logf = open(home / f"rank{r}.log", "wb")  # noqa: SIM115
        ranks.append(
            subprocess.Popen(
                cmd, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True
            )
        )
    t_start = time.monotonic_ns()
    seen: dict[str, dict] = {}  # report_id -> first sighting
    critical_at = None
    deadline = time.monotonic() + 40 + threshold_s + (sleep_s if fault == "sleep" else 0)
    exited_at = None
    while time.monotonic() < deadline:
        now = time.monotonic_ns()
        try:
            reports = agent_api.hang_reports(agent.url)
        except agent_api.UNREACHABLE as e:
            reports = []
            log(f"hangs poll: {e}")
        for rep in reports:
            rid = rep.report_id
            if rid not in seen:
                seen[rid] = {"first_seen_mono_ns": now, "report": rep}
                log(f"{fault}: {rep.verdict.value} {rep.summary[:200]}")
            seen[rid]["last"] = rep
            if rep.severity == Severity.CRITICAL and critical_at is None:
                critical_at = now
        # poll (reap) every rank each pass, as a launcher does: an unreaped SIGKILLed rank is
        # a zombie whose pid still exists
        done = all([p.poll() is not None for p in ranks])
        if done and exited_at is None:
            exited_at = time.monotonic()
        if fault == "sleep":
            if exited_at is not None and time.monotonic() - exited_at > 3:
                break
        elif critical_at is not None and now - critical_at > 2e9:
            break
        elif done and exited_at is not None and time.monotonic() - exited_at > 3:
            break
        time.sleep(0.1)
    for p in ranks:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    for p in ranks:
        p.wait()
    time.sleep(1.0)
    try:
        final = agent_api.hang_reports(agent.url)
    except agent_api.UNREACHABLE:
        final = []
    agent.stop()
    events = read_events(home / "events")
    reports_on_disk = []
    for p in sorted((home / "metadata" / "hangs").glob("*.json")):
        try:
            reports_on_disk.append(json.loads(p.read_text()))
        except ValueError:
            pass
    with open(Path(out.f.name).parent / "hang_reports.jsonl", "a") as f:
        for rep in reports_on_disk:
            f.write(json.dumps({"fault": fault, **rep}) + "\n")

    # ground truth
    start0 = next((e for e in events.get(0, []) if e["ev"] == "start"), {})
    group = start0.get("group")
    fault_ev = next((e for e in events.get(1, []) if e["ev"] == "fault"), None)
    # the op rank 0 hangs in: the all-reduce of step `at`, or with p2p_skip its Recv
    index_key = "p2p_index" if fault.startswith("p2p") else "op_index"
    enq0 = next(
        (e for e in events.get(0, []) if e["ev"] == "enqueue" and e.get(index_key) == at), None
    )
    t0 = max(x["mono_ns"] for x in (fault_ev, enq0) if x) if (fault_ev or enq0) else t_start
    if fault == "sleep" and enq0:
        t0 = enq0["mono_ns"]
    crit = sorted(
        (s for s in seen.values() if s["report"].severity == Severity.CRITICAL),
        key=lambda s: s["report"].detected_mono_ns,
    )
    first = crit[0]["report"] if crit else None
    final_by_id = {r.report_id: r for r in final}
    res = {
        "fault": fault,
        "threshold_s": threshold_s,
        "at_op_index": at,
        "expected": {
            "verdicts": sorted(EXPECTED_VERDICTS[fault]),
            "culprit_rank": 1,
            "comm_name": group,
            "op_seq": at,
        },
        "rank_rc": [p.returncode for p in ranks],
        "fault_mono_ns": fault_ev["mono_ns"] if fault_ev else None,
        "rank0_enqueue_mono_ns": enq0["mono_ns"] if enq0 else None,
        "hang_start_mono_ns": t0,
        "reports_seen": [
            report_seen(rid, s, final_by_id.get(rid, s["last"]), t0) for rid, s in seen.items()
        ],
    }
    if first:
        culprits = sorted(c.comm_rank for c in first.culprits)
        op = agent_api.known(first.op)
        detect_s = (first.detected_mono_ns - t0) / 1e9
        api_s = (next(s for s in crit if s["report"] is first)["first_seen_mono_ns"] - t0) / 1e9
        checks = {
            "verdict": first.verdict.value in EXPECTED_VERDICTS[fault],
            "culprit": culprits == [1],
            # PyTorch may give point-to-point ops a communicator of their own
            "comm": bool(group)
            and (fault.startswith("p2p") or agent_api.known(first.comm.comm_name) == group),
            "seq": op is not None and op.seq == at,
            "latency": detect_s <= threshold_s + 2.0,
        }
        if fault.startswith("p2p"):
            checks["func"] = op is not None and op.func == "Recv"
        res.update(
            verdict=first.verdict.value,
            culprits=culprits,
            comm_name=agent_api.known(first.comm.comm_name),
            comm_id=first.comm.comm_id,
            op_func=op.func if op else None,
            op_seq=op.seq if op else None,
            detection_latency_s=round(detect_s, 3),
            api_latency_s=round(api_s, 3),
            checks=checks,
        )
        ok = all(checks.values())
    else:
        ok = False
        res["checks"] = {"verdict": False}
    res["events"] = {
        r: [e for e in evs if e["ev"] != "enqueue" or e.get(index_key, at) >= at - 1]
        for r, evs in events.items()
    }
    rank_logs = {r: (home / f"rank{r}.log").read_text(errors="replace")[-800:] for r in range(2)}
    res["rank_log_tails"] = rank_logs if not ok else {}
    res["agent_log_tail"] = agent.tail()[-800:] if not ok else ""
    out("gpu_hang", f"fault_{fault}", ok, "pass", **res)
    clean_shm(home)
    shutil.rmtree(home, ignore_errors=True)
    return res


# ---- scenarios 1b, 2, 4: training ----


def torchrun(
    home: Path,
    job_out: Path,
    mode: str,
    steps: int,
    variant: str,
    accum: int = 1,
    progress: Path | None = None,
    nproc: int = 2,
    extra_env=None,
    extra_args: list[str] | None = None,
):
    env_kw = dict(COMMINSIGHT_HOME=home)
    if variant == "none":
        env_kw.update(NCCL_PROFILER_PLUGIN="none", COMMINSIGHT_INJECT_DISABLE="1")
    elif variant == "inspector":
        # NCCL's own Inspector plugin (ext-profiler/inspector, built by run_overhead.sh), as
        # its README runs it; Inject is CommInsight's, so it stays off
        env_kw.update(
            NCCL_PROFILER_PLUGIN=INSPECTOR_PLUGIN,
            NCCL_INSPECTOR_ENABLE="1",
            NCCL_INSPECTOR_DUMP_DIR=home / "inspector_dump",
            NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=os.environ.get(
                "INSPECTOR_INTERVAL_US", "500"
            ),
            COMMINSIGHT_INJECT_DISABLE="1",
        )
    else:
        env_kw.update(NCCL_PROFILER_PLUGIN=PLUGIN, COMMINSIGHT_INJECT_STEP_MARKERS="1")
    env_kw.update(extra_env or {})
    cmd = [
        PY,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(ROOT / "bench/gpu/gpt_train.py"),
        "--mode",
        mode,
        "--steps",
        str(steps),
        "--accum",
        str(accum),
        "--out",
        str(job_out),
    ]
    if os.environ.get("E2E_CPU"):  # dry run without GPUs (gloo)
        cmd.append("--cpu")
    if progress:
        cmd += ["--progress", str(progress)]
    cmd += extra_args or []
    logf = open(home / f"job_{mode}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        cmd, env=env_with(**env_kw), stdout=logf, stderr=subprocess.STDOUT, start_new_session=True
    )
    return proc, logf


def job_result(job_out: Path) -> dict:
    ranks = {}
    for p in sorted(job_out.glob("rank*.json")):
        ranks[int(p.stem[4:])] = json.loads(p.read_text())
    return ranks


def logs_check(home: Path) -> dict:
    s = ci_logs.read_home(home)
    members = []
    for cs in s.comms.values():
        members.append(
            {
                "comm_id": cs.comm_id,
                "rank": cs.rank,
                "n_ranks": cs.n_ranks,
                "ops": sum(cs.colls.values()) + cs.p2p,
                "colls": dict(cs.colls),
                "p2p": cs.p2p,
                "coll_sn_contiguous": cs.coll_sn_contiguous(),
                "coll_sn_max": {f: r["max"] for f, r in cs.coll_sn_report().items()},
            }
        )
    members.sort(key=lambda m: (m["n_ranks"], m["comm_id"], m["rank"]))
    return {
        "files": s.files,
        "sealed": s.sealed,
        "unsealed": s.unsealed,
        "seal_failures": s.seal_failures[:5],
        "gap_lines": s.gap_lines,
        "lost_records": s.lost_records,
        "bad_lines": s.bad_lines,
        "seals_ok": s.seals_ok,
        "members": members,
        "ops_total": sum(m["ops"] for m in members),
        "all_contiguous": all(m["coll_sn_contiguous"] for m in members),
    }


def keep_for_steps(home: Path, keep: Path, name: str) -> None:
    dst = keep / name
    dst.mkdir(parents=True, exist_ok=True)
    for sub in ("inspector_logs", "metadata/inject", "job", "semantics"):
        src = home / sub
        if src.is_dir():
            shutil.copytree(src, dst / sub, dirs_exist_ok=True)


def train_run(
    out: Out,
    mode: str,
    variant: str,
    rep: int,
    steps: int,
    keep: Path | None,
    accum: int = 1,
    fault: str = "",
    reference_ops: dict | None = None,
    nproc: int = 2,
) -> dict:
    home = Path(tempfile.mkdtemp(prefix=f"ci_train_{mode}_{variant}_"))
    job_out = home / "job"
    agent = None
    extra = {}
    ro_mount = None
    if fault == "logdir_unwritable":
        d = home / "inspector_logs"
        d.mkdir(mode=0o700)
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(d)],
            capture_output=True,
            text=True,
        )
        if r.returncode == 0:
            ro_mount = d
            how = "read-only tmpfs mounted on inspector_logs"
        else:
            d.rmdir()
            d.write_text("not a directory\n")
            how = f"inspector_logs is a regular file (mount failed: {r.stderr.strip()[:120]})"
        extra["unwritable"] = how
    if variant == "ci":
        agent = Agent(home)
    progress = home / "progress" if fault == "agent_killed" else None
    t = time.monotonic()
    proc, logf = torchrun(home, job_out, mode, steps, variant, accum, progress, nproc)
    killed_at = None
    while proc.poll() is None:
        if time.monotonic() - t > 240:
            os.killpg(proc.pid, signal.SIGKILL)
            break
        if fault == "agent_killed" and killed_at is None and progress.exists():
            try:
                step = int(progress.read_text() or 0)
            except ValueError:
                step = 0
            if step >= steps // 2:
                agent.proc.send_signal(signal.SIGKILL)
                killed_at = time.monotonic_ns()
                extra["agent_killed_at_step"] = step
        time.sleep(0.05)
    rc = proc.wait()
    logf.close()
    wall = time.monotonic() - t
    agent_ok = None
    live_steps = None
    if agent is not None:
        agent_ok = agent.alive()
        if agent_ok:
            with contextlib.suppress(*agent_api.UNREACHABLE):
                live_steps = agent_api.steps_total(agent.url)
        agent.stop()
    ranks = job_result(job_out)
    r0 = ranks.get(0, {})
    line = {
        "job": mode if nproc == 2 else f"{mode}{nproc}",
        "nproc": nproc,
        "variant": variant,
        "rep": rep,
        "steps": steps,
        "accum": accum,
        "rc": rc,
        "wall_s": round(wall, 2),
        "agent_alive_at_end": agent_ok,
        "agent_live_step_summaries": live_steps,
        "tokens_per_s": [round(ranks[r]["tokens_per_s"], 1) for r in sorted(ranks)],
        "median_step_ms": [round(ranks[r]["median_step_ms"], 4) for r in sorted(ranks)],
        "params": r0.get("params"),
        "model": r0.get("model"),
        "mesh": r0.get("mesh"),
        "issued_by_script": [ranks[r].get("issued_by_script") for r in sorted(ranks)],
        **extra,
    }
    if killed_at is not None and r0:
        # rank 0's steps ending before / after the kill (warm-up excluded)
        ends, acc = [], r0["start_mono_ns"]
        for ns in r0["step_ns"]:
            acc += ns
            ends.append(acc)
        w = r0["warmup"]
        before = [ns for ns, e in zip(r0["step_ns"][w:], ends[w:], strict=True) if e < killed_at]
        after = [ns for ns, e in zip(r0["step_ns"][w:], ends[w:], strict=True) if e > killed_at]
        line["median_step_ms_before_kill"] = (
            round(statistics.median(before) / 1e6, 4) if before else None
        )
        line["median_step_ms_after_kill"] = (
            round(statistics.median(after) / 1e6, 4) if after else None
        )
        line["steps_after_kill"] = len(after)
    if variant == "ci" and fault != "logdir_unwritable":
        lc = logs_check(home)
        line["logs"] = {k: v for k, v in lc.items() if k != "members"}
        # comm ids differ between runs: compare (size, rank, ops) per communicator member
        line["ops_per_member"] = sorted([m["n_ranks"], m["rank"], m["ops"]] for m in lc["members"])
        line["members"] = lc["members"]
        if reference_ops is not None:
            line["reference_ops_per_member"] = reference_ops.get((mode, steps))
            line["ops_equal_reference"] = line["ops_per_member"] == reference_ops.get((mode, steps))
        if reference_ops is not None and fault == "":
            reference_ops.setdefault((mode, steps), line["ops_per_member"])
            line["reference_ops_per_member"] = reference_ops[(mode, steps)]
            line["ops_equal_reference"] = line["ops_per_member"] == reference_ops[(mode, steps)]
    if fault == "logdir_unwritable":
        d = home / "inspector_logs"
        line["files_in_inspector_logs"] = len(list(d.iterdir())) if d.is_dir() else 0
        if ro_mount:
            subprocess.run(["umount", str(ro_mount)])
    if rc != 0:
        line["job_log_tail"] = (home / f"job_{mode}.log").read_text(errors="replace")[-1500:]
    if agent is not None and not agent_ok and fault != "agent_killed":
        line["agent_log_tail"] = agent.tail()[-800:]
    if keep is not None and rc == 0:
        keep_for_steps(home, keep, f"{line['job']}{'_' + fault if fault else ''}")
    metric = f"failopen_{fault}" if fault else "run"
    out("gpu_train", metric, rc == 0, "pass", **line)
    clean_shm(home)
    shutil.rmtree(home, ignore_errors=True)
    return line


def ratios(out: Out, runs: list[dict]) -> None:
    for mode in sorted({r["job"] for r in runs}):
        by = {}
        for r in runs:
            if r["job"] == mode and r["rc"] == 0 and r["tokens_per_s"]:
                by.setdefault(r["variant"], []).append(statistics.mean(r["tokens_per_s"]))
        if "none" in by and "ci" in by:
            ratio = statistics.mean(by["ci"]) / statistics.mean(by["none"])
            out(
                "gpu_train",
                f"throughput_ratio_ci_over_none_{mode}",
                round(ratio, 5),
                "ratio",
                tokens_per_s_none=[round(x, 1) for x in by["none"]],
                tokens_per_s_ci=[round(x, 1) for x in by["ci"]],
                overhead_pct=round((1 - ratio) * 100, 3),
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sections", default="hangs,train,failopen,tpdp")
    ap.add_argument("--faults", default="skip,sleep,kill,mismatch")
    ap.add_argument("--threshold-s", type=float, default=5.0)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--jobs", default="ddp,fsdp")
    ap.add_argument("--rep-base", type=int, default=0, help="first rep number (a later call)")
    ap.add_argument("--keep-train", type=int, default=1, help="keep a ci run's logs per job")
    ap.add_argument("--deadline-s", type=float, default=520)
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_end = time.monotonic() + args.deadline_s
    sections = args.sections.split(",")
    keep = Path(tempfile.mkdtemp(prefix="ci_keep_"))
    rc = 0
    if "hangs" in sections:
        hout = Out(out_dir / "hangs.jsonl")
        for fault in args.faults.split(","):
            if time.monotonic() > t_end - 60:
                log(f"deadline: fault {fault} not run")
                continue
            log(f"== fault {fault}")
            try:
                r = run_fault(hout, fault, args.threshold_s, 20, args.threshold_s + 8)
                rc |= not r.get("checks") or not all(r["checks"].values())
            except Exception as e:  # one fault's breakage must not cost the others
                hout("gpu_hang", f"fault_{fault}", False, "pass", error=repr(e))
                rc = 1
    tout = Out(out_dir / "train.jsonl")
    reference: dict = {}
    runs = []
    if "tpdp4" in sections and time.monotonic() < t_end - 40:
        # 2 x 2 mesh on two GPUs: 4 processes, GPU (dp + tp) % 2, so each tp and each dp
        # communicator spans both GPUs (NCCL refuses two ranks of one GPU in a communicator)
        log("== tpdp4")
        try:
            train_run(tout, "tpdp", "ci", 0, 60, keep, accum=4, nproc=4)
        except Exception as e:
            tout("gpu_train", "run", False, "pass", job="tpdp4", error=repr(e))
    if "train" in sections:
        for mode in args.jobs.split(","):
            order = ["none", "ci", "ci", "none"] if args.reps >= 2 else ["none", "ci"]
            order += ["ci", "none", "none", "ci"][: max(0, 2 * args.reps - 4)]
            kept = False
            for i, variant in enumerate(order):
                if time.monotonic() > t_end - 45:
                    log(f"deadline: {mode} {variant} not run")
                    continue
                log(f"== train {mode} {variant} #{i}")
                k = keep if variant == "ci" and not kept and args.keep_train else None
                try:
                    runs.append(
                        train_run(
                            tout,
                            mode,
                            variant,
                            i + args.rep_base,
                            args.steps,
                            k,
                            reference_ops=reference,
                        )
                    )
                    kept = kept or k is not None
                except Exception as e:
                    tout(
                        "gpu_train", "run", False, "pass", job=mode, variant=variant, error=repr(e)
                    )
        ratios(tout, runs)
    if "failopen" in sections:
        for fault in ("agent_killed", "logdir_unwritable"):
            if time.monotonic() > t_end - 45:
                log(f"deadline: failopen {fault} not run")
                continue
            log(f"== failopen {fault}")
            try:
                train_run(
                    tout,
                    "ddp",
                    "ci",
                    0,
                    args.steps,
                    keep if fault == "agent_killed" else None,
                    fault=fault,
                    reference_ops=reference,
                )
            except Exception as e:
                tout("gpu_train", f"failopen_{fault}", False, "pass", error=repr(e))
    if "tpdp" in sections and time.monotonic() < t_end - 40:
        log("== tpdp")
        try:
            train_run(tout, "tpdp", "ci", 0, 60, keep, accum=4)
        except Exception as e:
            tout("gpu_train", "run", False, "pass", job="tpdp", error=repr(e))
    if any(keep.iterdir()):
        with tarfile.open(out_dir / "steps.tar.gz", "w:gz") as tar:
            for d in sorted(keep.iterdir()):
                tar.add(d, arcname=d.name)
    shutil.rmtree(keep, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
