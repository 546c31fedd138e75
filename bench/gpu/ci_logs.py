"""Read and verify CommInsight inspector_logs with the Python standard library only.

The GPU machine's image may lack msgspec and the project's generated models, so the GPU
benchmarks read `<COMMINSIGHT_HOME>/inspector_logs/*.jsonl` with `json` and `zlib` alone; the
names of fields and kinds come from the schema's generated name table
(`comminsight_gen.inspector_log_v1_fields`, standard library only). Everything is aggregated
while streaming: a host-lean run writes hundreds of thousands of op lines.

Checks per sealed segment: the file ends with a newline, its last line is a seal, the bytes
before the seal line number byte_count, hold record_count lines and have CRC-32 crc32
(zlib.crc32), op_count matches the op lines, and last_ring_seq - first_ring_seq + 1 =
ring_record_count + lost_count. A `.partial` file is an unsealed segment (counted, its lines
still read except a possibly truncated last one). A sealed segment the Profiler compressed
(`.jsonl.zst`) is decompressed with the standard library's zstd (Python 3.14) or the
zstandard package, whichever is there; while both forms of a segment exist the uncompressed
one is read.
"""

from __future__ import annotations

import json
import sys
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

# the generated name table is plain Python: importable on a machine without the project installed
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "generated" / "python"))
from comminsight_gen.inspector_log_v1_fields import F, V  # noqa: E402


@dataclass
class CommStats:
    """Op lines of one communicator member, keyed by (comm id, rank)."""

    comm_id: str
    rank: int
    n_ranks: int = 0
    pids: set[int] = field(default_factory=set)
    global_ranks: set[int] = field(default_factory=set)
    colls: Counter[str] = field(default_factory=Counter)  # coll func -> lines
    p2p: int = 0
    # AllReduce only, per message size
    allreduce_by_size: Counter[int] = field(default_factory=Counter)
    allreduce_by_size_dtype: Counter[tuple[int, str]] = field(default_factory=Counter)
    timing_source: Counter[str] = field(default_factory=Counter)
    kernel_gpu: int = 0
    gpu_times_present: int = 0
    gpu_stop_before_start: int = 0
    exec_us: dict[int, list[float]] = field(default_factory=dict)  # size -> [n, sum, min, max]
    exec_zero: Counter[int] = field(default_factory=Counter)  # size -> lines with exec 0
    channels_short: int = 0  # channels_completed < n_channels
    forced_complete: int = 0
    # NCCL numbers collectives per function (seqNumber counts 0,1,2,... per func and comm)
    coll_sns: dict[str, list[int]] = field(default_factory=dict)

    @property
    def allreduce(self) -> int:
        return self.colls.get("AllReduce", 0)

    def coll_sn_report(self) -> dict[str, dict[str, object]]:
        out: dict[str, dict[str, object]] = {}
        for func, sns in sorted(self.coll_sns.items()):
            distinct = len(set(sns))
            lo, hi = min(sns), max(sns)
            out[func] = {
                "n": len(sns),
                "min": lo,
                "max": hi,
                "duplicates": len(sns) - distinct,
                "contiguous": distinct == len(sns) and hi - lo + 1 == len(sns),
            }
        return out

    def coll_sn_contiguous(self) -> bool:
        return all(r["contiguous"] for r in self.coll_sn_report().values())

    def exec_report(self) -> dict[str, dict[str, float]]:
        out = {}
        for size, (n, total, lo, hi) in sorted(self.exec_us.items()):
            out[str(size)] = {"n": n, "mean_us": round(total / n, 3), "min_us": lo, "max_us": hi}
        return out


@dataclass
class ProcessStats:
    host: str
    pid: int
    start_real_ns: int
    global_rank: int | None = None
    local_rank: int | None = None
    segments_sealed: int = 0
    segments_unsealed: int = 0
    segment_indices: list[int] = field(default_factory=list)
    comm_init: int = 0
    comm_finalize: int = 0
    profiler_abis: Counter[str] = field(default_factory=Counter)


@dataclass
class LogSummary:
    home: str
    files: int = 0
    sealed: int = 0
    unsealed: int = 0
    seal_failures: list[str] = field(default_factory=list)
    gap_lines: int = 0
    lost_records: int = 0
    bad_lines: int = 0
    hang_evidence: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    comms: dict[tuple[str, int], CommStats] = field(default_factory=dict)
    processes: dict[tuple[str, int, int], ProcessStats] = field(default_factory=dict)

    @property
    def seals_ok(self) -> bool:
        return self.files > 0 and self.unsealed == 0 and not self.seal_failures

    def segment_index_problems(self) -> list[str]:
        problems = []
        for p in self.processes.values():
            idx = sorted(p.segment_indices)
            if idx != list(range(len(idx))):
                problems.append(f"pid {p.pid}: segment indices {idx}")
        return problems


