"""Files a home holds, written by hand: sealed and open inspector-log segments (by the
Profiler's seal rules), step summaries as the Semantic Engine writes them, and the contract
fixtures (contract-tests/fixtures/json) they are made from."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import msgspec

from comminsight.log_segments import verify_segment
from comminsight_gen.models.hang_report_v1 import HangReport

FIXTURES = Path(__file__).resolve().parents[1] / "contract-tests" / "fixtures" / "json"


def hang_report_fixture(name: str) -> HangReport:
    """A valid hang-report v1 contract fixture, decoded."""
    path = FIXTURES / "hang-report" / "v1" / "valid" / name
    return msgspec.json.decode(path.read_bytes(), type=HangReport)


def write_step_summaries(home: Path) -> None:
    fixture = FIXTURES / "step-summary" / "v1" / "valid" / "ddp-warmup-anomalies.json"
    base = json.loads(fixture.read_text())
    step_dir = home / "semantics" / "step"
    step_dir.mkdir(parents=True)
    lines = [
        json.dumps({**base, "step_index": step, "global_rank": rank})
        for step in range(5)
        for rank in range(4)
    ]
    (step_dir / "steps.jsonl").write_text("\n".join(lines) + "\n")


def _line(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def segment_body(index: int, pid: int, lines: int) -> bytes:
    comm = {
        "comm_id": "fc85c3a0c15c8fe3",
        "comm_name": "default_pg:0",
        "name_source": "nccl",
        "comm_rank": 0,
        "nranks": 2,
        "nnodes": 1,
        "local_rank": 0,
        "pid": pid,
        "host": "vm",
    }
    start = {
        "kind": "segment_start",
        "schema_version": 1,
        "segment_index": index,
        "process": {
            "host": "vm",
            "pid": pid,
            "start_real_ns": 1795985227154207755,
            "profiler_version": "0.1.0",
            "global_rank": 0,
            "local_rank": 0,
            "world_size": 2,
        },
        "clock": {"mono_ns": 5670503892607, "real_ns": 1795985227155572361},
        "communicators": [comm],
        "next_ring_seq": 1,
    }
    body = _line({"ci": start})
    for seq in range(1, lines):
        init = {
            "kind": "comm_init",
            "schema_version": 1,
            "ring_seq": seq,
            "comm": comm,
            "profiler_abi": "v5",
            "init_mono_ns": 5670502999716 + seq,
            "init_real_ns": 1795985227154679609 + seq,
        }
        body += _line({"ci": init})
    return body


def write_segment(home: Path, index: int, *, pid: int = 4242, lines: int = 20, sealed=True):
    """A valid inspector-log segment; sealed ones pass verify_segment, open ones are .partial."""
    logs = home / "inspector_logs"
    logs.mkdir(parents=True, exist_ok=True)
    body = segment_body(index, pid, lines)
    name = f"ci-vm-{pid}-1000-{index:06d}.jsonl"
    if not sealed:
        path = logs / (name + ".partial")
        path.write_bytes(body)
        return path
    seal = {
        "kind": "seal",
        "schema_version": 1,
        "segment_index": index,
        "record_count": lines,
        "byte_count": len(body),
        "crc32": zlib.crc32(body),
        "op_count": 0,
        "ring_record_count": lines - 1,
        "lost_count": 0,
        "first_ring_seq": 1,
        "last_ring_seq": lines - 1,
        "reason": "size",
        "sealed_mono_ns": 5670561117785,
        "sealed_real_ns": 1795985227212797518,
    }
    path = logs / name
    path.write_bytes(body + _line({"ci": seal}))
    verify_segment(path)  # the fixture itself is a real sealed segment
    # Distinct, increasing mtimes: "oldest first" must not depend on the file system's clock.
    os.utime(path, ns=(1_000_000_000 * (index + 1), 1_000_000_000 * (index + 1)))
    return path
