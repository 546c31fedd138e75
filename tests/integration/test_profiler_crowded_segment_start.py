"""A process with more live communicators than one segment_start line can list within the
writer's buffer (a comm table of up to 65536): the line lists those that fit and counts the
rest (communicators_omitted), and stays one valid line. Before, the list ran past the buffer's
end and the line was cut: invalid JSON, the segment's process identity lost to every reader,
and the next line glued onto it."""

from __future__ import annotations

import json

import msgspec
import pytest
from log_files import segment_data
from profiler_builds import run_scenario

from comminsight_gen.models.inspector_log_v1 import InspectorLogRecord

COMMS = 3000  # ~450 bytes each as listed: past the 1 MiB buffer
BUFFER_BYTES = 1 << 20


@pytest.mark.parametrize("build", ["plain", "asan"])
def test_a_segment_start_lists_what_fits_and_counts_the_rest(build, tmp_path):
    run_scenario(
        "crowded_segment_start",
        build,
        tmp_path,
        SCENARIO_COMMS=str(COMMS),
        COMMINSIGHT_PROFILER_COMM_SLOTS="4096",
        COMMINSIGHT_PROFILER_RING_SLOTS="16384",
        COMMINSIGHT_PROFILER_LOG_SEGMENT_S="1",
    )
    starts = []
    comm_inits = 0
    for path, data in segment_data(tmp_path / "inspector_logs"):
        for number, raw in enumerate(data.splitlines(), 1):
            assert len(raw) < BUFFER_BYTES, (path.name, number)
            line = json.loads(raw)  # every line whole
            msgspec.json.decode(raw, type=InspectorLogRecord)  # and the schema's
            kind = line.get("ci", {}).get("kind")
            comm_inits += kind == "comm_init"
            if kind == "segment_start":
                starts.append(line["ci"])
    assert comm_inits == COMMS
    crowded = [s for s in starts if s.get("communicators_omitted")]
    assert crowded, [len(s["communicators"]) for s in starts]
    # a segment opened while the communicators were still being made (a slow, loaded
    # machine ages the first one out during the inits) counts those live then; the one the
    # collectives open, after every init, counts them all
    totals = [len(s["communicators"]) + s["communicators_omitted"] for s in crowded]
    assert max(totals) == COMMS and all(t <= COMMS for t in totals), totals
    for start in crowded:
        listed = start["communicators"]
        assert len(listed) > COMMS // 2  # the bound is the buffer's, not a small number
        assert {c["comm_name"] for c in listed} == {'"' * 126}
        assert start["process"]["pid"] > 0
    for start in starts:  # a list that fits has no count
        if len(start["communicators"]) < COMMS // 2:
            assert "communicators_omitted" not in start
