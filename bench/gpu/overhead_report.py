"""Summarize the alternating host-lean overhead runs of bench/gpu/run_overhead.sh.

Input: a work directory holding manifest.jsonl (one line per run: round, variant, out, home,
rc) and each run's stdout (hostlean_allreduce's JSON lines mixed with NCCL's own output).
For every CommInsight run, its fresh COMMINSIGHT_HOME is read with ci_logs (standard library
only) and checked: the AllReduce op lines of each communicator member must equal the
all-reduces that run issued (hostlean's final "issued" line), per message size.

Output (stdout and --out): JSON lines {"bench":"gpu_overhead","metric","value","unit"}, with
extra keys where a number needs context:
  us_per_iter_<variant>_<size>            median over every (round, inner round) sample
  ratio_comminsight_over_empty_mask<M>_<size>, delta_us_... (same mask, per size)
  ratio_empty_mask70_over_none_<size>     NCCL's own cost of loading a plugin with KernelCh
  ratio_inspector_over_empty_mask66_<size> NVIDIA's NCCL Inspector / empty plugin, its mask 66
  ratio_inspector_over_none_<size>, ratio_empty_mask66_over_none_<size>,
  ratio_comminsight_mask70_over_inspector_<size>
  records_match (one per CommInsight run), records_match_all, kernel_gpu_records_...
  inspector_records (one per Inspector run): JSON records it wrote vs the all-reduces issued
Any subset of the variants may be present; ratios need both of theirs.

--inspector-dir DIR (run_overhead.sh, after each Inspector run): one JSON object on stdout
counting what the Inspector wrote under DIR (files, bytes, records; per communicator, size,
timing source), which the manifest line of that run carries as "inspector".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import ci_logs  # bench/gpu/ci_logs.py: the script's own directory is on sys.path
from ci_logs import F  # the inspector-log schema's names (NVIDIA Inspector's lines are a subset)

BENCH = "gpu_overhead"
# The order of the us_per_iter lines; a variant not named here comes after these, by name.
VARIANT_ORDER = [
    "none",
    "empty_mask70",
    "comminsight_mask70",
    "comminsight_sampled",
    "comminsight_mask6",
    "empty_mask6",
    "inspector",
    "empty_mask66",
]
RATIOS = [
    ("comminsight_mask70", "empty_mask70", "ratio_comminsight_over_empty_mask70"),
    ("comminsight_mask6", "empty_mask6", "ratio_comminsight_over_empty_mask6"),
    ("empty_mask70", "none", "ratio_empty_mask70_over_none"),
    ("comminsight_mask70", "none", "ratio_comminsight_mask70_over_none"),
    ("comminsight_sampled", "none", "ratio_comminsight_sampled_over_none"),
    ("comminsight_sampled", "empty_mask70", "ratio_comminsight_sampled_over_empty_mask70"),
    # NVIDIA's NCCL Inspector (mask Coll|KernelCh = 66) against the empty plugin with its mask:
    # its own cost, as comminsight/empty_mask70 is ours; then against nothing and against us.
    ("inspector", "empty_mask66", "ratio_inspector_over_empty_mask66"),
    ("inspector", "none", "ratio_inspector_over_none"),
    ("empty_mask66", "none", "ratio_empty_mask66_over_none"),
    ("comminsight_mask70", "inspector", "ratio_comminsight_mask70_over_inspector"),
]


class Emitter:
    def __init__(self, out: Path | None) -> None:
        self.fh = out.open("w") if out else None

    def __call__(self, metric: str, value: object, unit: str, **extra: object) -> None:
        line = {"bench": BENCH, "metric": metric, "value": value, "unit": unit, **extra}
        text = json.dumps(line, separators=(",", ":"))
        print(text, flush=True)
        if self.fh:
            self.fh.write(text + "\n")
            self.fh.flush()


def json_lines(path: Path) -> list[dict]:
    """hostlean's JSON lines out of a log that NCCL also writes to."""
    out = []
    for raw in path.read_text(errors="replace").splitlines():
        if raw.startswith('{"bench":"hostlean_allreduce"'):
            try:
                out.append(json.loads(raw))
            except ValueError:
                pass
    return out


