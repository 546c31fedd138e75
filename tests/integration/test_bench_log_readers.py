"""The benchmarks' own readers of inspector_logs (the GPU harness's standard-library reader and
the fault bench's op counter) agree with the generated reader on what a real plugin run wrote:
every one takes its names from the schema's generated code, so a renamed field breaks them all
at once instead of silently zeroing a benchmark."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import msgspec
from logged_ops import OP_KINDS, is_coll, is_op
from sim_pipeline import logs_by_rank, simulate

from comminsight_gen.models.inspector_log_v1 import CiGap, InspectorLogRecord

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))
import ci_logs  # noqa: E402


def _bench_faults():
    spec = importlib.util.spec_from_file_location("bench_faults", ROOT / "bench" / "faults.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ci(line: bytes):
    return msgspec.json.decode(line, type=InspectorLogRecord).ci


def test_the_bench_readers_count_what_the_generated_reader_reads(tmp_path):
    result, truths = simulate(tmp_path, workload="tp-pp-dp", ranks=4, steps=2)
    logs = logs_by_rank(tmp_path)
    records = [r for lines in logs.values() for r in lines]
    ops = [r for r in records if is_op(r)]
    colls = [r for r in ops if is_coll(r)]
    assert len(ops) == sum(len(t.ops) for t in truths) > 50

    summary = ci_logs.read_home(tmp_path)
    assert summary.seals_ok, summary.seal_failures
    assert summary.bad_lines == 0
    assert summary.kinds["coll"] == len(colls)
    assert summary.kinds["p2p"] == len(ops) - len(colls)
    assert sum(sum(c.colls.values()) for c in summary.comms.values()) == len(colls)
    assert sum(c.p2p for c in summary.comms.values()) == len(ops) - len(colls)
    assert {p.global_rank for p in summary.processes.values()} == set(logs)
    assert summary.lost_records == sum(r.ci.lost_count for r in records if isinstance(r.ci, CiGap))

    faults = _bench_faults()
    segments = faults.segments_in(tmp_path / "inspector_logs")
    distinct, duplicated, gaps = faults.count_logged(segments)
    assert (distinct, duplicated) == (len(ops), 0)
    assert faults.ops_lost(len(ops), (distinct, duplicated, gaps)) == 0

    # a dead writer's torn last op line is that op lost, not a crash
    name, data = segments[-1]
    lines = data.splitlines(keepends=True)
    last_op = max(i for i, line in enumerate(lines) if isinstance(_ci(line), OP_KINDS))
    torn = segments[:-1] + [(name, b"".join(lines[:last_op]) + lines[last_op][:40])]
    assert faults.count_logged(torn)[0] == distinct - 1
