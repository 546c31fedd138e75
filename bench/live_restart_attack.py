"""Restart attack on the live Step summaries: do they equal an uninterrupted run's?

A simulated job of RANKS ranks and STEPS measured Steps runs in one home while the Agent
(`python -m comminsight.agent.main`) is stopped and started again STOPS times at seeded points:
plain stops, stops right after a start, two stops in quick succession, stops while the Agent
writes its engine checkpoint (inotify on the checkpoint's temporary file / its rename), and a
last stop while the job ends (the job's processes exit while no Agent runs). Signals: mixed
SIGKILL/SIGTERM, or SIGTERM only.

Each rank's live summaries are then compared with the baseline (the Agent's own engine,
SemanticEngineHook, run in this process over each rank's records read back from its inspector
logs, as tests/e2e/test_semantic_live_restarts.py does) byte for byte except
recovery.confidence / recovery.reasons, and with the simulation's ground truth Steps.

A run takes minutes (8 ranks, 1,501 Steps: about 6 on 2 cores); its report is
<out>/report.json, and its last line a bench line (ranks whose summaries differ). Usage, from
the repository root:

  .venv/bin/python bench/live_restart_attack.py \
      --seed 1 --signals mixed --ranks 8 --steps 1501 --est-s 240 --out /tmp/restarts-1
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.step_accuracy import op_identity
from comminsight.sim.truth import read_ground_truth

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the uninterrupted baseline the restarts test uses
from live_baseline import comparable, uninterrupted  # noqa: E402

PLUGIN = str(ROOT / "dist" / "libnccl-profiler-comminsight.so")
PY = sys.executable
IN_MOVED_TO, IN_CREATE = 0x80, 0x100
CKPT = "engine-live.checkpoint.json"


def log(*a):
    print(f"[{time.strftime('%H:%M:%S')}]", *a, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Agent:
    n = 0

    def __init__(self, home: Path, listen: str, logdir: Path, env: dict):
        Agent.n += 1
        self.k = Agent.n
        self.listen = listen
        self.err_path = logdir / f"agent-{self.k:02d}.stderr"
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            ["nice", "-n", "5", PY, "-m", "comminsight.agent.main"],
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")},
                "COMMINSIGHT_HOME": str(home),
                "COMMINSIGHT_AGENT_POLL_INTERVAL_MS": "100",
                "COMMINSIGHT_AGENT_HEARTBEAT_STALE_MS": "1000",
                "COMMINSIGHT_PROFILER_HANG_TIMEOUT_S": "0.5",
                "COMMINSIGHT_AGENT_LISTEN": listen,
                **env,
            },
            stdout=open(logdir / f"agent-{self.k:02d}.stdout", "wb"),
            stderr=open(self.err_path, "wb"),
            cwd=str(ROOT),
        )

    def wait_healthy(self, timeout_s=180.0) -> float:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent {self.k} exited {self.proc.returncode} before health")
            try:
                r = httpx.get(f"http://{self.listen}/api/v1/health", timeout=5)
                if r.status_code != 503:
                    return time.monotonic() - self.t0
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"agent {self.k} not healthy in {timeout_s}s")

    def stop(self, sig) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            log(f"agent {self.k} did not exit 90 s after {sig.name}: SIGKILL")
            self.proc.kill()
            return self.proc.wait()


def wait_for_checkpoint_event(step_dir: Path, which: str, timeout_s: float) -> str | None:
    """Blocks until the Agent creates the checkpoint's .tmp (which='tmp') or renames it over
    the checkpoint (which='rename'); returns what happened, None on timeout."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    step_dir.mkdir(parents=True, exist_ok=True)
    fd = libc.inotify_init()
    wd = libc.inotify_add_watch(fd, str(step_dir).encode(), IN_CREATE | IN_MOVED_TO)
    assert fd >= 0 and wd >= 0
    deadline = time.monotonic() + timeout_s
    try:
        while (left := deadline - time.monotonic()) > 0:
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                break
            buf = os.read(fd, 65536)
            i = 0
            while i < len(buf):
                _, mask, _, ln = struct.unpack_from("iIII", buf, i)
                name = buf[i + 16 : i + 16 + ln].rstrip(b"\0").decode()
                i += 16 + ln
                if which == "tmp" and mask & IN_CREATE and name == CKPT + ".tmp":
                    return "tmp-created"
                if which == "rename" and mask & IN_MOVED_TO and name == CKPT:
                    return "renamed"
        return None
    finally:
        os.close(fd)