def nccl_lines(path: Path, word: str) -> list[str]:
    return [ln for ln in path.read_text(errors="replace").splitlines() if word in ln]


def check_records(run: dict, lines: list[dict], summary: ci_logs.LogSummary, emit: Emitter) -> dict:
    """Compares a CommInsight run's sealed logs with what it issued; emits one line."""
    issued = next((ln for ln in lines if ln.get("event") == "issued"), None)
    base = {"variant": run["variant"], "round": run["round"]}
    if issued is None:
        emit("records_match", False, "bool", **base, reason="run printed no issued line")
        return {"match": False, "kernel_gpu": 0, "records": 0, "gpu_stop_before_start": 0}
    want_total = issued["allreduce_per_comm"]
    want_sizes = {int(k): v for k, v in issued["per_size"].items()}
    ncomms = issued["ncomms"]
    per_rank = {}
    match = len(summary.comms) == ncomms and summary.seals_ok and summary.lost_records == 0
    kernel_gpu = 0
    records = 0
    stop_before_start = 0
    for (_cid, rank), cs in sorted(summary.comms.items(), key=lambda kv: kv[0][1]):
        sizes_ok = dict(cs.allreduce_by_size) == want_sizes
        other = sum(n for f, n in cs.colls.items() if f != "AllReduce") + cs.p2p
        ok = cs.allreduce == want_total and sizes_ok and other == 0 and cs.coll_sn_contiguous()
        match = match and ok
        kernel_gpu += cs.kernel_gpu
        records += cs.allreduce
        stop_before_start += cs.gpu_stop_before_start
        per_rank[str(rank)] = {
            "allreduce_records": cs.allreduce,
            "per_size_match": sizes_ok,
            "kernel_gpu": cs.kernel_gpu,
            "timing_source": dict(cs.timing_source),
            "gpu_stop_before_start": cs.gpu_stop_before_start,
            "channels_short": cs.channels_short,
            "forced_complete": cs.forced_complete,
            "coll_sn_contiguous": cs.coll_sn_contiguous(),
            "other_ops": other,
        }
        if not sizes_ok:
            per_rank[str(rank)]["allreduce_by_size"] = {
                str(k): v for k, v in sorted(cs.allreduce_by_size.items())
            }
    seg = ci_logs.summary_report(summary)
    emit(
        "records_match",
        match,
        "bool",
        **base,
        expected_allreduce_per_comm=want_total,
        expected_comms=ncomms,
        comms_seen=len(summary.comms),
        per_rank=per_rank,
        kernel_gpu_records=kernel_gpu,
        sealed_segments=seg["sealed_ok"],
        unsealed_segments=seg["unsealed"],
        seal_failures=seg["seal_failures"],
        gap_lines=seg["gap_lines"],
        lost_records=seg["lost_records"],
        profiler_abi=[p["profiler_abi"] for p in seg["processes"]],
    )
    return {
        "match": match,
        "kernel_gpu": kernel_gpu,
        "records": records,
        "gpu_stop_before_start": stop_before_start,
    }


