"""Training throughput with and without CommInsight, copies taking turns.

    python3 bench/gpu/throughput_turns.py --out $OUT --jobs ddp,fsdp \
        --variants none,ci,inspector,none --sessions 2

Separate runs of the same job on the GPU machine differ by 6-17 % in throughput (2026-11-30,
results/gpu.md), and within one run the step time drifts by as much over seconds: far
more than the 1 % to be shown. So the variants run *at the same time*, as copies of the job
that take turns on the two GPUs (`gpt_train.py --turns`): each copy runs --block-steps steps,
then the next one, rotating, until each has run --blocks blocks after its warm-up. Drift then
hits every copy alike and each round of turns gives one ratio per variant. Variants:
  none       NCCL_PROFILER_PLUGIN=none, Inject off, no Agent
  ci         CommInsight: the plugin (default mask), a live Agent with the Semantic Engine,
             Inject with step markers
  inspector  NCCL's Inspector plugin (built by run_overhead.sh from build/nccl-inspector-src)
A second `none` (reported as `none2`) is the A/A control: its ratio to the first shows what
two copies of the same job differ by with nothing different between them.

One session = one set of fresh processes; --sessions repeats with the variants' places in the
rotation shifted, since a copy's process may keep a speed of its own. Writes $OUT/turns.jsonl:
one `session` line per session (every block's time per copy, rank 0, and the checks of the
CommInsight copy's logs and Agent), then `throughput_ratio_<variant>_over_none_<job>` lines.
Standard library only; reuses e2e_driver's Agent and launcher.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e2e_driver as e2e  # noqa: E402


def labels_of(variants: list[str]) -> list[str]:
    """none, ci, none -> none, ci, none2: each copy's name in the results."""
    seen: dict[str, int] = {}
    out = []
    for v in variants:
        seen[v] = seen.get(v, 0) + 1
        out.append(v if seen[v] == 1 else f"{v}{seen[v]}")
    return out


def inspector_output(d: Path) -> dict:
    files = [p for p in d.rglob("*") if p.is_file()] if d.is_dir() else []
    lines = 0
    for p in files:
        with open(p, "rb") as f:
            lines += sum(1 for _ in f)
    return {"files": len(files), "lines": lines, "bytes": sum(p.stat().st_size for p in files)}


def write_turn(turns: Path, value: int) -> None:
    tmp = turns / ".turn.driver"
    tmp.write_text(str(value))
    os.replace(tmp, turns / "turn")


def run_session(
    out: e2e.Out,
    mode: str,
    variants: list[str],
    session: int,
    blocks: int,
    block_steps: int,
    warmup: int,
    timeout_s: float,
    job_args: list[str] | None = None,
) -> dict:
    base = Path(tempfile.mkdtemp(prefix=f"ci_turns_{mode}_{session}_"))
    turns = base / "turns"
    turns.mkdir()
    labels = labels_of(variants)
    steps = warmup + blocks * block_steps
    jobs = []
    agent = None
    try:
        for j, (variant, label) in enumerate(zip(variants, labels, strict=True)):
            home = base / label
            home.mkdir()
            if variant == "ci":
                agent = e2e.Agent(home)
            args = ["--turns", str(turns), "--turn-job", str(j), "--turn-jobs", str(len(variants))]
            args += ["--block-steps", str(block_steps), "--warmup", str(warmup)]
            args += job_args or []
            proc, logf = e2e.torchrun(home, home / "job", mode, steps, variant, extra_args=args)
            jobs.append(
                {"label": label, "variant": variant, "home": home, "proc": proc, "logf": logf}
            )
        want = 2 * len(jobs)
        t = time.monotonic()
        while len(list(turns.glob("ready.*"))) < want:
            if any(j["proc"].poll() is not None for j in jobs) or time.monotonic() - t > 240:
                raise RuntimeError("a copy exited or was not ready in 240 s")
            time.sleep(0.05)
        e2e.log(f"   all {len(jobs)} copies ready after {time.monotonic() - t:.1f} s")
        write_turn(turns, 0)
        t = time.monotonic()
        while any(j["proc"].poll() is None for j in jobs):
            if time.monotonic() - t > timeout_s:
                raise RuntimeError(f"copies still running after {timeout_s} s")
            time.sleep(0.1)
        line = {"job": mode, "session": session, "variants": labels, "blocks": blocks}
        line["job_args"] = job_args or []
        line["block_steps"], line["warmup"] = block_steps, warmup
        line["copies"] = {}
        for j in jobs:
            j["logf"].close()
            ranks = e2e.job_result(j["home"] / "job")
            r0 = ranks.get(0, {})
            copy = {
                "rc": j["proc"].returncode,
                "tokens_per_step": r0.get("tokens_per_step"),
                "median_step_ms": r0.get("median_step_ms"),
                # rank 0's wall seconds per block, from seeing its turn to its last sync
                "block_s": [
                    round((b["end_ns"] - b["seen_ns"]) / 1e9, 6)
                    for b in (r0.get("turns") or {}).get("blocks", [])
                ],
                "ranks_reported": sorted(ranks),
            }
            if j["proc"].returncode != 0:
                copy["log_tail"] = (j["home"] / f"job_{mode}.log").read_text(errors="replace")[
                    -1500:
                ]
            if j["variant"] == "ci":
                copy["agent_alive_at_end"] = agent.alive()
                lc = e2e.logs_check(j["home"])
                copy["logs"] = {k: v for k, v in lc.items() if k != "members"}
                copy["op_lines_per_member"] = sorted(m["ops"] for m in lc["members"])
            if j["variant"] == "inspector":
                copy["inspector_output"] = inspector_output(j["home"] / "inspector_dump")
            line["copies"][j["label"]] = copy
        ok = all(c["rc"] == 0 and len(c["block_s"]) == blocks + 1 for c in line["copies"].values())
        return out("gpu_turns", "session", ok, "pass", **line)
    finally:
        for j in jobs:
            if j["proc"].poll() is None:
                os.killpg(j["proc"].pid, 9)
                j["proc"].wait()
            if not j["logf"].closed:
                j["logf"].close()
            e2e.clean_shm(j["home"])
        if agent is not None:
            agent.stop()
        shutil.rmtree(base, ignore_errors=True)