def summary_lines(home: Path) -> int:
    return sum(
        len(p.read_bytes().splitlines()) for p in (home / "semantics" / "step").glob("live-*")
    )


def plan(rng: random.Random, stops: int, est_s: float, signals: str):
    """[(time_s, kind, [signals])]; the last is 'end'."""
    kinds = ["early", "early", "double", "double", "ckpt-tmp", "ckpt-tmp", "ckpt-rename"]
    kinds += ["plain"] * (stops - 1 - len(kinds))
    rng.shuffle(kinds)
    times = sorted(rng.uniform(0.04 * est_s, 0.93 * est_s) for _ in range(stops - 1))
    out = []
    for t, kind in zip(times, kinds, strict=True):
        n = 2 if kind == "double" else 1
        if signals == "term":
            sigs = [signal.SIGTERM] * n
        else:
            sigs = [rng.choice([signal.SIGKILL, signal.SIGTERM]) for _ in range(n)]
        out.append((t, kind, sigs))
    if signals == "mixed":  # both kinds present
        flat = [s for _, _, ss in out for s in ss]
        if signal.SIGKILL not in flat:
            out[0][2][0] = signal.SIGKILL
        if signal.SIGTERM not in flat:
            out[1][2][0] = signal.SIGTERM
    end_sig = signal.SIGTERM if signals == "term" else rng.choice([signal.SIGKILL, signal.SIGTERM])
    out.append((None, "end", [end_sig]))
    return out


# --- the baseline, as tests/e2e/test_semantic_live_restarts.py computes it -------------------
def index_report(indices: list[int]) -> dict:
    seen, dups = set(), []
    for i in indices:
        if i in seen:
            dups.append(i)
        seen.add(i)
    top = max(indices) if indices else -1
    missing = [i for i in range(top + 1) if i not in seen]
    return {
        "missing": missing,
        "duplicated": dups,
        "max": top,
        "in_order": indices == sorted(indices),
    }


