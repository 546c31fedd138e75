"""A simulated job's inspector_logs rewritten as NVIDIA Inspector would have written them: one
file per process, op lines without CommInsight's `ci`, dumped in batches."""

from __future__ import annotations

import json

from log_files import segment_data

DUMP_INTERVAL_US = 100_000


def as_nvidia(src_dir, dst_dir, lines_per_dump: int) -> None:
    """One NVIDIA-style file per process, its op lines in the order they were written, a
    dump every `lines_per_dump` lines, DUMP_INTERVAL_US after the one before, a microsecond
    a line: from CommInsight logs in the Inspector form (COMMINSIGHT_PROFILER_LOG_FORMAT=
    inspector), whose op lines are NVIDIA's objects with CommInsight's beside them."""
    dst_dir.mkdir()
    by_process: dict[tuple, list[str]] = {}
    for _, data in segment_data(src_dir):
        for line in data.decode().splitlines():
            record = json.loads(line)
            if "header" not in record:
                continue
            record.pop("ci")
            perf = record.get("coll_perf")
            if perf is not None and perf["coll"] == "AlltoAll":
                perf["coll"] = "All2All"
            if perf is not None and perf["coll_busbw_gbs"] == 0:
                perf["coll_busbw_gbs"] = "nan"  # as NVIDIA's writer does for 0/0
            if record["header"]["comm_name"] is None:
                record["header"]["comm_name"] = "unknown"
            meta = record["metadata"]
            lines = by_process.setdefault((meta["hostname"], meta["pid"]), [])
            lines.append(json.dumps(_dumped(record, len(lines), lines_per_dump)))
    assert by_process, f"no op line in the Inspector form under {src_dir}"
    for (host, pid), lines in by_process.items():
        (dst_dir / f"nccl-inspector-{host}-pid{pid}.log").write_text("\n".join(lines) + "\n")


def _dumped(record: dict, line: int, lines_per_dump: int) -> dict:
    dump, in_dump = divmod(line, lines_per_dump)
    record["metadata"]["dump_timestamp_us"] = (
        1_700_000_000_000_000 + dump * DUMP_INTERVAL_US + in_dump
    )
    return record
