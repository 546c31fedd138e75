"""Score the Semantic Engine on logs of real training (bench/gpu/train_steps.py, gpt_train.py,
pp_train.py): did it find every Step, each between the right optimizer markers?

    python bench/gpu/steps_report.py DIR|TAR [DIR|TAR ...] [--markdown FILE]

Each TAR is a steps.tar.gz of bench/gpu/run_steps_jobwide.sh (one folder per job, scored in
the order ddp, fsdp, tpdp_tp2, tpdp_dp2, pp_1f1b, pp_gpipe, then the rest; its rows are
labelled with the name of the TAR's folder, the run); each DIR (or job folder) holds
inspector_logs/ and the ground truth, which the engine never sees: either
markers/markers.rank<R>.json (train_steps.py's own CLOCK_MONOTONIC after every optimizer step)
or Inject's step markers, metadata/inject/*.jsonl (`step` lines, COMMINSIGHT_INJECT_STEP_MARKERS=1,
CLOCK_MONOTONIC when `optimizer.step()` returns); job/rank<R>.json (gpt_train.py, pp_train.py)
adds when the training loop began and the script's own `opt.step()` return times, a check of
the markers.

Per rank, the ops in host-issue order (the host clock the markers use). The true Step k is the
ops issued after marker k-1 (for k = 0: after the loop began, else from the first op) up to
marker k; ops before are the start-up, ops after the last marker the tail. Scored:

- `inside_marker_interval`: recovered Steps whose first op was issued after the previous
  step's marker and whose last op before this step's marker (the k-th recovered Step against
  markers k-1 and k);
- `exact_by_index`: recovered Step k has exactly the true Step k's first op, last op and op
  count ("Step k's boundaries match marker k"); `mismatched` lists the first of those that do
  not, as op positions [first, last] true vs recovered;
- `ends_matched`: recovered Step ends that are some true Step's end, whatever the index (so an
  index shift shows as exact ends with no exact index);
- the engine's confidence (the job cut's, and per Step), its warnings and problems.

Prints JSON lines {"bench","metric","value","unit", ...}; a rank's `value` (and the exit
status, through `all_exact`) says the counts agree and every Step lies inside its marker
interval, as before; `all_steps_exact` says every Step's boundaries are exact by index, and
`all_exact_by_index` says so of every rank. `--markdown FILE` also writes the tables.
`--without-markers` recovers the Steps from the ops alone, as the product must where a job
runs no Inject (the markers stay the ground truth, unseen by the engine); by default the
engine reads them too, as it does when they are there.
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

from comminsight.semantic.live_replay import replay_live
from comminsight.semantic.log_input import read_gpu_logs
from comminsight.semantic.offline import recover_steps
from comminsight_gen.inject_metadata_v1_names import F as IM
from comminsight_gen.inject_metadata_v1_names import V as IMV

SHOW_MISMATCHES = 6
JOB_ORDER = ["ddp", "fsdp", "tpdp_tp2", "tpdp_dp2", "pp_1f1b", "pp_gpipe"]


def emit(metric: str, value, unit: str, **extra) -> dict:
    line = {"bench": "gpu_steps", "metric": metric, "value": value, "unit": unit, **extra}
    print(json.dumps(line))
    return line


def jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def ground_truth(run_dir: Path) -> tuple[str, dict[int, list[int]], str]:
    """(job name, rank -> the times Steps ended, in step order, where they came from). A loop
    that issues collectives after `opt.step()` returns (the loss gathered to log) ends its
    Steps after them: its own iteration ends are the truth then, not the step markers."""
    loops = {}
    for p in sorted((run_dir / "job").glob("rank*.json")):
        j = json.loads(p.read_text())
        if j.get("loop", "plain") != "plain" and j.get("iteration_end_mono_ns"):
            loops[int(p.stem.removeprefix("rank"))] = j["iteration_end_mono_ns"]
    if loops:
        return run_dir.name, loops, "iterations"
    own = sorted((run_dir / "markers").glob("markers.rank*.json"))
    if own:
        out, mode = {}, run_dir.name
        for p in own:
            m = json.loads(p.read_text())
            mode = m.get("mode", mode)
            out[int(p.stem.removeprefix("markers.rank"))] = m["steps"]
        return mode, out, "script"
    steps: dict[int, list[tuple[int, int]]] = {}
    for p in sorted((run_dir / "metadata" / "inject").glob("*.jsonl")):
        for m in jsonl(p):
            if m.get(IM.KIND) == IMV.STEP:
                steps.setdefault(m[IM.RANK], []).append((m[IM.INDEX], m[IM.MONO_NS]))
    return run_dir.name, {r: [t for _, t in sorted(v)] for r, v in steps.items()}, "inject"


def job_output(run_dir: Path, rank: int) -> dict:
    p = run_dir / "job" / f"rank{rank}.json"
    return json.loads(p.read_text()) if p.exists() else {}


def score_rank(gpu, log, ends: list[int], job: dict) -> dict:
    ops = sorted(log.ops(), key=lambda o: (o.issue_ns, o.ring_seq))
    issue = [o.issue_ns for o in ops]
    pos = {o.ring_seq: i for i, o in enumerate(ops)}
    loop_start = job.get("start_mono_ns", 0)
    first_true = bisect.bisect_left(issue, loop_start)
    bounds = [bisect.bisect_left(issue, m) - 1 for m in ends]  # last op of true Step k
    truth = []
    for k, hi in enumerate(bounds):
        lo = bounds[k - 1] + 1 if k else first_true
        truth.append((lo, hi))
    found = [(pos[s.first_op.ring_seq], pos[s.last_op.ring_seq], s.op_count) for s in gpu.summaries]
    inside = 0
    for i, (first, last, _) in enumerate(found[: len(ends)]):
        lo = ends[i - 1] if i > 0 else 0
        inside += lo <= issue[first] and issue[last] <= ends[i]
    exact, mismatched = 0, []
    for k in range(max(len(truth), len(found))):
        t = truth[k] if k < len(truth) else None
        f = found[k] if k < len(found) else None
        ok = t is not None and f is not None and f == (t[0], t[1], t[1] - t[0] + 1)
        exact += ok
        if not ok and len(mismatched) < SHOW_MISMATCHES:
            mismatched.append(
                {
                    "step": k,
                    "true": list(t) if t else None,
                    "recovered": list(f[:2]) if f else None,
                    "recovered_ops": f[2] if f else None,
                }
            )
    true_ends = {hi for _, hi in truth}
    confs = [s.recovery.confidence for s in gpu.summaries]
    opt_returned = job.get("opt_step_returned_mono_ns") or []
    marker_check = None
    if opt_returned and len(opt_returned) == len(ends):
        # Inject stamps inside step(), the script just after it returns: a few µs apart
        d = [(b - a) / 1e3 for a, b in zip(ends, opt_returned, strict=True)]
        marker_check = {"script_minus_marker_us_min": min(d), "max": max(d)}
    return {
        "steps_run": len(ends),
        "steps_found": len(found),
        "inside_marker_interval": inside,
        "exact_by_index": exact,
        "ends_matched": sum(f[1] in true_ends for f in found),
        "mismatched": mismatched,
        "ops": len(ops),
        "startup_ops": first_true,
        "tail_ops": len(ops) - 1 - bounds[-1] if bounds else len(ops),
        "true_ops_per_step": sorted({hi - lo + 1 for lo, hi in truth})[:8],
        "ops_per_step": sorted({s.op_count for s in gpu.summaries})[:8],
        "warmup_steps": sum(s.warmup for s in gpu.summaries),
        "confidence_min": min(confs) if confs else None,
        "confidence_median": statistics.median(confs) if confs else None,
        "method": gpu.method,
        "marker_check": marker_check,
        "steps_run_by_script": len(opt_returned) or None,
    }


def report(
    run_dir: Path,
    rows: list[dict],
    exact_all: list[bool],
    run: str = "",
    live: bool = False,
    use_markers: bool = True,
) -> bool:
    mode, markers, source = ground_truth(run_dir)
    if not any(markers.values()):
        emit("no_ground_truth", run_dir.name, "", run=run, note="no step markers: the job failed")
        rows.append({"run": run, "job": mode, "failed": True})
        exact_all.append(False)
        return False
    if live:
        result = replay_live(run_dir / "inspector_logs", markers=use_markers)
    else:
        result = recover_steps(run_dir / "inspector_logs", markers=use_markers)
    ok = not result.problems
    for problem in result.problems:
        emit("problem", problem, "", run=run, job=run_dir.name)
    for warning in result.warnings:
        emit("warning", warning, "", run=run, job=run_dir.name)
    logs = {log.stream: log for log in read_gpu_logs(run_dir / "inspector_logs")[0]}
    cut = result.cut
    for gpu in result.gpus:
        rank = gpu.gpu.global_rank
        ends = markers.get(rank, [])
        r = score_rank(gpu, logs[gpu.stream], ends, job_output(run_dir, rank))
        inside = r["steps_found"] == r["steps_run"] == r["inside_marker_interval"]
        r["all_steps_exact"] = r["steps_found"] == r["steps_run"] == r["exact_by_index"] > 0
        ok &= inside
        exact_all.append(r["all_steps_exact"])
        line = emit(
            f"{mode}_rank{rank}",
            inside,
            "bool",
            run=run or run_dir.name,
            truth=source,
            job_confidence=cut.confidence if cut is not None else None,
            **r,
        )
        rows.append({**line, "run": run, "job": mode, "rank": rank, "warnings": result.warnings})
    if cut is not None:
        emit(
            f"{mode}_job_cut",
            cut.confidence,
            "confidence",
            run=run or run_dir.name,
            steps=cut.steps,
            warmup_steps=cut.warmup_steps,
            pivots=cut.pivots,
            reasons=cut.reasons,
        )
    return ok


def markdown(rows: list[dict]) -> str:
    runs = any(r.get("run") for r in rows)
    head = [
        *(["run"] if runs else []),
        "job",
        "rank",
        "Steps true / recovered",
        "exact boundaries (Step k = marker k)",
        "ends matching a true end",
        "inside their marker interval",
        "confidence (job; per Step min / median)",
        "ops: start-up / in Steps (true per Step) / tail",
        "recovered ops per Step",
    ]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    warned: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        lead = [r["run"]] if runs else []
        if r.get("failed"):
            cells = [*lead, r["job"], "-", "job failed: no step markers"]
            cells += ["-"] * (len(head) - len(cells))
            out.append("| " + " | ".join(cells) + " |")
            continue
        if r["warnings"]:
            warned[(r["run"], r["job"])] = r["warnings"]
        per_step = r["true_ops_per_step"]
        in_steps = r["ops"] - r["startup_ops"] - r["tail_ops"]
        out.append(
            "| "
            + " | ".join(
                str(c)
                for c in (
                    *lead,
                    r["job"],
                    r["rank"],
                    f"{r['steps_run']} / {r['steps_found']}",
                    f"{r['exact_by_index']} / {r['steps_run']}"
                    + ("" if r["all_steps_exact"] else " **mismatch**"),
                    f"{r['ends_matched']} / {r['steps_found']}",
                    f"{r['inside_marker_interval']} / {r['steps_found']}",
                    f"{r['job_confidence']}; {r['confidence_min']} / {r['confidence_median']}",
                    f"{r['startup_ops']} / {in_steps} ({per_step}) / {r['tail_ops']}",
                    r["ops_per_step"],
                )
            )
            + " |"
        )
    if warned:
        out.append(
            "\nWarnings the engine gave (`OfflineResult.warnings`, which `comminsight steps` "
            "prints):\n"
        )
        for (run, job), ws in warned.items():
            for w in ws:
                out.append(f"- {run + ' ' if run else ''}`{job}`: {w}")
    return "\n".join(out) + "\n"


def job_dirs(arg: str, tmp: Path) -> tuple[str, list[Path]]:
    """(run label, job folders) of a DIR or a steps.tar.gz."""
    path = Path(arg)
    if not path.name.endswith(".tar.gz"):
        return "", [path]
    where = tmp / f"{len(list(tmp.iterdir()))}"
    with tarfile.open(path) as tar:
        tar.extractall(where, filter="data")
    jobs = [d for d in where.iterdir() if d.is_dir()]
    rank = {name: i for i, name in enumerate(JOB_ORDER)}
    jobs.sort(key=lambda d: (rank.get(d.name, len(rank)), d.name))
    return path.resolve().parent.name, jobs


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--markdown", default="", help="also write the tables here")
    ap.add_argument(
        "--live",
        action="store_true",
        help="recover the Steps as the Agent's live engine would (live_replay), not offline",
    )
    ap.add_argument(
        "--without-markers",
        action="store_true",
        help="recover the Steps from the ops alone: Inject's step markers stay the truth only",
    )
    args = ap.parse_args(argv)
    rows: list[dict] = []
    results: list[bool] = []
    exact_all: list[bool] = []
    with tempfile.TemporaryDirectory() as tmp:
        for arg in args.dirs:
            run, jobs = job_dirs(arg, Path(tmp))
            results += [
                report(job, rows, exact_all, run, args.live, not args.without_markers)
                for job in jobs
            ]
    emit("all_exact_by_index", all(exact_all), "bool")
    emit("all_exact", all(results), "bool")
    if args.markdown:
        Path(args.markdown).write_text(markdown(rows))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