def _verify_seal(data: bytes, name: str) -> tuple[dict | None, str | None]:
    """Returns (seal ci object, problem) for a sealed file's bytes."""
    if not data.endswith(b"\n"):
        return None, f"{name}: does not end with a newline"
    cut = data.rfind(b"\n", 0, len(data) - 1) + 1  # first byte of the last line
    try:
        seal = json.loads(data[cut:-1])[F.CI]
    except (ValueError, KeyError, TypeError):
        return None, f"{name}: last line is not JSON with {F.CI}"
    if seal.get(F.KIND) != V.SEAL:
        return None, f"{name}: last line {F.KIND} {seal.get(F.KIND)!r}, not {V.SEAL}"
    prefix = data[:cut]
    if seal.get(F.BYTE_COUNT) != len(prefix):
        return seal, f"{name}: {F.BYTE_COUNT} {seal.get(F.BYTE_COUNT)} != {len(prefix)}"
    lines = prefix.count(b"\n")
    if seal.get(F.RECORD_COUNT) != lines:
        return seal, f"{name}: {F.RECORD_COUNT} {seal.get(F.RECORD_COUNT)} != {lines}"
    crc = zlib.crc32(prefix) & 0xFFFFFFFF
    if seal.get(F.CRC32) != crc:
        return seal, f"{name}: {F.CRC32} {seal.get(F.CRC32)} != {crc}"
    first, last = seal.get(F.FIRST_RING_SEQ), seal.get(F.LAST_RING_SEQ)
    if first is not None and last is not None:
        covered = seal.get(F.RING_RECORD_COUNT, 0) + seal.get(F.LOST_COUNT, 0)
        if last - first + 1 != covered:
            return seal, f"{name}: ring seqs {first}..{last} but {covered} records+lost"
    return seal, None


_INSPECTOR_KIND = {V.C: V.COLL, V.P: V.P2P}  # the compact form's op kinds


def _inspector_form(ci: dict) -> dict:
    """A compact op line (kinds c and p) as the Inspector form's objects (header, coll_perf,
    ci), with the execution time the writer's op_timing gives: what _add_op counts."""
    coll = ci[F.KIND] == V.C
    timing = ci.get(F.TS)
    if timing == V.KERNEL_GPU and F.GD in ci:
        ns = int(ci[F.GD])
    elif timing == V.KERNEL_CPU:
        ns = int(ci.get(F.HC, 0))
    else:
        ns = int(ci.get(F.HS, 0))
    out = {
        F.HEADER: {F.ID: ci.get(F.C), F.RANK: ci.get(F.R, -1), F.N_RANKS: ci.get(F.N, 0)},
        F.CI: {
            F.KIND: V.COLL if coll else V.P2P,
            F.DATATYPE: ci.get(F.D),
            F.FORCED_COMPLETE: ci.get(F.FC, False),
            F.CHANNELS_COMPLETED: ci.get(F.CC, 0),
            F.N_CHANNELS: ci.get(F.CH, 0),
        },
    }
    if F.G0 in ci and F.GD in ci:
        out[F.CI][F.GPU_START_GLOBALTIMER_NS] = int(ci[F.G0])
        out[F.CI][F.GPU_STOP_GLOBALTIMER_NS] = int(ci[F.G0]) + int(ci[F.GD])
    if coll:
        out[F.COLL_PERF] = {
            F.COLL: ci.get(F.F),
            F.COLL_SN: ci.get(F.S, -1),
            F.COLL_MSG_SIZE_BYTES: ci.get(F.B, -1),
            F.COLL_TIMING_SOURCE: timing,
            F.COLL_EXEC_TIME_US: max(ns, 0) // 1000,
        }
    return out


