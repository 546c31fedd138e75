"""Every inspector_logs segment of a directory with its bytes, whichever form it is stored in
(sealed, sealed and compressed, or open): what tests that grep the Profiler's lines read."""

from __future__ import annotations

from pathlib import Path

from comminsight.log_segments import read_segment, segments_in


def segment_data(logs: Path) -> list[tuple[Path, bytes]]:
    """(path, uncompressed bytes) of each segment in `logs`: sealed ones in name order, then
    open ones."""
    if not logs.is_dir():
        return []
    return [(path, read_segment(path)) for path in segments_in(logs, include_open=True)]


def segment_lines(logs: Path) -> list[bytes]:
    return [line for _, data in segment_data(logs) for line in data.splitlines()]
