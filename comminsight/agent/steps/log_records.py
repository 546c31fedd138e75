"""A process's op records read back from its inspector_logs, as the SHM ring held them.

A process that ends while no Agent runs takes its SHM region with it (its Profiler removes
the region at a clean exit when no Agent is there to read it), and with the region the ring
records after the live engine's checkpoint. Its log segments hold every one of them: the
writer drains the same ring, and each op line (in either form, compact or Inspector) carries
every field of its slot that the engine reads (ring seq, function, communicator, ranks,
sequence numbers, sizes, datatype, host and GPU clocks, timing source, group, user tag). Turned back
into op_slot records they go through the same path as the ring's (shm_input.engine_batch), so
the Steps recovered from them are the ones, byte for byte, that the ring would have given.

Segments are `ci-<host>-<pid>-<start_mono_ns>-<index:06d>.jsonl[.partial]`, a sealed one
possibly stored compressed as `.jsonl.zst` (log_segments); one file is read per index: the
sealed `.jsonl`, else its `.jsonl.zst`, else the open `.partial`. A file listed that is gone
when opened was sealed or compressed meanwhile: its later form is read. A process is told
apart from another of the same pid by its segment_start's start_real_ns. A line that does
not decode (the cut last line of an unsealed segment) is skipped; a ring seq met twice is
taken once; a segment that cannot be read (a compressed one that is no whole zstd frame) is
named in a warning and the others are read.

The same records fill the gap a running process's ring leaves when it overwrote records after
the checkpoint while no Agent ran: the writer read them before the ring lapped (or wrote a gap
line where it did not), so its logs account for every ring seq up to `covered_through`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import msgspec
import numpy as np
import zstandard
from msgspec import UnsetType

from comminsight.line_reader import complete_lines
from comminsight.log_segments import (
    COMPRESSED_SUFFIX,
    SEGMENT_BYTES_MAX,
    SegmentError,
    is_compressed,
    read_segment,
    ring_seq_of,
)
from comminsight.safe_open import open_regular
from comminsight.semantic.shm_input import CommInfo
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen.abi import shm_v1
from comminsight_gen.models.inspector_log_v1 import (
    CiColl,
    CiCollCompact,
    CiCommFinalize,
    CiCommInit,
    CiGap,
    CiHangEvidence,
    CiP2p,
    CiP2pCompact,
    CiSeal,
    CiSegmentStart,
    InspectorLogRecord,
)

log = logging.getLogger(__name__)

LINE_BYTES_MAX = 1 << 20  # a Profiler line is about 1 KiB
CHUNK_RECORDS = 4096  # handed on this many at a time: the memory held is bounded by it
TAIL_BYTES = 256 << 10  # where a segment's last lines are looked for (many lines of ~1 KiB)
_DECODER = msgspec.json.Decoder(InspectorLogRecord)
_U64 = (1 << 64) - 1
_ROOTED = frozenset(
    {shm_v1.Func.BROADCAST, shm_v1.Func.REDUCE, shm_v1.Func.GATHER, shm_v1.Func.SCATTER}
)


@dataclass(frozen=True)
class ProcessSegments:
    """One process's segments, in index order, and its clock pair."""

    start_mono_ns: int
    paths: list[Path]


def process_segments(logs: Path, pid: int, start_real_ns: int) -> ProcessSegments | None:
    """The segments of the process `pid` that started at `start_real_ns`; None if none."""
    pattern = re.compile(rf"ci-.+-{pid}-(\d+)-(\d{{1,9}})\.jsonl(\.partial|\.zst)?$")
    try:
        names = os.listdir(logs)
    except OSError:
        return None
    by_start: dict[int, dict[int, Path]] = {}
    for name in names:
        m = pattern.match(name)
        if m:
            by_index = by_start.setdefault(int(m.group(1)), {})
            keep_segment(by_index, int(m.group(2)), logs / name)
    for start_mono, by_index in sorted(by_start.items()):
        paths = [p for _, p in sorted(by_index.items())]
        if _started_at(paths[0]) == start_real_ns:
            return ProcessSegments(start_mono, paths)
    return None


def _form_rank(path: Path) -> int:
    """Which of a segment's files is read: the sealed `.jsonl` (0), its compressed copy (1),
    the open `.partial` (2), the first there."""
    name = path.name
    return 2 if name.endswith(".partial") else 1 if is_compressed(name) else 0


def keep_segment(by_index: dict[int, Path], index: int, path: Path) -> None:
    """Keep `path` as the file of segment `index` unless a better form of it is kept."""
    kept = by_index.get(index)
    if kept is None or _form_rank(path) < _form_rank(kept):
        by_index[index] = path


