"""Read and verify inspector-log v1 segments (the Profiler's JSON-lines files).

A sealed segment `<name>.jsonl` ends with a seal line giving the number of lines and bytes
before it and their CRC-32; `verify_segment` recomputes both and decodes every line through
the generated msgspec model, so a truncated, edited or half-written file is reported with
the file and line at fault. Open segments (`.jsonl.partial`) have no seal yet.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import msgspec

from comminsight.safe_open import read_regular
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen.config_v1 import KEY_BY_NAME
from comminsight_gen.models.inspector_log_v1 import CiSeal, InspectorLogRecord

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


def verify_segment(path: str | Path) -> Segment:
    path = Path(path)
    data = read_regular(path, SEGMENT_BYTES_MAX)
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
    directory = Path(directory)
    paths = sorted(directory.glob("*.jsonl"))
    if include_open:
        paths += sorted(directory.glob("*.jsonl.partial"))
    return paths