def _add_op(s: LogSummary, obj: dict, proc: ProcessStats | None) -> None:
    if obj[F.CI][F.KIND] in (V.C, V.P):
        obj = _inspector_form(obj[F.CI])
    hdr = obj.get(F.HEADER) or {}
    ci = obj[F.CI]
    key = (str(hdr.get(F.ID)), int(hdr.get(F.RANK, -1)))
    cs = s.comms.get(key)
    if cs is None:
        cs = s.comms[key] = CommStats(comm_id=key[0], rank=key[1])
    cs.n_ranks = int(hdr.get(F.N_RANKS, 0))
    if proc is not None:
        cs.pids.add(proc.pid)
        if proc.global_rank is not None:
            cs.global_ranks.add(proc.global_rank)
    if ci.get(F.FORCED_COMPLETE):
        cs.forced_complete += 1
    if ci[F.KIND] == V.P2P:
        cs.p2p += 1
        return
    perf = obj.get(F.COLL_PERF) or {}
    func = str(perf.get(F.COLL))
    cs.colls[func] += 1
    cs.coll_sns.setdefault(func, []).append(int(perf.get(F.COLL_SN, -1)))
    if func != "AllReduce":
        return
    size = int(perf.get(F.COLL_MSG_SIZE_BYTES, -1))
    cs.allreduce_by_size[size] += 1
    cs.allreduce_by_size_dtype[(size, str(ci.get(F.DATATYPE)))] += 1
    src = str(perf.get(F.COLL_TIMING_SOURCE))
    cs.timing_source[src] += 1
    if src == "kernel_gpu":
        cs.kernel_gpu += 1
    g0, g1 = ci.get(F.GPU_START_GLOBALTIMER_NS), ci.get(F.GPU_STOP_GLOBALTIMER_NS)
    if g0 is not None and g1 is not None:
        cs.gpu_times_present += 1
        if g1 < g0:
            cs.gpu_stop_before_start += 1
    ex = float(perf.get(F.COLL_EXEC_TIME_US, -1))
    acc = cs.exec_us.get(size)
    if acc is None:
        cs.exec_us[size] = [1, ex, ex, ex]
    else:
        acc[0] += 1
        acc[1] += ex
        acc[2] = min(acc[2], ex)
        acc[3] = max(acc[3], ex)
    if ex <= 0:
        cs.exec_zero[size] += 1
    if ci.get(F.CHANNELS_COMPLETED, 0) < ci.get(F.N_CHANNELS, 0):
        cs.channels_short += 1


def _zstd_decompress(data: bytes) -> bytes:
    try:
        from compression import zstd  # Python 3.14

        return zstd.decompress(data)
    except ImportError:
        pass
    try:
        import zstandard
    except ImportError:
        raise SystemExit(
            "compressed inspector_logs segments (.jsonl.zst) need Python 3.14 or the zstandard "
            "package; or run with COMMINSIGHT_PROFILER_LOG_ZSTD_LEVEL=0"
        ) from None
    return zstandard.ZstdDecompressor().decompress(data)


def segment_paths(logdir: Path) -> list[Path]:
    """Sealed segments (one file each: the uncompressed one while both forms exist), then the
    open ones."""
    sealed: dict[str, Path] = {}
    for path in sorted(logdir.glob("*.jsonl")) + sorted(logdir.glob("*.jsonl.zst")):
        sealed.setdefault(path.name.removesuffix(".zst"), path)
    return [sealed[n] for n in sorted(sealed)] + sorted(logdir.glob("*.jsonl.partial"))


def segment_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return _zstd_decompress(data) if path.name.endswith(".zst") else data