def main():
    # the defaults are the documented run, so that `make bench` (every script, no arguments)
    # runs it too
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--signals", choices=["mixed", "term"], default="mixed")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=1501)
    ap.add_argument("--stops", type=int, default=20)
    ap.add_argument("--workload", default="ddp")
    ap.add_argument("--time-scale", type=float, default=0.5)
    ap.add_argument("--est-s", type=float, default=240.0, help="expected job duration (s)")
    ap.add_argument("--checkpoint-s", default="2")
    ap.add_argument("--out", help="a new directory for the run (default: a fresh temporary one)")
    a = ap.parse_args()

    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="ci-restart-attack-")) / "run"
    out.mkdir(parents=True, exist_ok=False)
    home, logdir = out / "home", out / "agent-logs"
    logdir.mkdir()
    step_dir = home / "semantics" / "step"
    rng = random.Random(a.seed)
    stops = plan(rng, a.stops, a.est_s, a.signals)
    env = {"COMMINSIGHT_SEMANTIC_CHECKPOINT_S": a.checkpoint_s}
    listen = f"127.0.0.1:{free_port()}"
    config = SimConfig(
        plugin=PLUGIN,
        home=str(home),
        workload=a.workload,
        ranks=a.ranks,
        steps=a.steps,
        time_scale=a.time_scale,
        seed=a.seed,
        env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"),),
    )
    events = []

    def ev(**kw):
        kw["t"] = round(time.monotonic() - t0, 2)
        kw["lines"] = summary_lines(home)
        events.append(kw)
        log(json.dumps(kw))

    exits = []
    agent = Agent(home, listen, logdir, env)
    agent.wait_healthy()
    result = {}
    sim = threading.Thread(target=lambda: result.setdefault("sim", run_simulation(config)))
    t0 = time.monotonic()
    sim.start()

    def restart():
        nonlocal agent
        agent = Agent(home, listen, logdir, env)

    def stop(sig, why):
        rc = agent.stop(sig)
        exits.append((agent.k, sig.name, rc))
        ck = {}
        try:
            c = json.loads((step_dir / CKPT).read_bytes())
            ck = {
                g["gpu"]["global_rank"]: (
                    g["output"]["summaries_written"],
                    g["input"].get("last_ring_seq"),
                )
                for g in c["gpus"]
            }
        except (OSError, ValueError, KeyError):
            pass
        files = {
            p.name.split("-")[2]: len(p.read_bytes().splitlines())
            for p in sorted(step_dir.glob("live-*"))
        }
        warn = [
            line
            for line in agent.err_path.read_text(errors="replace").splitlines()
            if " WARNING " in line or " ERROR " in line or "Traceback" in line
        ]
        ev(
            ev="stop",
            agent=agent.k,
            sig=sig.name,
            rc=rc,
            why=why,
            sim_alive=sim.is_alive(),
            ckpt=ck,
            files=files,
            warnings=warn[:6],
        )

    end_done = False

    def end_stop(sig):
        nonlocal end_done
        end_done = True
        while sim.is_alive() and time.monotonic() - t0 < 0.97 * a.est_s:
            time.sleep(0.05)
        stop(sig, "end")
        sim.join(timeout=900)
        ev(ev="job-ended-while-down", sim_alive=sim.is_alive())
        restart()
        agent.wait_healthy()

    for _k, (at, kind, sigs) in enumerate(stops):
        if kind == "end":
            # wait until the job is in its last Steps, stop, let it end with no Agent
            if not end_done:
                end_stop(sigs[0])
            break
        if not end_done and time.monotonic() - t0 >= 0.9 * a.est_s:
            # late (Agent start-ups are slow here): the job's end comes first, the other
            # stops after it (restarts over a job that ended)
            end_stop(stops[-1][2][0])
        while time.monotonic() - t0 < at:
            time.sleep(0.05)
        if kind == "early":
            # the Agent running now is stopped and a new one is stopped right after it starts:
            # before its API answers (during its restore / first pass) or right after
            stop(
                rng.choice([signal.SIGKILL, signal.SIGTERM])
                if a.signals == "mixed"
                else signal.SIGTERM,
                "before-early",
            )
            restart()
            if rng.random() < 0.5:
                time.sleep(rng.uniform(0.3, 2.5))
                stop(sigs[0], "early-before-health")
            else:
                try:
                    agent.wait_healthy()
                except RuntimeError as e:
                    ev(ev="error", err=str(e))
                stop(sigs[0], "early-right-after-health")
            restart()
            agent.wait_healthy()
        elif kind == "double":
            stop(sigs[0], "double-1")
            restart()
            agent.wait_healthy()
            time.sleep(rng.uniform(0.0, 0.4))
            stop(sigs[1], "double-2")
            restart()
            agent.wait_healthy()
        elif kind.startswith("ckpt"):
            which = kind.split("-")[1]
            got = wait_for_checkpoint_event(step_dir, which, 15)
            stop(sigs[0], f"ckpt-{which}:{got}")
            restart()
            agent.wait_healthy()
        else:
            stop(sigs[0], "plain")
            restart()
            agent.wait_healthy()
    sim.join(timeout=900)
    assert not sim.is_alive(), "sim still running"
    sim_errors = result["sim"].errors
    ev(ev="sim-done", errors=[str(e) for e in sim_errors][:5])
    deadline = time.monotonic() + 600
    while len(list(step_dir.glob("live-*.jsonl"))) < a.ranks and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3)
    sealed = sorted(step_dir.glob("live-*.jsonl"))
    ev(ev="sealed", n=len(sealed), partial=[p.name for p in step_dir.glob("*.partial")])
    rc = agent.stop(signal.SIGTERM)
    exits.append((agent.k, "SIGTERM", rc))
    wall = time.monotonic() - t0

    # ---- compare ---------------------------------------------------------------------
    tb = time.monotonic()
    expected = uninterrupted(home, sealed, out / "baseline")
    log(f"baseline computed in {time.monotonic() - tb:.1f}s")
    truths = read_ground_truth(result["sim"].run_dir)
    ranks = []
    for path in sealed:
        got = path.read_bytes().splitlines()
        want = expected[path.name]
        rank = json.loads(got[0])["global_rank"]
        truth = truths[rank]
        ids = op_identity(truth)
        true_steps = [(ids[s["first_op"]], ids[s["last_op"]]) for s in truth.records["step"]]
        parsed = [json.loads(x) for x in got]
        steps = [
            tuple((op["comm_id"], op["func"], op["seq"]) for op in (s["first_op"], s["last_op"]))
            for s in parsed
        ]
        base_steps = [
            tuple((op["comm_id"], op["func"], op["seq"]) for op in (s["first_op"], s["last_op"]))
            for s in map(json.loads, want)
        ]
        differ = [
            k
            for k, (x, y) in enumerate(zip(got, want, strict=False))
            if comparable(x) != comparable(y)
        ]
        first = None
        if differ or len(got) != len(want):
            k = differ[0] if differ else min(len(got), len(want))
            first = {
                "line": k,
                "got": got[k].decode()[:600] if k < len(got) else None,
                "want": want[k].decode()[:600] if k < len(want) else None,
            }
            if k < len(got) and k < len(want):
                cg, cw = comparable(got[k]), comparable(want[k])
                first["keys_differ"] = sorted(
                    x for x in set(cg) | set(cw) if cg.get(x) != cw.get(x)
                )
        truth_first_diff = next(
            (k for k, (x, y) in enumerate(zip(steps, true_steps, strict=False)) if x != y),
            None if len(steps) == len(true_steps) else min(len(steps), len(true_steps)),
        )
        base_truth_diff = next(
            (k for k, (x, y) in enumerate(zip(base_steps, true_steps, strict=False)) if x != y),
            None if len(base_steps) == len(true_steps) else min(len(base_steps), len(true_steps)),
        )
        ranks.append(
            {
                "file": path.name,
                "rank": rank,
                "got": len(got),
                "baseline": len(want),
                "truth": len(true_steps),
                "indices": index_report([s["step_index"] for s in parsed]),
                "n_lines_differ_from_baseline": len(differ),
                "first_diff_vs_baseline": first,
                "first_diff_vs_truth": truth_first_diff,
                "baseline_first_diff_vs_truth": base_truth_diff,
                "ok": not differ
                and len(got) == len(want) == len(true_steps)
                and truth_first_diff is None,
            }
        )
    rep = {
        "args": vars(a),
        "wall_s": round(wall, 1),
        "events": events,
        "exits": exits,
        "sim_errors": [str(e) for e in sim_errors],
        "ranks": ranks,
        "sealed": len(sealed),
        "ok": all(r["ok"] for r in ranks) and len(sealed) == a.ranks,
        "agent_started": Agent.n,
    }
    (out / "report.json").write_text(json.dumps(rep, indent=1))
    log("RESULT", "OK" if rep["ok"] else "FAIL", f"wall {wall:.0f}s")
    bench_line = {
        "bench": "live_restarts",
        "metric": "ranks_differing",
        "value": sum(not r["ok"] for r in ranks),
        "unit": "ranks",
        "ranks": a.ranks,
        "steps": a.steps,
        "signals": a.signals,
        "seed": a.seed,
        "agent_starts": Agent.n,
    }
    for r in ranks:
        log(
            f"rank {r['rank']}: got {r['got']} base {r['baseline']} truth {r['truth']} "
            f"missing {r['indices']['missing'][:20]} (n={len(r['indices']['missing'])}) "
            f"dups {r['indices']['duplicated'][:10]} differ {r['n_lines_differ_from_baseline']} "
            f"first {r['first_diff_vs_baseline'] and r['first_diff_vs_baseline']['line']} "
            f"truthdiff {r['first_diff_vs_truth']} "
            f"base-truthdiff {r['baseline_first_diff_vs_truth']}"
        )
    print(json.dumps(bench_line), flush=True)


if __name__ == "__main__":
    main()