def segment_forms(path: Path) -> list[Path]:
    """Where a segment listed as `path` is, in the order it moves on: an open `.partial` is
    sealed (renamed `.jsonl`), and a sealed `.jsonl` compressed (`.jsonl.zst`)."""
    name = path.name
    if name.endswith(".jsonl.partial"):
        sealed = path.with_name(name.removesuffix(".partial"))
        return [path, sealed, sealed.with_name(sealed.name + COMPRESSED_SUFFIX)]
    if name.endswith(".jsonl"):
        return [path, path.with_name(name + COMPRESSED_SUFFIX)]
    return [path]


def _started_at(path: Path) -> int | None:
    """The start_real_ns the segment's first line gives its process."""
    start = segment_start(path)
    return start.process.start_real_ns if start is not None else None


def segment_start(path: Path) -> CiSegmentStart | None:
    """The segment's first line, its segment_start; None where it is not one (or the
    segment cannot be read)."""
    try:
        ci = _DECODER.decode(_first_line(path)).ci
    except (OSError, zstandard.ZstdError, *NOT_JSON):
        return None
    return ci if isinstance(ci, CiSegmentStart) else None


def _first_line(path: Path) -> bytes:
    """The first line of a segment (at most LINE_BYTES_MAX bytes of it): of a compressed one,
    only as much of it is decompressed."""
    candidate, f = _open_form(path)
    with f:
        if not is_compressed(candidate):
            return f.readline(LINE_BYTES_MAX)
        reader = zstandard.ZstdDecompressor().stream_reader(f, read_size=1 << 16)
        head = b""
        while b"\n" not in head and len(head) < LINE_BYTES_MAX:
            chunk = reader.read(min(1 << 16, LINE_BYTES_MAX - len(head)))
            if not chunk:
                break
            head += chunk
        return head.split(b"\n", 1)[0]


def _open_form(path: Path) -> tuple[Path, BinaryIO]:
    """The file that holds the segment listed as `path` now (see segment_forms), opened
    (open_regular); FileNotFoundError where none does."""
    forms = segment_forms(path)
    for candidate in forms[:-1]:
        try:
            return candidate, open_regular(candidate, SEGMENT_BYTES_MAX)
        except FileNotFoundError:
            continue  # sealed or compressed since it was listed
    return forms[-1], open_regular(forms[-1], SEGMENT_BYTES_MAX)


def op_slots(
    segments: ProcessSegments,
    from_ring_seq: int,
    to_ring_seq: int | None = None,
    not_ops: list[int] | None = None,
) -> Iterator[tuple[np.ndarray, dict[int, CommInfo]]]:
    """The process's Coll/P2P records of ring seq `from_ring_seq` on (up to `to_ring_seq`,
    not included), in ring order, as op_slot records (in chunks), with what the lines say of
    their communicators. `not_ops` gathers the ring seqs in range of the lines that are ring
    records but no op (communicator init and finalize, hang evidence): they are not lost."""
    starts = [segment_start(p) for p in segments.paths]
    last = 0  # the highest ring seq handed on: a seq met again is not
    end = to_ring_seq if to_ring_seq is not None else 1 << 64
    for k, path in enumerate(segments.paths):
        if starts[k] is not None and starts[k].next_ring_seq >= end:
            return  # this segment and every later one come after
        later = next((s for s in starts[k + 1 :] if s is not None), None)
        if later is not None and later.next_ring_seq <= from_ring_seq:
            continue  # every record of this segment comes before
        rows: list[tuple] = []
        comms: dict[int, CommInfo] = {}
        for seq, row, comm in _rows(path):
            if seq < from_ring_seq or seq <= last:
                continue
            if seq >= end:
                break
            last = seq
            if row is None:
                if not_ops is not None:
                    not_ops.append(seq)
                continue
            rows.append(row)
            comms[comm[0]] = comm[1]
            if len(rows) >= CHUNK_RECORDS:
                yield _records(rows), comms
                rows, comms = [], {}
        if rows:
            yield _records(rows), comms


class LogReader:
    """A process's op records from op_slots, handed on by the time they completed: `until`
    gives those completed before a time (the ring's order: up to the first that did not)."""

    def __init__(self, chunks: Iterator[tuple[np.ndarray, dict[int, CommInfo]]]) -> None:
        self._chunks = chunks
        self._chunk: tuple[np.ndarray, dict[int, CommInfo]] | None = None
        self._at = 0
        self.read = 0  # records handed on

    def next_complete(self) -> int | None:
        """When its next record completed (CLOCK_MONOTONIC ns); None once all are read."""
        while self._chunk is None or self._at >= len(self._chunk[0]):
            self._chunk, self._at = next(self._chunks, None), 0
            if self._chunk is None:
                self._chunks = iter(())
                return None
        return int(self._chunk[0]["complete_mono_ns"][self._at])

    def until(self, until_ns: int) -> Iterator[tuple[np.ndarray, dict[int, CommInfo]]]:
        """Its next records, in order, up to the first that completed at until_ns or later."""
        while (t := self.next_complete()) is not None and t < until_ns:
            slots, comms = self._chunk
            later = np.flatnonzero(slots["complete_mono_ns"][self._at :] >= until_ns)
            end = self._at + int(later[0]) if len(later) else len(slots)
            piece = slots[self._at : end]
            self._at = end
            self.read += len(piece)
            yield piece, comms