def read_home(home: str | Path) -> LogSummary:
    """Reads every segment under <home>/inspector_logs and aggregates it."""
    home = Path(home)
    s = LogSummary(home=str(home))
    logdir = home / "inspector_logs"
    for path in segment_paths(logdir):
        s.files += 1
        data = segment_bytes(path)
        sealed = not path.name.endswith(".partial")
        seal: dict | None = None
        if sealed:
            seal, problem = _verify_seal(data, path.name)
            if problem:
                s.seal_failures.append(problem)
                seal = None
                body = data
            else:
                s.sealed += 1
                body = data[: seal[F.BYTE_COUNT]]
        else:
            s.unsealed += 1
            body = data[: data.rfind(b"\n") + 1]  # the last line may be cut short
        proc: ProcessStats | None = None
        ops_seen = 0
        for raw in body.splitlines():
            if not raw:
                continue
            try:
                obj = json.loads(raw)
                ci = obj[F.CI]
                kind = ci[F.KIND]
            except (ValueError, KeyError, TypeError):
                s.bad_lines += 1
                continue
            # an op counts under its kind whichever form it is written in
            s.kinds[_INSPECTOR_KIND.get(kind, kind)] += 1
            if kind in (V.COLL, V.P2P, V.C, V.P):
                ops_seen += 1
                _add_op(s, obj, proc)
            elif kind == V.SEGMENT_START:
                p = ci.get(F.PROCESS) or {}
                pkey = (str(p.get(F.HOST)), int(p.get(F.PID, 0)), int(p.get(F.START_REAL_NS, 0)))
                proc = s.processes.get(pkey)
                if proc is None:
                    proc = s.processes[pkey] = ProcessStats(*pkey)
                proc.global_rank = p.get(F.GLOBAL_RANK)
                proc.local_rank = p.get(F.LOCAL_RANK)
                proc.segment_indices.append(int(ci.get(F.SEGMENT_INDEX, -1)))
                if sealed:
                    proc.segments_sealed += 1
                else:
                    proc.segments_unsealed += 1
            elif kind == V.COMM_INIT:
                if proc is not None:
                    proc.comm_init += 1
                    proc.profiler_abis[str(ci.get(F.PROFILER_ABI))] += 1
            elif kind == V.COMM_FINALIZE:
                if proc is not None:
                    proc.comm_finalize += 1
            elif kind == V.GAP:
                s.gap_lines += 1
                s.lost_records += int(ci.get(F.LOST_COUNT, 0))
            elif kind == V.HANG_EVIDENCE:
                s.hang_evidence += 1
            elif kind == V.SEAL:
                s.seal_failures.append(f"{path.name}: a {V.SEAL} line before the end")
        if seal is not None and seal.get(F.OP_COUNT) != ops_seen:
            s.seal_failures.append(
                f"{path.name}: {F.OP_COUNT} {seal.get(F.OP_COUNT)} != {ops_seen} op lines"
            )
    return s


def comm_inits(home: str | Path) -> list[dict]:
    """The communicator member (ci.comm) of every comm_init line under <home>/inspector_logs,
    sealed segments and unsealed alike, unchecked (a line that is not JSON is skipped)."""
    marker = f'"{V.COMM_INIT}"'
    out = []
    for path in segment_paths(Path(home) / "inspector_logs"):
        for line in segment_bytes(path).decode(errors="replace").splitlines():
            if marker not in line:
                continue
            try:
                ci = json.loads(line).get(F.CI, {})
            except ValueError:
                continue
            if ci.get(F.KIND) == V.COMM_INIT:
                out.append(ci.get(F.COMM, {}))
    return out


def comm_report(cs: CommStats) -> dict[str, object]:
    """One communicator member's counts as a JSON-able dict."""
    return {
        "comm_id": cs.comm_id,
        "rank": cs.rank,
        "n_ranks": cs.n_ranks,
        "pids": sorted(cs.pids),
        "global_ranks": sorted(cs.global_ranks),
        "colls": dict(cs.colls),
        "p2p": cs.p2p,
        "allreduce": cs.allreduce,
        "allreduce_by_size": {str(k): v for k, v in sorted(cs.allreduce_by_size.items())},
        "allreduce_by_size_dtype": {
            f"{k[0]}:{k[1]}": v for k, v in sorted(cs.allreduce_by_size_dtype.items())
        },
        "timing_source": dict(cs.timing_source),
        "kernel_gpu": cs.kernel_gpu,
        "gpu_times_present": cs.gpu_times_present,
        "gpu_stop_before_start": cs.gpu_stop_before_start,
        "exec_zero_by_size": {str(k): v for k, v in sorted(cs.exec_zero.items())},
        "channels_short": cs.channels_short,
        "forced_complete": cs.forced_complete,
        "coll_sn": cs.coll_sn_report(),
    }


def summary_report(s: LogSummary) -> dict[str, object]:
    """Segment-level facts as a JSON-able dict."""
    return {
        "files": s.files,
        "sealed_ok": s.sealed,
        "unsealed": s.unsealed,
        "seal_failures": s.seal_failures[:10],
        "segment_index_problems": s.segment_index_problems(),
        "gap_lines": s.gap_lines,
        "lost_records": s.lost_records,
        "bad_lines": s.bad_lines,
        "hang_evidence": s.hang_evidence,
        "kinds": dict(s.kinds),
        "processes": [
            {
                "pid": p.pid,
                "global_rank": p.global_rank,
                "local_rank": p.local_rank,
                "segments_sealed": p.segments_sealed,
                "segments_unsealed": p.segments_unsealed,
                "comm_init": p.comm_init,
                "comm_finalize": p.comm_finalize,
                "profiler_abi": dict(p.profiler_abis),
            }
            for p in s.processes.values()
        ],
    }