def round_ratios(copies: dict, label: str) -> list[float]:
    """Throughput of `label` over the first `none` copy, round by round (warm-up left out)."""
    ref, other = copies["none"]["block_s"], copies[label]["block_s"]
    return [r / o for r, o in zip(ref[1:], other[1:], strict=True) if o > 0]


def ratios(out: e2e.Out, sessions: list[dict]) -> None:
    for mode in sorted({s["job"] for s in sessions}):
        done = [s for s in sessions if s["job"] == mode and s["value"]]
        labels = sorted({lb for s in done for lb in s["copies"]} - {"none"})
        for label in labels:
            per = [round_ratios(s["copies"], label) for s in done if label in s["copies"]]
            per = [p for p in per if len(p) >= 2]
            if not per:
                continue
            means = [statistics.mean(p) for p in per]
            pooled = [x for p in per for x in p]
            value = statistics.mean(means)
            session_se = [statistics.stdev(p) / len(p) ** 0.5 for p in per]
            within_se = sum(x * x for x in session_se) ** 0.5 / len(per)
            between_se = statistics.stdev(means) / len(means) ** 0.5 if len(means) > 1 else 0.0
            out(
                "gpu_turns",
                f"throughput_ratio_{label}_over_none_{mode}",
                round(value, 5),
                "ratio",
                overhead_pct=round((1 - value) * 100, 3),
                sessions=len(per),
                rounds=[len(p) for p in per],
                session_means=[round(m, 5) for m in means],
                session_medians=[round(statistics.median(p), 5) for p in per],
                session_se=[round(x, 5) for x in session_se],
                between_sessions_se=round(between_se, 5) if len(means) > 1 else None,
                # the larger of the two: rounds within a session share their processes
                se=round(max(within_se, between_se), 5),
                pooled_median=round(statistics.median(pooled), 5),
                pooled_sd=round(statistics.stdev(pooled), 5),
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", default="ddp,fsdp")
    ap.add_argument("--variants", default="none,ci,inspector,none")
    ap.add_argument("--sessions", type=int, default=2)
    ap.add_argument("--blocks", type=int, default=30, help="measured blocks per copy")
    ap.add_argument("--block-steps", default="ddp=20,fsdp=10", help="steps per turn, per job")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--deadline-s", type=float, default=500)
    ap.add_argument("--job-args", default="", help="more gpt_train.py arguments, e.g. '--batch 64'")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = e2e.Out(out_dir / "turns.jsonl")
    t_end = time.monotonic() + args.deadline_s
    variants = args.variants.split(",")
    if "inspector" in variants and not e2e.INSPECTOR_PLUGIN.exists():
        e2e.log(f"no {e2e.INSPECTOR_PLUGIN}: the inspector copy is left out")
        variants = [v for v in variants if v != "inspector"]
    block_steps = dict(kv.split("=") for kv in args.block_steps.split(","))
    sessions, spent = [], {}
    for s in range(args.sessions):
        for mode in args.jobs.split(","):
            # a session costs about what the last one of this job did
            if time.monotonic() + spent.get(mode, 60) > t_end:
                e2e.log(f"deadline: {mode} session {s} not run")
                continue
            k = s % len(variants)
            order = variants[k:] + variants[:k]  # shift the places in the rotation
            e2e.log(f"== turns {mode} session {s}: {order}")
            t = time.monotonic()
            try:
                line = run_session(
                    out,
                    mode,
                    order,
                    s,
                    args.blocks,
                    int(block_steps[mode]),
                    args.warmup,
                    timeout_s=max(60.0, t_end - time.monotonic()),
                    job_args=args.job_args.split(),
                )
                sessions.append(line)
            except Exception as e:  # one session's breakage must not cost the others
                out("gpu_turns", "session", False, "pass", job=mode, session=s, error=repr(e))
            spent[mode] = time.monotonic() - t
    ratios(out, sessions)
    return 0 if sessions and all(s["value"] for s in sessions) else 1


if __name__ == "__main__":
    sys.exit(main())