def covered_through(segments: ProcessSegments) -> int:
    """The highest ring seq the process's logs account for so far (by an op line, another
    ring record's line or a gap line): lines follow ring order without holes, so the newest
    segment's last complete line tells it. 0 where none does yet."""
    for path in reversed(segments.paths):
        seq = _last_covered(path)
        if seq is not None:
            return seq
    return 0


def _last_covered(path: Path) -> int | None:
    try:
        data, start = _tail(path)
    except (OSError, SegmentError):
        return None  # (a segment that cannot be read is named where its lines are read)
    lines = data.split(b"\n")[:-1]  # what follows the last newline is still being written
    if start:
        lines = lines[1:]  # the tail began inside this one
    for line in reversed(lines):
        try:
            seq = _covers(_DECODER.decode(line).ci)
        except NOT_JSON:
            continue
        if seq is not None:
            return seq
    return None


def _tail(path: Path) -> tuple[bytes, int]:
    """The last TAIL_BYTES of a segment and where they start in it (a compressed segment is
    decompressed whole: a zstd frame is read from its start)."""
    candidate, f = _open_form(path)
    with f:
        if not is_compressed(candidate):
            size = os.fstat(f.fileno()).st_size
            start = max(0, size - TAIL_BYTES)
            return os.pread(f.fileno(), size - start, start), start
    data = read_segment(candidate)
    start = max(0, len(data) - TAIL_BYTES)
    return data[start:], start


def _covers(ci) -> int | None:
    """The highest ring seq a line accounts for, if any."""
    if (seq := ring_seq_of(ci)) is not None:
        return seq
    if isinstance(ci, CiGap):
        return ci.last_lost_ring_seq
    if isinstance(ci, CiSeal):
        return _opt(ci.last_ring_seq, None)
    if isinstance(ci, CiSegmentStart):
        return ci.next_ring_seq - 1 if ci.next_ring_seq > 0 else None
    return None


_FIELDS = (
    "seq",
    "kind",
    "func",
    "timing_source",
    "comm_id",
    "rank",
    "peer",
    "op_seq",
    "count",
    "bytes",
    "nranks",
    "host_start_mono_ns",
    "host_stop_mono_ns",
    "complete_mono_ns",
    "gpu_start_ticks",
    "gpu_end_ticks",
    "group_id",
    "comm_op_index",
    "datatype",
    "user_tag",
)


def _records(rows: list[tuple]) -> np.ndarray:
    out = np.zeros(len(rows), shm_v1.OP_SLOT_DTYPE)
    columns = list(zip(*[r[:-1] for r in rows], strict=True))
    for name, values in zip(_FIELDS, columns, strict=True):
        out[name] = values
    for i, r in enumerate(rows):
        if r[-1]:
            out["raw_name"][i] = r[-1]
    return out


def _rows(path: Path) -> Iterator[tuple[int, tuple | None, tuple[int, CommInfo] | None]]:
    """(ring seq, op_slot row, communicator) of each line that is a ring record; row and
    communicator None for one that is no op."""
    try:
        lines = _lines(path)
    except SegmentError as e:  # the message names the file
        log.warning("semantic engine: a segment cannot be read back: %s", e)
        return
    except OSError as e:
        log.warning("semantic engine: %s cannot be read back (%s)", path, e)
        return
    for data in lines:
        if not data:
            continue
        try:
            record = _DECODER.decode(data)
        except NOT_JSON:
            continue  # a line cut by a writer that died, or no line of ours
        row = _row(record)
        if row is not None:
            yield row[0][0], *row
        elif isinstance(record.ci, (CiCommInit, CiCommFinalize, CiHangEvidence)):
            yield record.ci.ring_seq, None, None


def _lines(path: Path) -> Iterator[bytes | None]:
    """The complete lines of a segment (None for one longer than LINE_BYTES_MAX), from the
    file that holds it now; opened (and a compressed one decompressed, SegmentError where it
    is no whole zstd frame) before this returns."""
    candidate, f = _open_form(path)
    if not is_compressed(candidate):
        return _file_lines(f)
    f.close()
    return _lines_of(read_segment(candidate))


def _file_lines(f) -> Iterator[bytes | None]:
    with f:
        size = os.fstat(f.fileno()).st_size
        for line in complete_lines(f.fileno(), 0, size, LINE_BYTES_MAX):
            yield line.data


