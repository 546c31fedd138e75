"""results/gpu.md from what bench/gpu/run_e2e.sh brought back. Run here, in the
project's venv (the step scoring runs the Semantic Engine on the logs; no GPU needed):

    python bench/gpu/e2e_report.py results/2026-11-30-h200x2-e2e/run1 \
        results/2026-11-30-h200x2-e2e/run2 > results/gpu.md

Each run directory holds hangs.jsonl, train.jsonl, versions.json, run.log and steps.tar.gz
(the logs, Inject's step markers and the job output of the runs kept for step recovery).
Step scoring: per rank, the ops in host-issue order; a true Step boundary is the last op
issued before Inject's marker of that optimizer step (CLOCK_MONOTONIC at `step()` return);
a recovered boundary is the engine's last op of a Step. A boundary counts when it is within
one op of the other side's nearest boundary: precision over the recovered, recall over the
true; the error is the distance in ops. The engine never reads the markers.
"""

from __future__ import annotations

import bisect
import json
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# scenario 1a: re-run on 2026-11-30 on the sources of that day (4 rounds)
OVERHEAD_1A = ROOT / "results/2026-11-30-h200x2-e2e/overhead-1a/overhead.jsonl"
GOAL_LAT_S = 2.0


def jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def table(head: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def command_of(run: Path) -> str:
    for line in (run / "COMMAND").read_text().splitlines() if (run / "COMMAND").exists() else []:
        return line.strip()
    return "bash bench/gpu/run_e2e.sh"


# ---- scenario 2: step scoring ----


def markers_of(job_dir: Path) -> dict[int, list[int]]:
    out: dict[int, list[tuple[int, int]]] = {}
    for p in sorted((job_dir / "metadata" / "inject").glob("*.jsonl")):
        for m in jsonl(p):
            if m.get("kind") == "step":
                out.setdefault(m["rank"], []).append((m["index"], m["mono_ns"]))
    return {r: [t for _, t in sorted(v)] for r, v in out.items()}


def score_job(job_dir: Path) -> list[dict]:
    from comminsight.semantic.log_input import read_gpu_logs
    from comminsight.semantic.offline import recover_steps

    result = recover_steps(job_dir / "inspector_logs")
    logs = {log.stream: log for log in read_gpu_logs(job_dir / "inspector_logs")[0]}
    markers = markers_of(job_dir)
    rows = []
    for gpu in result.gpus:
        rank = gpu.gpu.global_rank
        ops = sorted(logs[gpu.stream].ops(), key=lambda o: o.issue_ns)
        issue = [o.issue_ns for o in ops]
        pos = {o.ring_seq: i for i, o in enumerate(ops)}
        truth = [bisect.bisect_left(issue, m) - 1 for m in markers.get(rank, [])]
        found = [pos[s.last_op.ring_seq] for s in gpu.summaries]

        def near(x, pool):
            j = bisect.bisect_left(pool, x)
            return min(abs(x - pool[k]) for k in (j - 1, j) if 0 <= k < len(pool))

        truth_sorted, found_sorted = sorted(truth), sorted(found)
        errs = [near(b, truth_sorted) for b in found] if truth else []
        hit_p = sum(e <= 1 for e in errs)
        hit_r = sum(near(b, found_sorted) <= 1 for b in truth) if found else 0
        rows.append(
            {
                "job": job_dir.name,
                "rank": rank,
                "method": gpu.method,
                "ops": len(ops),
                "steps_run": len(truth),
                "steps_found": len(found),
                "precision": hit_p / len(found) if found else 0.0,
                "recall": hit_r / len(truth) if truth else 0.0,
                "max_err_ops": max(errs) if errs else None,
                "mean_err_ops": statistics.mean(errs) if errs else None,
                "ops_per_step": sorted({s.op_count for s in gpu.summaries})[:6],
                "problems": result.problems,
            }
        )
    return rows


def steps_section(runs: list[Path]) -> tuple[str, list[dict]]:
    rows = []
    for run in runs:
        tar = run / "steps.tar.gz"
        if not tar.exists():
            continue
        with tempfile.TemporaryDirectory() as tmp, tarfile.open(tar) as t:
            t.extractall(tmp, filter="data")
            for job in sorted(Path(tmp).iterdir()):
                for r in score_job(job):
                    rows.append({"run": run.name, **r})
    body = table(
        [
            "run",
            "job",
            "rank",
            "template",
            "ops",
            "steps run",
            "steps found",
            "precision",
            "recall",
            "max / mean boundary error (ops)",
            "ops per Step",
        ],
        [
            [
                r["run"],
                r["job"],
                r["rank"],
                r["method"],
                r["ops"],
                r["steps_run"],
                r["steps_found"],
                f"{r['precision']:.3f}",
                f"{r['recall']:.3f}",
                f"{r['max_err_ops']} / {r['mean_err_ops']:.2f}"
                if r["max_err_ops"] is not None
                else "-",
                r["ops_per_step"],
            ]
            for r in rows
        ],
    )
    return body, rows


# ---- the rest ----


def hangs_section(runs: list[Path]) -> tuple[str, list[dict]]:
    rows = []
    for run in runs:
        for h in jsonl(run / "hangs.jsonl"):
            rows.append({"run": run.name, **h})
    lines = []
    for h in rows:
        ex = h.get("expected", {})
        lines.append(
            [
                h["run"],
                h.get("fault"),
                "pass" if h["value"] else "**fail**",
                h.get("verdict", "none"),
                h.get("culprits", "-"),
                h.get("comm_name", "-"),
                f"{h.get('op_func', '-')} seq {h.get('op_seq', '-')}",
                f"{', '.join(ex.get('verdicts', []))}; rank 1; "
                + (
                    f"rank 0's Recv, seq {ex.get('op_seq')}"
                    if str(h.get("fault", "")).startswith("p2p")
                    else f"{ex.get('comm_name')}; seq {ex.get('op_seq')}"
                ),
                h.get("detection_latency_s", "-"),
                h.get("api_latency_s", "-"),
                f"{h.get('threshold_s', 0) + GOAL_LAT_S:g}",
            ]
        )
    return table(
        [
            "run",
            "fault",
            "result",
            "verdict",
            "culprit ranks",
            "communicator",
            "op",
            "expected",
            "detected after (s)",
            "seen in API after (s)",
            "limit (s)",
        ],
        lines,
    ), rows


def train_section(runs: list[Path]):
    rows = []
    for run in runs:
        for t in jsonl(run / "train.jsonl"):
            rows.append({"run": run.name, **t})
    runs_ = [r for r in rows if r["metric"] == "run" and r.get("job") in ("ddp", "fsdp")]
    per = table(
        [
            "run",
            "job",
            "variant",
            "rep",
            "rc",
            "tokens/s (rank 0)",
            "median step ms",
            "Agent alive at end",
            "op lines per rank",
            "= reference",
        ],
        [
            [
                r["run"],
                r["job"],
                r["variant"],
                r["rep"],
                r["rc"],
                r["tokens_per_s"][0],
                r["median_step_ms"][0],
                r.get("agent_alive_at_end", "-"),
                [m[2] for m in r.get("ops_per_member", [])] or "-",
                r.get("ops_equal_reference", "-"),
            ]
            for r in runs_
        ],
    )
    agg = []
    ratios = {}
    for job in ("ddp", "fsdp"):
        by = {
            v: [
                statistics.mean(r["tokens_per_s"])
                for r in runs_
                if r["job"] == job and r["variant"] == v and r["rc"] == 0
            ]
            for v in ("none", "ci")
        }
        if not by["none"] or not by["ci"]:
            continue
        mn, mc = statistics.mean(by["none"]), statistics.mean(by["ci"])
        sd_n = statistics.stdev(by["none"]) if len(by["none"]) > 1 else 0.0
        sd_c = statistics.stdev(by["ci"]) if len(by["ci"]) > 1 else 0.0
        se = (mc / mn) * (
            (sd_n / mn) ** 2 / len(by["none"]) + (sd_c / mc) ** 2 / len(by["ci"])
        ) ** 0.5
        spread = (max(by["none"]) - min(by["none"])) / mn
        ratios[job] = (mc / mn, se, spread)
        agg.append(
            [
                job,
                len(by["none"]),
                len(by["ci"]),
                f"{mn:,.0f} ± {sd_n:,.0f}",
                f"{mc:,.0f} ± {sd_c:,.0f}",
                f"{mc / mn:.4f} ± {se:.4f}",
                f"{(1 - mc / mn) * 100:+.2f} %",
                f"{spread * 100:.1f} %",
            ]
        )
    agg_t = table(
        [
            "job",
            "runs without",
            "runs with",
            "tokens/s without (mean ± sd)",
            "tokens/s with (mean ± sd)",
            "ratio with/without (± s.e.)",
            "overhead",
            "spread of the runs without",
        ],
        agg,
    )
    fo = [r for r in rows if r["metric"].startswith("failopen_")]
    other = [r for r in rows if r["metric"] == "run" and r.get("job") not in ("ddp", "fsdp")]
    return per, agg_t, ratios, fo, other


def turns_section(runs: list[Path]):
    """Scenario 1b by copies taking turns (bench/gpu/throughput_turns.py): one row per job and
    variant, and the per-session detail."""
    lines = [{"run": run.name, **t} for run in runs for t in jsonl(run / "turns.jsonl")]
    sessions = [x for x in lines if x["metric"] == "session"]
    ratios = [x for x in lines if x["metric"].startswith("throughput_ratio_")]
    config = {}  # run -> the job's size, told by its step time
    for x in sessions:
        batch = 8
        args = x.get("job_args") or []
        if "--batch" in args:
            batch = int(args[args.index("--batch") + 1])
        steps_ms = [c.get("median_step_ms") or 0 for c in (x.get("copies") or {}).values()]
        config.setdefault((x["run"], x["job"]), (batch, []))[1].extend(steps_ms)
    rows, goals = [], []
    for r in ratios:
        label, job = r["metric"][len("throughput_ratio_") :].split("_over_none_")
        batch, steps_ms = config.get((r["run"], job), (8, [0]))
        what = f"batch {batch}/rank, {statistics.median(steps_ms):.0f} ms/step"
        lo, hi = (1 - r["value"] - 2 * r["se"]) * 100, (1 - r["value"] + 2 * r["se"]) * 100
        rows.append(
            [
                r["run"],
                job,
                what,
                label,
                r["sessions"],
                r["rounds"],
                f"{r['value']:.4f} ± {r['se']:.4f}",
                f"{r['overhead_pct']:+.2f} % ({lo:+.2f} .. {hi:+.2f} %)",
                r["session_means"],
                r["pooled_median"],
                r["pooled_sd"],
            ]
        )
        if label == "ci":
            goals.append((r["run"], f"{job}, {what}", r["value"], r["se"], hi))
    agg = table(
        [
            "run",
            "job",
            "size",
            "copy",
            "sessions",
            "rounds per session",
            "throughput over `none` (± s.e.)",
            "overhead (95 % interval)",
            "per-session means",
            "median of all rounds",
            "sd of one round's ratio",
        ],
        rows,
    )
    per = []
    for x in sessions:
        for label, c in (x.get("copies") or {}).items():
            extra = ""
            if "logs" in c:
                lg = c["logs"]
                extra = (
                    f"Agent alive {c.get('agent_alive_at_end')}; op lines per rank "
                    f"{c.get('op_lines_per_member')}; sealed {lg.get('sealed')}, gaps "
                    f"{lg.get('gap_lines')}, lost {lg.get('lost_records')}, coll_sn contiguous "
                    f"{lg.get('all_contiguous')}"
                )
            if "inspector_output" in c:
                io = c["inspector_output"]
                extra = f"Inspector wrote {io['lines']} lines in {io['files']} files"
            bs = c.get("block_s") or [0]
            per.append(
                [
                    x["run"],
                    x["job"],
                    x["session"],
                    label,
                    c["rc"],
                    len(bs) - 1,
                    c.get("median_step_ms"),
                    round(statistics.median(bs[1:]) * 1000, 2) if len(bs) > 1 else "-",
                    extra,
                ]
            )
    per_t = table(
        [
            "run",
            "job",
            "session",
            "copy",
            "rc",
            "blocks",
            "median step ms",
            "median block ms",
            "checks",
        ],
        per,
    )
    return agg, per_t, goals, sessions


def overhead_1a() -> str:
    lines = jsonl(OVERHEAD_1A)
    by = {x["metric"]: x for x in lines}
    rows = []
    for size in ("8B", "64KiB", "1MiB", "16MiB", "256MiB"):
        r70 = by.get(f"ratio_comminsight_over_empty_mask70_{size}", {})
        r6 = by.get(f"ratio_comminsight_over_empty_mask6_{size}", {})
        us = {
            v: by.get(f"us_per_iter_{v}_{size}", {}).get("value")
            for v in (
                "none",
                "empty_mask70",
                "comminsight_mask70",
                "comminsight_mask6",
                "empty_mask6",
            )
        }
        rows.append(
            [
                size,
                us["none"],
                us["empty_mask70"],
                us["comminsight_mask70"],
                us["empty_mask6"],
                us["comminsight_mask6"],
                f"{r70.get('value')} (paired {r70.get('paired_median')}, "
                f"Δ {r70.get('delta_us')} µs)",
                f"{r6.get('value')} (paired {r6.get('paired_median')})",
            ]
        )
    return table(
        [
            "size",
            "none µs",
            "empty mask 70 µs",
            "CommInsight mask 70 µs",
            "empty mask 6 µs",
            "CommInsight mask 6 µs",
            "CommInsight / empty, mask 70",
            "CommInsight / empty, mask 6",
        ],
        rows,
    )


INSPECTOR_1A = ROOT / "results/2026-11-30-h200x2-e2e/overhead-1a-inspector"
SIZES = ("8B", "64KiB", "1MiB", "16MiB", "256MiB")


def round_medians(raw: list[dict]) -> dict[tuple, float]:
    """(variant, size, outer round) -> median µs per iteration of that round's samples."""
    samples: dict[tuple, list[float]] = {}
    for x in raw:
        if x.get("event") == "sample":
            key = (x["variant"], x["size"], x["outer_round"])
            samples.setdefault(key, []).append(x["us_per_iter"])
    return {k: statistics.median(v) for k, v in samples.items()}


def round_ratio_iqr(per_round: dict, num: str, den: str, size: str) -> tuple[float, float]:
    """Quartiles of the same round's ratio num/den: the round-to-round noise of the ratio."""
    rounds = sorted({r for v, sz, r in per_round if sz == size})
    ratios = [
        per_round[(num, size, r)] / per_round[(den, size, r)]
        for r in rounds
        if (num, size, r) in per_round and (den, size, r) in per_round
    ]
    if len(ratios) < 2:
        return (float("nan"), float("nan"))
    q = statistics.quantiles(ratios, n=4)
    return q[0], q[2]


def inspector_1a() -> tuple[str, list[list]]:
    """Scenario 1a with NCCL's Inspector: one table per run directory under INSPECTOR_1A, and
    the goal rows: CommInsight within the noise of the empty plugin with the same mask (the
    rounds' interquartile range of their ratio holds 1)."""
    parts, goals = [], []
    for run in sorted(p for p in INSPECTOR_1A.iterdir() if p.is_dir()):
        lines = jsonl(run / "overhead.jsonl")
        by = {x["metric"]: x for x in lines}
        rounds = by.get("ratio_inspector_over_empty_mask66_8B", {}).get("paired_rounds")
        per_round = round_medians(jsonl(run / "overhead_raw.jsonl"))
        rows = []
        for size in SIZES:
            lo, hi = round_ratio_iqr(per_round, "comminsight_mask70", "empty_mask70", size)
            goals.append(
                [
                    f"1a: CommInsight within the noise of the empty plugin, {size} ({run.name})",
                    "met" if lo <= 1 <= hi else "**missed**",
                    f"CommInsight / empty, mask 70: rounds' IQR {lo:.3f}–{hi:.3f}",
                ]
            )
            us = [
                by.get(f"us_per_iter_{v}_{size}", {}).get("value")
                for v in ("none", "empty_mask70", "comminsight_mask70", "empty_mask66", "inspector")
            ]

            def ratio(name, num, den, by=by, size=size, per_round=per_round):
                x = by.get(f"{name}_{size}", {})
                if not x:
                    return "-"
                lo, hi = round_ratio_iqr(per_round, num, den, size)
                return (
                    f"{x['value']} (paired {x.get('paired_median')}, rounds' IQR "
                    f"{lo:.2f}–{hi:.2f}, Δ {x.get('delta_us')} µs)"
                )

            rows.append(
                [size, *us]
                + [
                    ratio(*n)
                    for n in (
                        (
                            "ratio_comminsight_over_empty_mask70",
                            "comminsight_mask70",
                            "empty_mask70",
                        ),
                        ("ratio_inspector_over_empty_mask66", "inspector", "empty_mask66"),
                        (
                            "ratio_comminsight_mask70_over_inspector",
                            "comminsight_mask70",
                            "inspector",
                        ),
                    )
                ]
            )
        recs = [x for x in lines if x["metric"] == "inspector_records"]
        per_op = [x["records_per_op"] for x in recs]
        parts.append(
            f"`{run.relative_to(ROOT)}` (`{(run / 'COMMAND').read_text().strip()}`; "
            f"{rounds} rounds)\n\n"
            + table(
                [
                    "size",
                    "none µs",
                    "empty mask 70 µs",
                    "CommInsight mask 70 µs",
                    "empty mask 66 µs",
                    "Inspector µs",
                    "CommInsight / empty, mask 70",
                    "Inspector / empty, mask 66",
                    "CommInsight / Inspector",
                ],
                rows,
            )
            + (
                f"\n\nRecords the Inspector wrote per all-reduce issued: "
                f"{min(per_op):.3f} to {max(per_op):.3f} over its {len(per_op)} runs "
                "(CommInsight's logs hold every op: `records_match_all_comminsight_mask70` "
                f"{by.get('records_match_all_comminsight_mask70', {}).get('value')})."
                if per_op
                else ""
            )
        )
    return "\n\n".join(parts), goals


def main(argv: list[str]) -> int:
    runs = [Path(a) for a in argv]
    versions = json.loads((runs[0] / "versions.json").read_text())
    first_line = (runs[0] / "run.log").read_text().splitlines()[0]
    hang_t, hangs = hangs_section(runs)
    per, agg, ratios, fo, other = train_section(runs)
    steps_t, steps = steps_section(runs)
    turn_agg, turn_per, turn_goals, turn_sessions = turns_section(runs)
    inspector_text, inspector_goals = inspector_1a() if INSPECTOR_1A.is_dir() else ("", [])
    out = []
    w = out.append
    w("# End to end on real GPUs: 2×H200, PyTorch + NCCL, end to end\n")
    w(
        "Generated by `bench/gpu/e2e_report.py` from the JSON lines under "
        + ", ".join(f"`{r.relative_to(ROOT) if r.is_absolute() else r}`" for r in runs)
        + "; nothing in this file is typed by hand except the prose under *Findings* and the "
        "later checks' sections appended after it (each from its `REPORT.md` under "
        "`results/`).\n"
    )
    w(
        f"- Machine: device tool kind `nvidia-h200-x2`: {versions['gpus'][0].split(',')[0]} × "
        f"{len(versions['gpus'])}, driver {versions['gpus'][0].split(',')[1].strip()}, "
        f"{versions['cpus']} CPUs, kernel {versions['kernel']} (Firecracker VM)."
    )
    w(
        f"- Software: Python {versions['python']}, torch {versions['torch']} (CUDA "
        f"{versions['cuda']}), NCCL {versions['nccl']} (torch's), the plugin built there from "
        "`profiler/src` (`run_overhead.sh BUILD_ONLY=1`), Inject installed from "
        "`dist/comminsight_inject-*.whl`, the Agent from `git archive HEAD` with its C engine "
        "core compiled there."
    )
    w(f"- Date: {first_line.split()[1]} (first run).")
    w(
        "- Commands (device tool `run`, kind `nvidia-h200-x2`, carrying `.whl`, "
        "`build/agent-src`, `dist/comminsight_inject-0.1.0-py3-none-any.whl`):"
    )
    for r in runs:
        w(f"  - `{r.name}`: `{command_of(r)}`")
    w(
        "- Report: `python bench/gpu/e2e_report.py "
        + " ".join(str(r) for r in argv)
        + " > results/gpu.md` (project venv).\n"
    )

    w("## Scenario 3: hangs (live Agent, 2 ranks on 2 GPUs, threshold 5 s)\n")
    w(
        "`bench/gpu/hang_job.py` (started by `e2e_driver.py` without torchrun, which would tear "
        "the job down before any threshold): one 16 MiB all-reduce a step on the default group, "
        "rank 1 faults at op 20. Latency is from the moment the hang began (rank 0's enqueue of "
        "op 20, or rank 1's fault if later) to the report's `detected_mono_ns`, and to the first "
        "poll (every 0.1 s) of `/api/v1/hangs` that listed it.\n"
    )
    w(hang_t + "\n")
    w("## Scenario 1b: training throughput with and without CommInsight\n")
    w(
        "`bench/gpu/gpt_train.py` under torchrun, 2 ranks: a GPT (8 blocks, d 1024, 16 heads, "
        "seq 512, batch 8 per rank, vocab 8192, 118 M parameters, bf16 autocast, AdamW), 300 "
        "steps, `loss.item()` every step, tokens/s over steps 30..299. *Without*: "
        "`NCCL_PROFILER_PLUGIN=none`, `COMMINSIGHT_INJECT_DISABLE=1`, no Agent. *With*: the "
        "plugin (default mask 70, GPU timing on), a live Agent with the Semantic Engine, Inject "
        "with step markers on. Runs alternate none, ci, ci, none per job, in two calls.\n"
    )
    w(agg + "\n")
    w("<details><summary>every run</summary>\n\n" + per + "\n\n</details>\n")
    if turn_sessions:
        w("### The same, by copies of the job taking turns on the GPUs\n")
        first = turn_sessions[0]
        w(
            "`bench/gpu/throughput_turns.py` (`SECTIONS=turns`): the copies of one job "
            f"({', '.join(first['variants'])}) are started together and take turns on both "
            "GPUs, a block of steps each ("
            + ", ".join(
                f"{run} {j.upper()}: {k}"
                for run, j, k in sorted(
                    {(x["run"], x["job"], x["block_steps"]) for x in turn_sessions}
                )
            )
            + "), rotating, each copy "
            f"{first['blocks']} blocks after a {first['warmup']}-step warm-up; a round of turns "
            "gives each copy's throughput over the first `none` copy's in the same round. "
            "`ci`: plugin (mask 70) + live Agent + Inject with step markers; `inspector`: NCCL's "
            "Inspector plugin (v2.28.9-1 sources, `NCCL_INSPECTOR_ENABLE=1`, dump interval 500 "
            "µs); `none2`: a second copy without anything, the A/A control. s.e.: the larger of "
            "the within-session and the between-session standard errors.\n"
        )
        w(turn_agg + "\n")
        w("<details><summary>every copy</summary>\n\n" + turn_per + "\n\n</details>\n")
    w("## Scenario 4: fail-open\n")
    fo_rows = []
    for r in fo:
        detail = []
        if "agent_killed_at_step" in r:
            detail.append(
                f"Agent SIGKILLed at step {r['agent_killed_at_step']}; median step "
                f"{r.get('median_step_ms_before_kill')} ms before, "
                f"{r.get('median_step_ms_after_kill')} ms after "
                f"({r.get('steps_after_kill')} steps)"
            )
            lg = r.get("logs", {})
            detail.append(
                f"sealed {lg.get('sealed')}, unsealed {lg.get('unsealed')}, gaps "
                f"{lg.get('gap_lines')}, lost {lg.get('lost_records')}, coll_sn "
                f"contiguous {lg.get('all_contiguous')}; op lines per rank "
                f"{[m[2] for m in r.get('ops_per_member', [])]} vs the undisturbed "
                f"runs' {[m[2] for m in r.get('reference_ops_per_member') or []]}: "
                f"equal {r.get('ops_equal_reference')}"
            )
        if "unwritable" in r:
            detail.append(
                f"{r['unwritable']}; files written there "
                f"{r.get('files_in_inspector_logs')}; Agent alive at end "
                f"{r.get('agent_alive_at_end')}"
            )
        fo_rows.append(
            [
                r["run"],
                r["metric"][9:],
                r["rc"],
                r["tokens_per_s"][0],
                r["median_step_ms"][0],
                "; ".join(detail),
            ]
        )
    w(table(["run", "case", "job rc", "tokens/s", "median step ms", "evidence"], fo_rows) + "\n")
    w("## Scenario 2: step recovery against Inject's step markers\n")
    w(
        "The Semantic Engine (this checkout, `recover_steps`) on the sealed logs of the runs kept "
        "(the first *with* run of each job, the Agent-killed run, the TP+DP jobs); Inject's "
        "`step` lines are the truth. `tpdp`: a 1 × 2 DeviceMesh (dp × tp) on 2 processes, "
        "Megatron-style tensor-parallel MLP blocks (all-reduce on tp forward and backward per "
        "block), 4 micro-batches per optimizer step, then the dp gradient all-reduce (25 MiB "
        "buckets) on the 1-rank dp group. `tpdp4`: the same on a 2 × 2 mesh of 4 processes on the "
        "2 GPUs (GPU = (dp + tp) mod 2, so every tp and dp communicator spans both GPUs; the world "
        "group is never used for a collective).\n"
    )
    w(steps_t + "\n")
    if other:
        w(
            table(
                [
                    "run",
                    "job",
                    "mesh",
                    "rc",
                    "tokens/s",
                    "median step ms",
                    "op lines per member",
                    "collectives the script issued per rank",
                ],
                [
                    [
                        r["run"],
                        r["job"],
                        r.get("mesh"),
                        r["rc"],
                        r["tokens_per_s"][0],
                        r["median_step_ms"][0],
                        [m[2] for m in r.get("ops_per_member", [])],
                        r.get("issued_by_script", [None])[0],
                    ]
                    for r in other
                ],
            )
            + "\n"
        )
    w("## Scenario 1a: host-lean all-reduce overhead (2026-11-30)\n")
    w(
        "`results/2026-11-30-h200x2-e2e/overhead-1a/` (`OUT=$OUT/overhead ROUNDS=4 "
        "DEADLINE_S=230 NO_PROBE=1 bash bench/gpu/run_overhead.sh`: 4 alternating rounds of the "
        "five variants, medians of GPU-event µs per iteration, profiler sources sha256 "
        "23bf36f6c9c22db8, this checkout's). The 2026-11-29 run with 10 rounds is in "
        "`results/2026-11-29-h200x2/`. Small sizes move by a few µs between rounds: "
        "ratios below 1 there are noise, not a speed-up.\n"
    )
    w(overhead_1a() + "\n")
    if INSPECTOR_1A.is_dir():
        w("### The same with NCCL's Inspector plugin\n")
        w(
            "NCCL's own Inspector (`ext-profiler/inspector` at tag v2.28.9-1, exported by "
            "`bench/gpu/get_inspector_src.sh` and built there by `run_overhead.sh`, the "
            "Makefile's flags without `-march=native`), run as its README says "
            "(`NCCL_INSPECTOR_ENABLE=1`, `NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=500`). "
            "It asks NCCL for Coll|KernelCh (mask 66), so its own cost is Inspector / empty "
            "plugin with mask 66, as CommInsight's is CommInsight / empty with mask 70.\n"
        )
        w(inspector_text + "\n")

    w("## Goals\n")
    g = []
    for h in hangs:
        ok = h["value"]
        gap = ""
        if not ok:
            gap = (
                "no critical report"
                if not h.get("verdict")
                else ", ".join(k for k, v in h.get("checks", {}).items() if not v) + " wrong"
            )
        g.append(
            [
                f"hang `{h['fault']}` ({h['run']}) localized within threshold + 2 s",
                "met" if ok else "**missed**",
                f"{h.get('detection_latency_s', '-')} s" + (f"; {gap}" if gap else ""),
            ]
        )
    for job, (ratio, se, spread) in ratios.items():
        # shown only when the overhead's upper bound (2 s.e.) is within 1 %
        met = (1 - ratio) + 2 * se <= 0.01
        g.append(
            [
                f"{job} throughput within 1 %",
                "met" if met else "**not shown** (noise)",
                f"ratio {ratio:.4f} ± {se:.4f} (s.e.); runs without CommInsight alone spread "
                f"{spread * 100:.1f} %",
            ]
        )
    for run, job, ratio, se, hi in turn_goals:
        # shown when the upper end of the 95 % interval of the overhead is within 1 %
        g.append(
            [
                f"{job} throughput within 1 % (copies taking turns, {run})",
                "met" if hi <= 1.0 else "**not shown**",
                f"ratio {ratio:.4f} ± {se:.4f} (s.e.); overhead at most {hi:+.2f} % (95 %)",
            ]
        )
    g.extend(inspector_goals)
    for r in fo:
        g.append(
            [
                f"fail-open `{r['metric'][9:]}` ({r['run']}): training completes",
                "met" if r["rc"] == 0 else "**missed**",
                f"job rc {r['rc']}",
            ]
        )
    for s in steps:
        exact = s["steps_found"] == s["steps_run"] and s["precision"] == 1 and s["recall"] == 1
        g.append(
            [
                f"steps `{s['job']}` rank {s['rank']} ({s['run']}): exact count, every "
                "boundary within one op",
                "met" if exact else "**missed**",
                f"{s['steps_found']} / {s['steps_run']} steps, precision "
                f"{s['precision']:.3f}, recall {s['recall']:.3f}, max error "
                f"{s['max_err_ops']} ops",
            ]
        )
    w(table(["goal", "result", "measured"], g) + "\n")
    w(FINDINGS_PATH.read_text() if FINDINGS_PATH.exists() else "")
    for later in LATER_SECTIONS:  # checks run apart from run_e2e.sh, each with its own report
        if later.exists():
            w("\n" + later.read_text())
    print("\n".join(out))
    return 0


FINDINGS_PATH = ROOT / "results/2026-11-30-h200x2-e2e/FINDINGS.md"
LATER_SECTIONS = [
    # job-wide Step recovery: DDP, FSDP2, TP + DP, PP (bench/gpu/run_steps_jobwide.sh)
    ROOT / "results/2026-12-01-h200-steps-jobwide/REPORT.md",
]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
