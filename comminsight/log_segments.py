"""Read and verify inspector-log v1 segments (the Profiler's JSON-lines files).

A sealed segment `<name>.jsonl` ends with a seal line giving the number of lines and bytes
before it and their CRC-32; `verify_segment` recomputes both and decodes every line through
the generated msgspec model, so a truncated, edited or half-written file is reported with
the file and line at fault. Open segments (`.jsonl.partial`) have no seal yet.

A sealed segment may be stored compressed: the Profiler's writer replaces `<name>.jsonl` by
`<name>.jsonl.zst` (one zstd frame of the same bytes) once the compressed copy is durable,
so for a moment both exist. `segments_in` lists one path per segment (the uncompressed one
while both exist) and `read_segment` returns a segment's bytes either way, within the same
size bound; a segment listed uncompressed and compressed before it was opened is read from
its `.zst`. Positions in a segment are offsets in its uncompressed bytes, and a segment is
named by its uncompressed name (`segment_name`), whichever file holds it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import msgspec
import zstandard

from comminsight.safe_open import read_regular
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen.config_v1 import KEY_BY_NAME
from comminsight_gen.models.inspector_log_v1 import (
    CiColl,
    CiCollCompact,
    CiCommFinalize,
    CiCommInit,
    CiHangEvidence,
    CiP2p,
    CiP2pCompact,
    CiSeal,
    InspectorLogRecord,
)

_DECODER = msgspec.json.Decoder(InspectorLogRecord)

# a segment is sealed once it reaches the configured size, which it passes by its last
# writes only: a file of twice the largest size allowed is no segment (a sparse file planted
# in a home, say) and is refused rather than read
SEGMENT_BYTES_MAX = 2 * int(KEY_BY_NAME["COMMINSIGHT_PROFILER_LOG_SEGMENT_BYTES"].maximum)


class SegmentError(ValueError):
    """A segment fails verification; the message names the file (and line)."""


@dataclass(frozen=True)
class Segment:
    path: Path
    records: list[InspectorLogRecord]  # every line before the seal
    seal: CiSeal | None  # None for an open (.partial) segment


def ring_seq_of(ci) -> int | None:
    """The ring seq of the record a line's `ci` carries (its form's key: `q` in the compact
    op lines); None for the lines that carry no ring record."""
    if isinstance(ci, CiCollCompact | CiP2pCompact):
        return ci.q
    if isinstance(ci, CiColl | CiP2p | CiCommInit | CiCommFinalize | CiHangEvidence):
        return ci.ring_seq
    return None


def decode_lines(path: Path, data: bytes) -> list[InspectorLogRecord]:
    records = []
    for lineno, line in enumerate(data.splitlines(), 1):
        try:
            records.append(_DECODER.decode(line))
        except msgspec.ValidationError as e:
            raise SegmentError(f"{path}:{lineno}: {e}") from None
        except NOT_JSON as e:
            raise SegmentError(f"{path}:{lineno}: not JSON: {e}") from None
    return records


COMPRESSED_SUFFIX = ".zst"
SEALED_SUFFIXES = (".jsonl", ".jsonl" + COMPRESSED_SUFFIX)


def is_compressed(path: str | Path) -> bool:
    return str(path).endswith(COMPRESSED_SUFFIX)


def segment_name(path: str | Path) -> str:
    """The segment's name as the Profiler wrote it (`.jsonl` or `.jsonl.partial`), whichever
    file holds it now."""
    return Path(path).name.removesuffix(COMPRESSED_SUFFIX)


def read_segment(path: str | Path, max_bytes: int = SEGMENT_BYTES_MAX) -> bytes:
    """A segment's bytes, decompressed when it is stored compressed. A sealed `.jsonl` that
    is gone is looked for as `.jsonl.zst` (compressed since it was listed). A compressed file
    that is not one whole zstd frame, or that would decompress past max_bytes, is a
    SegmentError naming it."""
    path = Path(path)
    if not is_compressed(path):
        try:
            return read_regular(path, max_bytes)
        except FileNotFoundError:
            if not path.name.endswith(".jsonl"):
                raise
            compressed = path.with_name(path.name + COMPRESSED_SUFFIX)
            if not compressed.exists():
                raise
            path = compressed
    return _decompressed(path, max_bytes)


def _decompressed(path: Path, max_bytes: int) -> bytes:
    # compressed, a segment is smaller than it is whole: the same bound holds for the file
    data = read_regular(path, max_bytes)
    return decompress_segment(data, path, max_bytes)


def decompressed_bound(compressed_bytes: int, max_bytes: int = SEGMENT_BYTES_MAX) -> int:
    """The most a compressed segment of this size may decompress to: what a segment may hold,
    and no more than MAX_RATIO times its size (inspector-log lines compress 15-40 times; a
    frame of repeated bytes planted in a home, thousands of times: refused, not held)."""
    return min(max_bytes, max(compressed_bytes, 4096) * MAX_RATIO)


MAX_RATIO = 1000


def decompress_segment(data: bytes, where, max_bytes: int = SEGMENT_BYTES_MAX) -> bytes:
    """A compressed segment's bytes: one whole zstd frame, nothing after it, at most
    decompressed_bound once decompressed (a SegmentError naming `where` otherwise). The
    Profiler's frames give their size; the archive's (compressed as a stream) do not, and are
    decompressed a little at a time up to the bound."""
    max_bytes = decompressed_bound(len(data), max_bytes)
    try:
        size = zstandard.frame_content_size(data)
        if size > max_bytes:
            raise SegmentError(
                f"{where}: its zstd frame gives {size} bytes, more than the {max_bytes} a "
                "segment may hold"
            )
        if size < 0:
            return _decompressed_unsized(data, where, max_bytes)
        # in one call, straight into a buffer of the frame's size (a fifth faster than a
        # decompression object, which copies its output); only a frame with bytes after it
        # is read again, to say how many
        try:
            out = zstandard.ZstdDecompressor().decompress(
                data, max_output_size=size, allow_extra_data=False
            )
        except zstandard.ZstdError as e:
            if "unused data" not in str(e):
                raise
        else:
            if len(out) == size:
                return out
        frame = zstandard.ZstdDecompressor().decompressobj()
        out = frame.decompress(data)
    except zstandard.ZstdError as e:
        raise SegmentError(f"{where}: not a complete zstd-compressed segment: {e}") from None
    if not frame.eof or len(out) != size:
        raise SegmentError(f"{where}: not a complete zstd-compressed segment: it is cut short")
    if frame.unused_data:
        raise SegmentError(f"{where}: {len(frame.unused_data)} bytes follow its zstd frame")
    return out


_UNSIZED_STEP = 1024  # at most ~32 MiB decompressed by one step, however crafted


def _decompressed_unsized(data: bytes, where, max_bytes: int) -> bytes:
    # fed a little at a time, so that no step decompresses far past the bound (a frame of a
    # few bytes may stand for gigabytes)
    frame = zstandard.ZstdDecompressor().decompressobj()
    view = memoryview(data)
    chunks, total, fed = [], 0, 0
    while fed < len(data) and not frame.eof:
        chunk = frame.decompress(view[fed : fed + _UNSIZED_STEP])
        fed = min(len(data), fed + _UNSIZED_STEP)
        total += len(chunk)
        if total > max_bytes:
            raise SegmentError(f"{where}: decompresses past the {max_bytes} bytes allowed")
        chunks.append(chunk)
    if not frame.eof:
        raise SegmentError(f"{where}: not a complete zstd-compressed segment: it is cut short")
    rest = len(frame.unused_data) + len(data) - fed
    if rest:
        raise SegmentError(f"{where}: {rest} bytes follow its zstd frame")
    return b"".join(chunks)


def verify_segment(path: str | Path) -> Segment:
    path = Path(path)
    data = read_segment(path)
    if path.name.endswith(".partial"):
        return Segment(path, decode_lines(path, data), None)
    body, _, last = data.rstrip(b"\n").rpartition(b"\n")
    body = body + b"\n" if body else b""
    records = decode_lines(path, data)
    seal = records.pop().ci if records else None
    if not isinstance(seal, CiSeal):
        raise SegmentError(f"{path}: the last line is not a seal: the segment is truncated")
    if seal.byte_count != len(body):
        raise SegmentError(
            f"{path}: seal says {seal.byte_count} bytes before it, found {len(body)}"
        )
    if seal.record_count != len(records):
        raise SegmentError(f"{path}: seal says {seal.record_count} lines, found {len(records)}")
    crc = zlib.crc32(body)
    if seal.crc32 != crc:
        raise SegmentError(f"{path}: seal CRC-32 {seal.crc32} does not match the content ({crc})")
    return Segment(path, records, seal)


def segments_in(directory: str | Path, include_open: bool = False) -> list[Path]:
    """The sealed segments of `directory` in name order, one path each (see the module
    docstring), then with include_open the open ones."""
    directory = Path(directory)
    paths = sealed_paths(directory.glob("*.jsonl*"))
    if include_open:
        paths += sorted(directory.glob("*.jsonl.partial"))
    return paths


def sealed_paths(paths) -> list[Path]:
    """Of `paths`, the sealed segments (`.jsonl`, `.jsonl.zst`) in the order of their
    segment names, one path per segment: the uncompressed one when both are there."""
    chosen: dict[str, Path] = {}
    for path in paths:
        path = Path(path)
        if not path.name.endswith(SEALED_SUFFIXES):
            continue
        name = segment_name(path)
        if name not in chosen or not is_compressed(path):
            chosen[name] = path
    return [chosen[name] for name in sorted(chosen)]