def _lines_of(data: bytes) -> Iterator[bytes | None]:
    at = 0
    while (end := data.find(b"\n", at)) >= 0:
        yield data[at:end] if end - at <= LINE_BYTES_MAX else None
        at = end + 1


def _row(r: InspectorLogRecord) -> tuple[tuple, tuple[int, CommInfo]] | None:
    ci, h = r.ci, r.header
    if isinstance(ci, (CiCollCompact, CiP2pCompact)):
        return _compact_row(ci)
    if isinstance(ci, CiColl) and r.coll_perf is not None:
        perf = r.coll_perf
        kind, name, op_seq, size = shm_v1.RecordKind.COLL, perf.coll, perf.coll_sn, None
        size, timing = perf.coll_msg_size_bytes, perf.coll_timing_source
    elif isinstance(ci, CiP2p) and r.p2p_perf is not None:
        perf = r.p2p_perf
        kind, name, op_seq = shm_v1.RecordKind.P2P, perf.p2p, perf.p2p_sn
        size, timing = perf.p2p_msg_size_bytes, perf.p2p_timing_source
    else:
        return None
    if h is None or isinstance(h, UnsetType):
        return None
    try:
        comm_id = int(h.id, 16) & 0xFFFFFFFFFFFFFFFF
    except (TypeError, ValueError):
        return None
    func = shm_v1.FUNC_BY_LABEL.get(name, shm_v1.Func.UNKNOWN)
    raw_name = name.encode()[:31] if func == shm_v1.Func.UNKNOWN else b""
    if kind == shm_v1.RecordKind.P2P:
        peer = perf.p2p_peer
    else:
        peer = _opt(ci.root, shm_v1.NO_RANK) if func in _ROOTED else shm_v1.NO_RANK
    row = (
        ci.ring_seq,
        kind,
        func,
        shm_v1.TIMING_SOURCE_BY_LABEL.get(timing, shm_v1.TimingSource.NONE),
        comm_id,
        h.rank,
        peer,
        op_seq,
        _opt(ci.count, 0),
        size,
        h.n_ranks,
        _opt(ci.host_start_mono_ns, 0),
        _opt(ci.host_stop_mono_ns, 0),
        _opt(ci.host_complete_mono_ns, 0),
        _opt(ci.gpu_start_globaltimer_ns, 0),
        _opt(ci.gpu_stop_globaltimer_ns, 0),
        _opt(ci.group_id, 0),
        _opt(ci.op_index, 0),
        _datatype(ci.datatype),
        _opt(ci.user_tag, 0),
        raw_name,
    )
    comm = CommInfo(_opt(h.comm_name, None) or None, _opt(h.nnodes, None) or None)
    return row, (comm_id, comm)


def _compact_row(ci: CiCollCompact | CiP2pCompact) -> tuple[tuple, tuple[int, CommInfo]]:
    """A compact op line's slot: its host times put back from their offsets (the writer took
    them modulo 2^64, so they are put back the same way)."""
    coll = isinstance(ci, CiCollCompact)
    func = shm_v1.FUNC_BY_LABEL.get(ci.f, shm_v1.Func.UNKNOWN)
    raw_name = ci.f.encode()[:31] if func == shm_v1.Func.UNKNOWN else b""
    if coll:
        peer = _opt(ci.rt, shm_v1.NO_RANK) if func in _ROOTED else shm_v1.NO_RANK
    else:
        peer = _opt(ci.pe, shm_v1.NO_RANK)
    start = ci.h
    g0 = _opt(ci.g0, 0)
    gpu = not isinstance(ci.g0, UnsetType) and not isinstance(ci.gd, UnsetType)
    row = (
        ci.q,
        shm_v1.RecordKind.COLL if coll else shm_v1.RecordKind.P2P,
        func,
        shm_v1.TIMING_SOURCE_BY_LABEL.get(ci.ts.value, shm_v1.TimingSource.NONE),
        int(ci.c, 16),
        ci.r,
        peer,
        ci.s,
        ci.e,
        ci.b,
        ci.n,
        start,
        (start + ci.hs) & _U64,
        (start + ci.hc) & _U64 if not isinstance(ci.hc, UnsetType) else 0,
        g0,
        (g0 + ci.gd) & _U64 if gpu else 0,
        _opt(ci.gr, 0),
        ci.i,
        _datatype(ci.d),
        _opt(ci.ut, 0),
        raw_name,
    )
    return row, (int(ci.c, 16), CommInfo(_opt(ci.cn, None), ci.nn))


def _datatype(label) -> int:
    return shm_v1.DATATYPE_BY_LABEL.get(_opt(label, ""), shm_v1.Datatype.UNKNOWN)


def _opt(value, default):
    return default if value is None or isinstance(value, UnsetType) else value
