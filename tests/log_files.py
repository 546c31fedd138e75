"""Every inspector_logs segment of a directory with its bytes, whichever form it is stored in
(sealed, sealed and compressed, or open): what tests that grep the Profiler's lines read."""

from __future__ import annotations

from pathlib import Path

import zstandard

from comminsight.log_segments import read_segment, segment_name, segments_in


def segment_data(logs: Path) -> list[tuple[Path, bytes]]:
    """(path, uncompressed bytes) of each segment in `logs`: sealed ones in name order, then
    open ones."""
    if not logs.is_dir():
        return []
    return [(path, read_segment(path)) for path in segments_in(logs, include_open=True)]


def segment_lines(logs: Path) -> list[bytes]:
    return [line for _, data in segment_data(logs) for line in data.splitlines()]


def decompress_all(logs: Path) -> None:
    """Every compressed segment of `logs` back to its uncompressed `.jsonl` (tests that damage
    segments byte by byte work on the form the writer first seals)."""
    for path in sorted(logs.glob("*.jsonl.zst")):
        path.with_name(segment_name(path)).write_bytes(read_segment(path))
        path.unlink()


def compress(path: Path, keep: bool = False) -> Path:
    """A sealed segment compressed as the Profiler compresses it (`<name>.jsonl.zst`, one
    frame with its content size and checksum); the `.jsonl` removed unless kept."""
    data = path.read_bytes()
    packed = path.with_name(path.name + ".zst")
    packed.write_bytes(zstandard.ZstdCompressor(write_checksum=True).compress(data))
    assert zstandard.frame_content_size(packed.read_bytes()) == len(data)
    if not keep:
        path.unlink()
    return packed
