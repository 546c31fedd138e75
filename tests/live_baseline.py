"""The live Step summaries an uninterrupted Agent writes over a job's records, to compare a
run with restarts against (tests/e2e/test_semantic_live_restarts.py,
bench/live_restart_attack.py)."""

from __future__ import annotations

import json
from pathlib import Path

from comminsight.agent.receivers.inject_names import InjectNames
from comminsight.agent.steps.engine_hook import GpuStream
from comminsight.agent.steps.log_records import op_slots, process_segments
from comminsight.agent.steps.semantic_hook import SemanticEngineHook
from comminsight.semantic.templates import load_templates


def comparable(line: bytes) -> dict:
    """A summary without what says how sure the cut that placed it was: that names how far
    each rank's ops had come when the cut ran, which differs between two uninterrupted runs."""
    summary = json.loads(line)
    summary["recovery"].pop("confidence")
    summary["recovery"].pop("reasons", None)
    return summary


def uninterrupted(home: Path, files: list[Path], out: Path) -> dict[str, list[bytes]]:
    """What the live engine writes over the same records when it never stops: every rank's
    records from its logs, fed a chunk at a time, rank after rank, with the optimizer-step
    markers Inject wrote in the home (as a live Agent reads them)."""
    inject = InjectNames(home)
    inject.refresh()
    hook = SemanticEngineHook(
        out,
        load_templates(),
        checkpoint_s=3600,
        markers_of=lambda gpu: inject.step_markers(gpu.host, gpu.pid, gpu.uid),
    )
    feeds = {}
    for path in files:
        first = json.loads(path.read_bytes().splitlines()[0])
        start_real = int(path.name.removesuffix(".jsonl").rsplit("-", 1)[1])
        segments = process_segments(home / "inspector_logs", first["pid"], start_real)
        assert segments is not None, path
        gpu = GpuStream(
            first["host"],
            first["pid"],
            start_real,
            first["global_rank"],
            first.get("cuda_device"),
            start_mono_ns=segments.start_mono_ns,
            local_rank=first.get("local_rank"),
            job_id=first.get("job_id"),
            host=first["host"],
        )
        feeds[gpu] = [
            (slots[i : i + 500], comms)
            for slots, comms in op_slots(segments, 0)
            for i in range(0, len(slots), 500)
        ]
    try:
        while any(feeds.values()):
            for gpu, chunks in feeds.items():
                if chunks:
                    hook._take(gpu, "ops", chunks.pop(0))
        for gpu in feeds:
            hook._take(gpu, "finished", None)
    finally:
        hook.stop()
    return {p.name: (out / "semantics" / "step" / p.name).read_bytes().splitlines() for p in files}