def inspector_summary(dump_dir: Path) -> dict:
    """What the NCCL Inspector wrote under dump_dir: one JSON object per line (a communicator's
    latest completed collective each time its dump thread found a new one)."""
    files = sorted(p for p in dump_dir.rglob("*") if p.is_file()) if dump_dir.is_dir() else []
    records = bad = nbytes = 0
    comms: dict[str, dict] = {}
    per_size: Counter[str] = Counter()
    colls: Counter[str] = Counter()
    timing: Counter[str] = Counter()
    for path in files:
        nbytes += path.stat().st_size
        with path.open("rb") as fh:
            for raw in fh:
                if not raw.strip():
                    continue
                try:
                    rec = json.loads(raw)
                    head, perf = rec[F.HEADER], rec[F.COLL_PERF]
                    key = f"{head[F.ID]}:{head[F.RANK]}"
                    sn = int(perf[F.COLL_SN])
                except (ValueError, KeyError, TypeError):
                    bad += 1
                    continue
                records += 1
                cs = comms.setdefault(key, {"rank": head[F.RANK], "records": 0, "sns": set()})
                cs["records"] += 1
                cs["sns"].add(sn)
                per_size[str(perf.get(F.COLL_MSG_SIZE_BYTES))] += 1
                colls[str(perf.get(F.COLL))] += 1
                timing[str(perf.get(F.COLL_TIMING_SOURCE))] += 1
    per_comm = {
        key: {
            "rank": cs["rank"],
            "records": cs["records"],
            "distinct_coll_sn": len(cs["sns"]),
            "max_coll_sn": max(cs["sns"]),
        }
        for key, cs in sorted(comms.items())
    }
    # "records" first: run_overhead.sh's log line takes the first "records" of this object.
    return {
        "records": records,
        "files": len(files),
        "bytes": nbytes,
        "bad_lines": bad,
        "dir": str(dump_dir),
        "per_comm": per_comm,
        "per_size": dict(sorted(per_size.items(), key=lambda kv: (len(kv[0]), kv[0]))),
        "colls": dict(colls),
        "timing_source": dict(timing),
    }


def inspector_records(run: dict, lines: list[dict], emit: Emitter) -> None:
    """One line per Inspector run: the records it wrote against the all-reduces issued. The
    Inspector keeps only each communicator's latest completed collective and its dump thread
    writes that when it finds a new one, so fewer records than ops is its design, not a loss."""
    summ = run["inspector"]
    issued = next((ln for ln in lines if ln.get("event") == "issued"), None)
    base = {"variant": run["variant"], "round": run["round"]}
    counts = {k: summ.get(k) for k in ("files", "bytes", "bad_lines")}
    if issued is None or "per_comm" not in summ:
        reason = "run printed no issued line" if issued is None else "no summary of the dump"
        emit("inspector_records", summ.get("records"), "records", **base, **counts, reason=reason)
        return
    ncomms = issued["ncomms"]
    per_comm_issued = issued["allreduce_per_comm"]
    expected = per_comm_issued * ncomms
    records = summ["records"]
    got_sizes = summ.get("per_size", {})
    per_size = {
        k: {"issued": v * ncomms, "records": got_sizes.get(k, 0)}
        for k, v in sorted(issued["per_size"].items(), key=lambda kv: int(kv[0]))
    }
    for k, n in got_sizes.items():
        if k not in per_size:
            per_size[k] = {"issued": 0, "records": n}
    comms = summ["per_comm"]
    emit(
        "inspector_records",
        records,
        "records",
        **base,
        ops_issued=expected,
        records_per_op=round(records / expected, 6) if expected else None,
        comms_expected=ncomms,
        comms_seen=len(comms),
        allreduce_per_comm=per_comm_issued,
        # coll_sn counts a communicator's all-reduces from 0: the last op is per_comm - 1.
        last_op_recorded_all=len(comms) == ncomms
        and all(c["max_coll_sn"] == per_comm_issued - 1 for c in comms.values()),
        duplicate_records=sum(c["records"] - c["distinct_coll_sn"] for c in comms.values()),
        per_comm=comms,
        per_size=per_size,
        colls=summ.get("colls"),
        timing_source=summ.get("timing_source"),
        **counts,
    )


