"""What a compressed segment must be to be read (log_segments.read_segment): one whole zstd
frame, nothing after it, no bigger than the bound once decompressed; with its size in the
frame (the Profiler's) or without (the archive compresses as a stream)."""

from __future__ import annotations

import io

import pytest
import zstandard

from comminsight.log_segments import SegmentError, read_segment

DATA = b"".join(b'{"ci":{"kind":"gap","n":%d}}\n' % i for i in range(20_000))


def sized(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=1, write_checksum=True).compress(data)


def streamed(data: bytes) -> bytes:
    out = io.BytesIO()
    zstandard.ZstdCompressor(level=3, write_checksum=True).copy_stream(io.BytesIO(data), out)
    return out.getvalue()


@pytest.mark.parametrize("frame", [sized, streamed], ids=["sized", "streamed"])
def test_a_whole_frame_reads_back_the_segment(frame, tmp_path):
    path = tmp_path / "s-000000.jsonl.zst"
    path.write_bytes(frame(DATA))
    assert read_segment(path) == DATA


@pytest.mark.parametrize("frame", [sized, streamed], ids=["sized", "streamed"])
@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda z: z[:-40], "cut short|not a complete"),
        (lambda z: z + b"x" * 5000, "5000 bytes follow its zstd frame"),
        (lambda z: z[:9] + bytes([z[9] ^ 0xFF]) + z[10:], "not a complete|more than the"),
    ],
    ids=["cut", "trailing", "flipped"],
)
def test_a_damaged_frame_is_refused_naming_the_file(frame, damage, said, tmp_path):
    path = tmp_path / "s-000000.jsonl.zst"
    path.write_bytes(damage(frame(DATA)))
    with pytest.raises(SegmentError, match=said) as e:
        read_segment(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("frame", [sized, streamed], ids=["sized", "streamed"])
def test_a_frame_past_the_bound_is_refused_before_it_is_decompressed_whole(frame, tmp_path):
    path = tmp_path / "s-000000.jsonl.zst"
    path.write_bytes(frame(b"\0" * (64 << 20)))  # 64 MiB of zeros: a few KiB compressed
    with pytest.raises(SegmentError, match="more than the|past the"):
        read_segment(path, max_bytes=1 << 20)


@pytest.mark.parametrize("frame", [sized, streamed], ids=["sized", "streamed"])
def test_a_frame_that_compresses_past_what_log_lines_do_is_refused(frame, tmp_path):
    """64 MiB of one byte is a few KiB compressed: within what a segment may hold, far past
    what inspector-log lines compress to (MAX_RATIO)."""
    path = tmp_path / "s-000000.jsonl.zst"
    path.write_bytes(frame(b"\0" * (64 << 20)))
    with pytest.raises(SegmentError, match="more than the|past the"):
        read_segment(path)