def paired_ratios(
    by_round: dict[tuple[str, str, int], list[float]], num: str, den: str, size: str
) -> list[float]:
    """Per outer round: median of num's samples / median of den's (same round, same size)."""
    out = []
    for (variant, sz, r), vals in by_round.items():
        if variant == num and sz == size and (den, size, r) in by_round:
            out.append(statistics.median(vals) / statistics.median(by_round[(den, size, r)]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON lines here")
    ap.add_argument("--raw", type=Path, default=None, help="write every sample line here")
    ap.add_argument(
        "--inspector-dir",
        type=Path,
        default=None,
        help="only print the summary of one NCCL Inspector dump directory (one JSON line)",
    )
    args = ap.parse_args()
    if args.inspector_dir is not None:
        print(json.dumps(inspector_summary(args.inspector_dir), separators=(",", ":")))
        return 0
    if args.work is None:
        ap.error("--work is required (or --inspector-dir)")
    emit = Emitter(args.out)
    runs = [json.loads(ln) for ln in (args.work / "manifest.jsonl").read_text().splitlines()]
    # Reading the logs is the slow part (hundreds of MB per CommInsight run): one process each.
    homes = [run["home"] for run in runs if run.get("home")]
    with ProcessPoolExecutor(max_workers=max(1, min(len(homes), os.cpu_count() or 1))) as ex:
        summaries = dict(zip(homes, ex.map(ci_logs.read_home, homes), strict=True))

    samples: dict[tuple[str, str], list[float]] = defaultdict(list)
    by_round: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    size_bytes: dict[str, int] = {}
    raw = args.raw.open("w") if args.raw else None
    failed = []
    warn_lines = 0
    checks: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        out = Path(run["out"])
        lines = json_lines(out) if out.exists() else []
        warns = nccl_lines(out, " WARN ") if out.exists() else []
        warn_lines += len(warns)
        if run["rc"] != 0 or not any(ln.get("event") == "issued" for ln in lines):
            tail = out.read_text(errors="replace").splitlines()[-5:] if out.exists() else []
            failed.append({"variant": run["variant"], "round": run["round"], "rc": run["rc"]})
            emit("run_failed", True, "bool", **failed[-1], tail=tail)
        for ln in lines:
            if raw:
                raw.write(json.dumps({**ln, "outer_round": run["round"]}) + "\n")
            if ln.get("event") == "sample":
                samples[(run["variant"], ln["size"])].append(float(ln["us_per_iter"]))
                by_round[(run["variant"], ln["size"], run["round"])].append(
                    float(ln["us_per_iter"])
                )
                size_bytes[ln["size"]] = int(ln["size_bytes"])
        if warns:
            emit("nccl_warn_lines", len(warns), "lines", variant=run["variant"], first=warns[:3])
        if run.get("home"):
            result = check_records(run, lines, summaries[run["home"]], emit)
            checks[run["variant"]].append(result)
        if run.get("inspector") is not None:
            inspector_records(run, lines, emit)
    if raw:
        raw.close()

    sizes = sorted(size_bytes, key=size_bytes.get)
    med: dict[tuple[str, str], float] = {}
    seen = {variant for variant, _size in samples}
    order = [v for v in VARIANT_ORDER if v in seen] + sorted(seen - set(VARIANT_ORDER))
    for variant in order:
        for size in sizes:
            vals = samples.get((variant, size))
            if not vals:
                continue
            med[(variant, size)] = m = statistics.median(vals)
            q1, _q2, q3 = statistics.quantiles(vals, n=4) if len(vals) > 1 else (m, m, m)
            emit(
                f"us_per_iter_{variant}_{size}",
                round(m, 3),
                "us",
                n=len(vals),
                min=round(min(vals), 3),
                max=round(max(vals), 3),
                q1=round(q1, 3),
                q3=round(q3, 3),
                iqr=round(q3 - q1, 3),
            )
    for num, den, name in RATIOS:
        for size in sizes:
            if (num, size) in med and (den, size) in med:
                a, b = med[(num, size)], med[(den, size)]
                paired = paired_ratios(by_round, num, den, size)
                emit(
                    f"{name}_{size}",
                    round(a / b, 4),
                    "ratio",
                    delta_us=round(a - b, 3),
                    paired_median=round(statistics.median(paired), 4) if paired else None,
                    paired_rounds=len(paired),
                )

    for variant, results in sorted(checks.items()):
        emit(
            f"records_match_all_{variant}",
            all(r["match"] for r in results),
            "bool",
            runs=len(results),
            runs_matching=sum(r["match"] for r in results),
        )
        total = sum(r["records"] for r in results)
        gpu = sum(r["kernel_gpu"] for r in results)
        emit(
            f"kernel_gpu_records_{variant}",
            gpu,
            "records",
            of_allreduce_records=total,
            gpu_stop_before_start=sum(r["gpu_stop_before_start"] for r in results),
        )
    emit("runs_total", len(runs), "runs", failed=len(failed), nccl_warn_lines=warn_lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
