"""Offline input: the op streams of a directory of inspector_logs, one per GPU.

A Profiler writes `ci-<host>-<pid>-<start>-<index>.jsonl` segments, sealed by rename; each
begins with a segment_start line (process identity, a clock anchor, the communicators) and
ends with a seal (line and byte counts, CRC-32). `read_gpu_logs` groups the files by process
and `GpuLog.ops()` yields its Coll/P2P lines as `EngineOp`s in file order, each with its
position (segment, byte offset, line index) so a checkpoint can resume after it. An op line
is in either form the writer has (COMMINSIGHT_PROFILER_LOG_FORMAT): compact (kinds c and p,
one object with short keys) or Inspector (kinds coll and p2p beside NVIDIA's objects); a
segment may hold either, and NVIDIA's own Inspector files are read too.

A sealed segment may be stored compressed (`.jsonl.zst`, log_segments): it is the same
segment, read decompressed, and the uncompressed file is preferred while both exist. A
position names a segment by its uncompressed name and an offset in its uncompressed bytes, so
one taken while a segment was open or uncompressed still holds once it is compressed; a file
listed a moment ago and sealed or compressed since is read where it went (`segment_files`).

A process that drives several GPUs (JAX, ncclCommInitAll) is split into one GpuLog per GPU,
named `<process stream>.dev<N>`, by the communicator member each op belongs to
(`process_gpus` has the rule). Its GPUs read the process's segments once between them
(`_SharedReading`) and each keeps its own ops, so each resumes from its own position. A
segment that has to be searched for comm_init lines to tell a process's GPUs apart is read
whole at that moment instead (`_SegmentReader.read_ahead`): its ops are kept for the first
reading, so each segment is read once.

Only the fields the engine uses are decoded: the lean msgspec Structs generated from the
schema (comminsight_gen.models.inspector_log_v1_lean; codegen/log_subsets.py chooses the
fields). A line that does not decode, a segment whose seal does not match its content, and a
missing segment are each reported in `problems` naming the file (and line), and reading goes
on with the rest. Records known lost (gap lines, missing segments) are attached to the next
op as `lost_before`.
"""

from __future__ import annotations

import mmap
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import msgspec
import numpy as np
from isal.isal_zlib import crc32  # zlib's CRC-32, with PCLMUL: 4x faster

from comminsight.log_segments import (
    SEGMENT_BYTES_MAX,
    SegmentError,
    is_compressed,
    read_segment,
    segment_name,
)
from comminsight.safe_open import open_regular, read_regular
from comminsight.semantic import native
from comminsight.semantic.native import NONE
from comminsight.semantic.op_batch import (
    SEGMENT_SHIFT,
    Comm,
    CommTable,
    OpBatch,
    SegmentTable,
    from_engine_ops,
    func_code,
    plain_func_name,
)
from comminsight.semantic.op_times import op_times
from comminsight.semantic.ops import EngineOp, datatype_code
from comminsight.semantic.positions import LogPosition
from comminsight.semantic.process_gpus import (
    GpuOfProcess,
    ProcessMembers,
    segment_files,
    split_process,
)
from comminsight.untrusted_json import NOT_JSON, decode_mending_utf8
from comminsight_gen.inspector_log_v1_fields import V
from comminsight_gen.models.inspector_log_v1_lean import EngineHeader, EngineLine

# a segment: open (.partial), sealed, or sealed and compressed (.zst); never a compression
# still being written (.jsonl.zst.partial)
SEGMENT_NAME = re.compile(
    r"^(?P<stream>.+)-(?P<index>\d{6,})\.jsonl(?:(?P<partial>\.partial)|(?P<zst>\.zst))?$"
)


_DECODER = msgspec.json.Decoder(EngineLine)
_Header = EngineHeader  # the name scripts and tests decode a header with
_OP_KINDS = (V.COLL, V.P2P)  # the op lines' kinds, which are the engine's op kinds too
_COMPACT_KINDS = (V.C, V.P)  # the compact form's op lines (kinds c and p)
BAD_JSON = NOT_JSON  # what decoding a line can raise


@dataclass
class Identity:
    host: str
    pid: int | None
    global_rank: int | None
    local_rank: int | None
    cuda_device: int | None = None


@dataclass
class GpuLog:
    """The segments of one process, in segment order, and which of its ops are this GPU's."""

    stream: str  # the file-name stem shared by the process's segments (+ .dev<N>: one GPU)
    segments: list[Path]
    problems: list[str] = field(default_factory=list)
    identity: Identity | None = None
    device: DeviceSlice | None = None  # set when the process drives several GPUs
    # the reader that read segments ahead while the process's GPUs were told apart: the
    # first `batches` takes it (and what it read)
    reader: _SegmentReader | None = field(default=None, repr=False, compare=False)

    def ops(self, start: LogPosition | None = None) -> Iterator[EngineOp]:
        """The GPU's ops from `start` on, one by one (for scripts; the engine takes
        `batches`)."""
        for batch in self.batches(start):
            yield from batch.ops()

    def batches(self, start: LogPosition | None = None) -> Iterator[OpBatch]:
        """The GPU's ops from `start` (the first line not yet consumed) on, a batch per
        segment, in file order. Records known lost (gap lines, absent segments) are counted
        into the next op's lost_before."""
        if self.device is not None:
            reader = self.device.reading
        else:
            reader, self.reader = self.reader or _SegmentReader(self), None
        # the process's reading problems are reported once, by one of its GPUs
        problems = self.problems if self.device is None or self.device.reports else []
        file_stream = self.device.process_stream if self.device is not None else self.stream
        expected_index: int | None = None
        last_ring_seq = start.ring_seq if start is not None else None
        missing = False
        started = start is None
        lost = 0
        for path in self.segments:
            index = _segment_index(path)
            if index is not None and expected_index is not None and index > expected_index:
                problems.append(
                    f"{path.parent / _name(file_stream, expected_index)}: missing "
                    f"(segments {expected_index}..{index - 1} of this process are absent)"
                )
                missing = True
            expected_index = index + 1 if index is not None else None
            if not started:
                if _base(path.name) != _base(start.segment):
                    continue
                started = True
                offset, record = start.byte_offset, start.record_index
            else:
                offset, record = 0, 0
            batch, lost_after = reader.read(path, offset, record)
            if not len(batch):
                lost += lost_after
                continue
            batch = _without_repeats(batch, last_ring_seq, path, problems)
            if not len(batch):
                continue
            rings = batch.cols["ring_seq"]
            first_ring = int(rings[0])
            if missing and first_ring != NONE and last_ring_seq is not None:
                # what the absent segments held: every ring record between (some of them
                # not ops; the count is an upper bound on the ops lost)
                lost += max(0, first_ring - last_ring_seq - 1)
            missing = False
            known = rings[rings != NONE]
            if len(known):
                last_ring_seq = int(known[-1])
            if self.device is not None:
                batch, lost_after = self.device.own(batch, lost_after, path, problems)
                if not len(batch):
                    lost += lost_after
                    continue
            batch.cols["lost_before"][0] += lost
            lost = lost_after
            yield batch

    def _anchor(self, data: bytes) -> tuple[int, int]:
        first = data[: data.find(b"\n") + 1]
        try:  # (a bad line is named where every line is read)
            ci = decode_mending_utf8(_DECODER.decode, first)[0].ci
        except BAD_JSON:
            ci = None
        if ci is None or ci.kind != V.SEGMENT_START or ci.clock is None:
            return (0, 0)
        if self.identity is None and ci.process is not None:
            p = ci.process
            self.identity = Identity(p.host, p.pid, p.global_rank, p.local_rank)
        return (ci.clock.mono_ns, ci.clock.real_ns)


@dataclass
class DeviceSlice:
    """Which ops of a process are one of its GPUs': those of the communicator members
    (communicator id, rank in it) initialized on that GPU."""

    process_stream: str  # the file-name stem of the process's segments
    members: frozenset[tuple[str, int]]
    reading: _SharedReading
    reports: bool  # the one GPU of the process that reports what reading its files found
    every_member: frozenset[tuple[str, int]] = frozenset()  # of every GPU of the process
    _told: set = field(default_factory=set)  # members without a GPU, reported already

    def own(self, batch: OpBatch, lost_after: int, path: Path, problems: list[str]):
        """The GPU's ops of a batch of the process's, and the records lost after them: the
        lost records counted on other GPUs' ops move to this GPU's next op (they could have
        been its), and a batch read for all GPUs is never changed."""
        comms = batch.comms.comms
        mine = np.fromiter(((c.comm_id, c.rank) in self.members for c in comms), bool, len(comms))
        if self.reports:
            self._tell_orphans(comms, batch.cols["comm"], path, problems)
        return _rows_carrying_lost(batch, mine[batch.cols["comm"]], lost_after)

    def _tell_orphans(self, comms, column: np.ndarray, path: Path, problems: list[str]) -> None:
        for i in np.unique(column).tolist():
            key = (comms[i].comm_id, comms[i].rank)
            if key not in self.every_member and key not in self._told:
                self._told.add(key)
                problems.append(
                    f"{path}: ops of communicator {key[0]} rank {key[1]}, whose init this "
                    "process's logs do not have (lost?): their GPU is unknown; left out"
                )


def _rows_carrying_lost(batch: OpBatch, keep: np.ndarray, lost_after: int) -> tuple[OpBatch, int]:
    """The kept rows (always a new batch) with, on each, the records lost since the kept row
    before it; and lost_after plus what was lost after the last kept row."""
    idx = np.flatnonzero(keep)
    lost = np.cumsum(batch.cols["lost_before"])
    total = int(lost[-1]) if len(lost) else 0
    # gathered now: a lazy take would keep every GPU's ops alive for as long as one GPU's
    own = batch.take(idx).make_concrete()
    if not len(idx):
        return own, lost_after + total
    through = lost[idx]  # lost up to and including each kept row
    own.cols["lost_before"] = np.diff(through, prepend=0)
    return own, lost_after + total - int(through[-1])


class _SharedReading:
    """A process's segments read once for all of its GPUs: each batch is kept until every
    GPU has taken it, up to MAX_SHARED_OPS ops (GPUs read one after another, so past that a
    GPU reads again what is not kept; so does one resuming at another offset). Problems go to
    the reporting GPU's list."""

    def __init__(self, reporter: GpuLog, sharers: int, reader: _SegmentReader) -> None:
        reader.log = reporter
        self.reader = reader
        self.sharers = sharers
        self._kept: dict[tuple[str, int, int], list] = {}
        self._kept_ops = 0

    def read(self, path: Path, offset: int, record: int) -> tuple[OpBatch, int]:
        key = (path.name, offset, record)
        kept = self._kept.get(key)
        if kept is None:
            result = self.reader.read(path, offset, record)
            if self._kept_ops + len(result[0]) > MAX_SHARED_OPS:
                return result
            kept = self._kept[key] = [result, 0]
            self._kept_ops += len(result[0])
        kept[1] += 1
        if kept[1] >= self.sharers:
            del self._kept[key]
            self._kept_ops -= len(kept[0][0])
        return kept[0]


# Ops the readers of one listing keep from compressed segments read ahead while each
# process's GPUs are told apart (about 200 bytes each): past this, such a segment is
# decompressed twice instead
AHEAD_OPS = 2_000_000


@dataclass
class AheadBudget:
    """The ops read ahead and not yet taken, shared by the readers of one listing (every
    process is split before any is read)."""

    ops: int = 0


# Ops a multi-GPU process's reading keeps for its other GPUs (~200 bytes each): the job-wide
# cut holds every op anyway; this bounds what reading GPU by GPU (per_gpu) holds besides.
MAX_SHARED_OPS = 2_000_000


def _without_repeats(batch: OpBatch, last_ring_seq: int | None, path: Path, problems) -> OpBatch:
    """The batch without records whose ring sequence number was read already (a segment
    copied under another index): each op counts once."""
    if last_ring_seq is None:
        return batch
    rings = batch.cols["ring_seq"]
    repeat = (rings != NONE) & (rings <= last_ring_seq)
    if not repeat.any():
        return batch
    problems.append(
        f"{path}: {int(repeat.sum())} op records repeat ring sequence numbers already read "
        f"(up to {last_ring_seq}): a duplicated segment? skipped"
    )
    return batch.take(np.flatnonzero(~repeat))


class _SegmentReader:
    """Reads one process's segments into OpBatches: op lines through the C scanner
    (native.scan), every other line through msgspec, as `_op` describes."""

    def __init__(self, log: GpuLog, ahead: AheadBudget | None = None) -> None:
        self.log = log
        self._ahead_budget = ahead if ahead is not None else AheadBudget()
        self.headers = native.InternTable()
        self.funcs = native.InternTable(cap=256, arena=1 << 14)
        self.comms = CommTable()
        self.segments = SegmentTable()
        self.comm_of_header = np.empty(0, np.int64)  # interned header -> comms index
        self.code_of_func = np.empty(0, np.int64)  # interned function name -> FUNCS code
        # interned function names read as another (plain_func_name): id -> (name, plain)
        self._renamed: dict[int, tuple[str, str]] = {}
        # segments read whole before their turn: (what `read` gives, the problems found)
        self._ahead: dict[str, tuple[tuple[OpBatch, int], list[str]]] = {}
        self._problems: list[str] | None = None  # where problems go, when not the log's

    def read_ahead(self, path: Path, optional: bool = False) -> list[bytes] | None:
        """Read a whole segment now, for `read` to give later (its problems are reported
        then, in their place), and return its lines that are not op lines (what a GPU split
        needs): the segment is then read once, not searched as well. An optional reading
        (a compressed segment, which would be decompressed twice otherwise) is declined
        with None once AHEAD_OPS ops are kept: what is kept waits in memory for its turn."""
        if optional and self._ahead_budget.ops >= AHEAD_OPS:
            return None
        others: list[bytes] = []
        self._problems = problems = []
        try:
            result = self.read(path, 0, 0, others)
        finally:
            self._problems = None
        self._ahead[path.name] = (result, problems)
        self._ahead_budget.ops += len(result[0])
        return others

    def read(
        self, path: Path, offset: int, record: int, others: list[bytes] | None = None
    ) -> tuple[OpBatch, int]:
        """The ops of one segment from a byte offset, and the records lost after its last op
        (with `others`, the lines that are not op lines are added to it)."""
        ahead = self._ahead.pop(path.name, None)
        if ahead is not None:
            self._ahead_budget.ops -= len(ahead[0][0])
        if ahead is not None and offset == 0 and record == 0:
            self.log.problems += ahead[1]
            return ahead[0]
        problems = self._problem_list()
        empty = OpBatch.empty(self.comms, self.segments)
        # sealed (renamed) or compressed since the listing: read where it went
        candidates = segment_files(path) if _segment_index(path) is not None else [path]
        gone: OSError | None = None
        for candidate in candidates:
            try:
                contents = _SegmentBytes(candidate)
            except FileNotFoundError as e:
                gone = e
                continue
            except SegmentError as e:  # a compressed segment that does not decompress
                problems.append(f"{e}; its ops were not read")
                return empty, 0
            except OSError as e:
                problems.append(f"{candidate}: cannot read: {e}")
                return empty, 0
            path = candidate
            break
        else:
            problems.append(f"{path}: cannot read: {gone}")
            return empty, 0
        with contents as data:
            return self._read(path, data, offset, record, others)

    def _problem_list(self) -> list[str]:
        return self.log.problems if self._problems is None else self._problems

    def _read(
        self, path: Path, data, offset: int, record: int, others_out: list[bytes] | None
    ) -> tuple[OpBatch, int]:
        problems = self._problem_list()
        anchor = self.log._anchor(data)  # the clock pair of the segment_start line
        name = segment_name(path)  # positions name the segment, not the file holding it
        seg = self.segments.add(name, _segment_index(path))
        seal = _seal_checksum(data) if not path.name.endswith(".partial") else None
        # the GPU clock's offset is the whole segment's (op_times), wherever reading resumes:
        # from a checkpoint's position, the ops after it are placed as an uninterrupted run
        # placed them
        whole_offset = _gpu_offset_of(data, seal is not None) if offset > 0 else None
        rows, rest = native.scan(
            data, offset, self.headers, self.funcs, seal is not None, _scan_scratch()
        )
        self._learn_interned()
        ops = np.flatnonzero(rows["status"] == native.LINE_OP)
        # a header C took but the schema does not (a wrong type): Python names the problem
        refused = ops[self.comm_of_header[rows["header"][ops]] < 0]
        rows["status"][refused] = native.LINE_OTHER
        for fid, (func, plain) in self._renamed.items():
            at = ops[rows["func"][ops] == fid]
            if len(at):
                more = f" (and {len(at) - 1} more lines here)" if len(at) > 1 else ""
                problems.append(f"{path}:{record + int(at[0]) + 1}: {_renamed(func, plain)}{more}")
        ends = rows["end"]
        n = len(rows)
        gpu_offset = native.gpu_offset(rows, ops) if offset == 0 else whole_offset
        # the lines C left to Python: before the seal (or the end), in order
        others = np.flatnonzero(rows["status"] != native.LINE_OP)
        if others_out is not None:
            others_out += [data[int(rows["start"][r]) : int(ends[r])] for r in others.tolist()]
        cut = n  # rows from the seal on are not read
        py_ops: list[tuple[int, EngineOp]] = []
        gaps: list[tuple[int, int]] = []  # (row, records lost)
        no_seal = True
        for r in others.tolist():
            start, end = int(rows["start"][r]), int(ends[r])
            line_no = record + r
            line = data[start:end]
            try:
                decoded, mended = decode_mending_utf8(_DECODER.decode, line)
            except BAD_JSON as e:
                problems.append(f"{path}:{line_no + 1}: not an inspector-log line: {e}")
                continue
            if mended:
                problems.append(f"{path}:{line_no + 1}: {mended}")
            ci = decoded.ci
            if ci is not None and ci.kind == V.SEAL:
                crc = seal[1] if seal is not None and seal[0] == start else crc32(data[:start])
                if ci.crc32 != crc or ci.record_count != line_no or ci.byte_count != start:
                    problems.append(
                        f"{path}:{line_no + 1}: seal does not match the segment "
                        f"(crc32 {ci.crc32} vs {crc}, lines {ci.record_count} vs {line_no}, "
                        f"bytes {ci.byte_count} vs {start}); its ops were read anyway"
                    )
                cut, no_seal = r, False
                break
            if ci is not None and ci.kind == V.GAP:
                gaps.append((r, ci.lost_count or 0))
                continue
            position = LogPosition(name, _segment_index(path), start, line_no, _ring_seq(ci), end)
            op = _op(decoded, anchor, position, gpu_offset)
            if op is not None:
                py_ops.append((r, op))
                if (plain := plain_func_name(op.func)) != op.func:
                    problems.append(f"{path}:{line_no + 1}: {_renamed(op.func, plain)}")
            elif (unread := _unread(decoded)) is not None:
                problems.append(f"{path}:{line_no + 1}: {unread}; left out")
        if no_seal and rest < len(data) and not path.name.endswith(".partial"):
            problems.append(f"{path}:{record + n + 1}: truncated line (no newline) at the end")
        elif (
            no_seal
            and not path.name.endswith(".partial")
            and offset == 0
            and _segment_index(path) is not None  # NVIDIA's logs have no seals
        ):
            what = "empty (0 bytes)" if not len(data) else "no seal line: the segment was cut"
            problems.append(f"{path}: {what}; the ops before the end were read")
        # an open segment's last line may still be being written: it is read next time
        fast = np.flatnonzero(rows["status"][:cut] == native.LINE_OP)
        batch = self._columns(rows, fast, anchor, seg, record, gpu_offset)
        row_of = fast
        if py_ops:
            extra = from_engine_ops([op for _, op in py_ops], self.comms, self.segments)
            batch = batch.concat(extra)
            row_of = np.concatenate((fast, np.array([r for r, _ in py_ops], np.int64)))
            order = np.argsort(row_of, kind="stable")
            batch, row_of = batch.take(order), row_of[order]
        lost_after = 0
        for r, count in gaps:
            i = int(np.searchsorted(row_of, r))  # the first op after the gap line
            if i < len(row_of):
                batch.cols["lost_before"][i] += count
            else:
                lost_after += count
        return batch, lost_after

    def _learn_interned(self) -> None:
        ids = []
        for raw in self.headers.new_entries():
            try:
                h = msgspec.json.decode(raw, type=EngineHeader)
            except BAD_JSON:
                ids.append(-1)
                continue
            ids.append(
                self.comms.index(Comm(_comm_id(h.id), h.comm_name, h.n_ranks, h.nnodes, h.rank))
            )
        if ids:
            self.comm_of_header = np.concatenate((self.comm_of_header, ids)).astype(np.int64)
        new_funcs = self.funcs.new_entries()
        if new_funcs:
            names = [f.decode("utf-8", "replace") for f in new_funcs]
            for fid, name in enumerate(names, start=len(self.code_of_func)):
                if (plain := plain_func_name(name)) != name:
                    self._renamed[fid] = (name, plain)
            codes = [func_code(name) for name in names]
            self.code_of_func = np.concatenate((self.code_of_func, codes)).astype(np.int64)

    def _columns(
        self,
        rows: native.Lines,
        fast: np.ndarray,
        anchor: tuple[int, int],
        seg: int,
        record: int,
        offset: int | None,
    ) -> OpBatch:
        """The ops of scanned op lines `fast` (in C), computed as `_op` computes one."""
        mono0, real0 = anchor
        seg_index = self.segments.segments[seg][1] or 0
        cols = native.op_columns(
            rows,
            fast,
            self.comm_of_header,
            self.code_of_func,
            record,
            real0 - mono0 if anchor != (0, 0) else 0,
            offset,
            seg,
            seg_index << SEGMENT_SHIFT,
        )
        return OpBatch(cols, self.comms, self.segments)


def _gpu_offset_of(data, trusted: bool) -> int | None:
    """The GPU clock's offset over every op line of a segment (as a reading from its start
    computes it), its lines scanned apart from the reader's tables."""
    rows, _ = native.scan(
        data, 0, native.InternTable(), native.InternTable(cap=256, arena=1 << 14), trusted
    )
    return native.gpu_offset(rows, np.flatnonzero(rows["status"] == native.LINE_OP))


_SCRATCH = threading.local()


def _scan_scratch() -> native.ScanScratch:
    """This thread's scan columns: segments are read one at a time, and each segment's rows
    are done with before the next is scanned."""
    scratch = getattr(_SCRATCH, "scan", None)
    if scratch is None:
        scratch = _SCRATCH.scan = native.ScanScratch()
    return scratch


class _SegmentBytes:
    """A segment's bytes, as a context manager. A sealed segment never changes: it is mapped
    and prefaulted in one call (copying it would cost as much as checksumming it). An open
    one (.partial) is still growing, and a mapping of a file that changes size is unsafe: it
    is read. A compressed one is read decompressed (a SegmentError when it does not
    decompress)."""

    def __init__(self, path: Path) -> None:
        self._map = None
        if is_compressed(path):
            self.data = read_segment(path, SEGMENT_BYTES_MAX)
            return
        if path.name.endswith(".partial") or not hasattr(mmap, "MAP_POPULATE"):
            self.data = read_regular(path, SEGMENT_BYTES_MAX)
            return
        with open_regular(path, SEGMENT_BYTES_MAX) as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                self.data = b""
                return
            flags = mmap.MAP_SHARED | mmap.MAP_POPULATE
            self._map = self.data = mmap.mmap(f.fileno(), size, flags=flags, prot=mmap.PROT_READ)

    def __enter__(self):
        return self.data

    def __exit__(self, *exc) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view is still alive: unmapped when it goes
                pass


def _seal_checksum(data) -> tuple[int, int] | None:
    """(where the seal line begins, the CRC-32 of what precedes it) when the segment ends with
    a seal whose checksum matches: its lines are then exactly what the writer wrote."""
    if not len(data) or data[-1:] != b"\n":
        return None
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    try:
        ci = _DECODER.decode(data[start:]).ci
    except BAD_JSON:
        return None
    if ci is None or ci.kind != V.SEAL:
        return None
    crc = crc32(memoryview(data)[:start])
    return (start, crc) if crc == ci.crc32 else None


def _comm_id(nccl_id: str) -> str:
    comm_id = _COMM_IDS.get(nccl_id)
    if comm_id is None:
        comm_id = _COMM_IDS[nccl_id] = nccl_id.removeprefix("0x").rjust(16, "0")
    return comm_id


def _ring_seq(ci) -> int | None:
    """The ring seq a line's `ci` object carries, under its form's key."""
    if ci is None:
        return None
    return ci.q if ci.kind in _COMPACT_KINDS else ci.ring_seq


def _unread(line: EngineLine) -> str | None:
    """Why a line that gave no op is worth naming: an op kind without what an op needs, or a
    line of neither format (a key garbled); None for the lines that are no op by design."""
    ci = line.ci
    if ci is None:
        return None if line.header is not None else "neither a CommInsight nor an Inspector line"
    if ci.kind in _COMPACT_KINDS and _inspector_objects(line):
        return f"a {ci.kind} line with Inspector objects (header, metadata or perf)"
    if ci.kind in _COMPACT_KINDS + _OP_KINDS and not _numbers_fit(line):
        return f"a {ci.kind} line with a number outside 64-bit integers (or a negative time)"
    if ci.kind in _OP_KINDS:
        return f"a {ci.kind} line without its header or perf object"
    if ci.kind in _COMPACT_KINDS:
        return f"a {ci.kind} line without its communicator, rank, size, function, sequence or bytes"
    return None


def _inspector_objects(line: EngineLine) -> bool:
    return any(x is not None for x in (line.header, line.metadata, line.coll_perf, line.p2p_perf))


def _fits(*values) -> bool:
    """Every value absent or a signed 64-bit integer, as the C scanner reads integers."""
    return all(v is None or _INT64_MIN <= v <= _INT64_MAX for v in values)


def _numbers_fit(line: EngineLine) -> bool:
    """The integers an op line gives the engine are 64-bit ones (a compact line's enqueue time
    is not negative either): a line that breaks this is no op, and is named."""
    ci, h = line.ci, line.header
    if ci.kind in _COMPACT_KINDS:
        return (ci.h is None or ci.h >= 0) and _fits(
            ci.q, ci.r, ci.n, ci.nn, ci.s, ci.b, ci.pe, ci.h, ci.hc, ci.g0, ci.gd, ci.gr
        )
    perf = line.coll_perf if ci.kind == V.COLL else line.p2p_perf
    numbers = [ci.ring_seq, ci.host_start_mono_ns, ci.host_complete_mono_ns, ci.group_id]
    numbers += [ci.gpu_start_globaltimer_ns, ci.gpu_stop_globaltimer_ns]
    if h is not None:
        numbers += [h.rank, h.n_ranks, h.nnodes]
    if perf is not None:
        numbers += [perf.coll_sn, perf.coll_msg_size_bytes] if ci.kind == V.COLL else []
        numbers += [perf.p2p_sn, perf.p2p_msg_size_bytes, perf.p2p_peer] if ci.kind == V.P2P else []
    return _fits(*numbers)


def _op(
    line: EngineLine, anchor: tuple[int, int], position: LogPosition, offset: int | None = None
) -> EngineOp | None:
    ci, h = line.ci, line.header
    if ci is None and h is not None:
        return _nvidia_op(line, position)
    if ci is not None and ci.kind in _COMPACT_KINDS:
        if _inspector_objects(line) or not _numbers_fit(line):
            return None
        return _compact_op(ci, anchor, position, offset)
    if ci is None or h is None or ci.kind not in _OP_KINDS or not _numbers_fit(line):
        return None
    if ci.kind == V.COLL and line.coll_perf is not None:
        perf = line.coll_perf
        func, seq, size = perf.coll, perf.coll_sn, perf.coll_msg_size_bytes
        exec_us, busbw, timing, peer = (
            perf.coll_exec_time_us,
            perf.coll_busbw_gbs,
            perf.coll_timing_source,
            None,
        )
    elif ci.kind == V.P2P and line.p2p_perf is not None:
        perf = line.p2p_perf
        func, seq, size = perf.p2p, perf.p2p_sn, perf.p2p_msg_size_bytes
        exec_us, busbw, timing, peer = (
            perf.p2p_exec_time_us,
            perf.p2p_busbw_gbs,
            perf.p2p_timing_source,
            perf.p2p_peer,
        )
    else:
        return None
    issue = ci.host_start_mono_ns or 0
    return EngineOp(
        kind=ci.kind,
        func=func,
        comm_id=_comm_id(h.id),
        comm_name=h.comm_name,
        comm_nranks=h.n_ranks,
        comm_nnodes=h.nnodes,
        comm_rank=h.rank,
        peer=peer,
        seq=seq,
        size_bytes=size,
        issue_ns=issue,
        busbw_gbs=_float(busbw),
        ring_seq=ci.ring_seq,
        position=position,
        group_id=max(ci.group_id or 0, 0),  # as the C scanner reads it
        datatype=datatype_code(ci.datatype),
        user_tag=_user_tag(ci.user_tag),
        **_times(
            issue,
            ci.host_complete_mono_ns or issue,
            (ci.gpu_start_globaltimer_ns, ci.gpu_stop_globaltimer_ns, timing == V.KERNEL_GPU),
            exec_us,
            anchor,
            offset,
        ),
    )


_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)


def _user_tag(tag) -> int:
    """A call's userProfilerTag as the engine keeps it: 0 for none, and for the values NCCL
    reserves (the top bit set) or that no writer gives (negative, not an integer)."""
    return tag if isinstance(tag, int) and 0 < tag <= _INT64_MAX else 0


def _compact_op(
    ci, anchor: tuple[int, int], position: LogPosition, offset: int | None
) -> EngineOp | None:
    """A compact op line's op (kinds c and p; its numbers checked by `_numbers_fit`), as the C
    scanner reads it: host and GPU times put back from their offsets (a sum outside int64, or
    a negative one, leaves that time out), no execution time (the GPU span where the kernel was
    timed, else the host span)."""
    if None in (ci.c, ci.r, ci.n, ci.f, ci.s, ci.b):
        return None
    issue = ci.h or 0
    complete = issue
    if ci.hc is not None and 0 < issue + ci.hc <= _INT64_MAX:
        complete = issue + ci.hc
    gpu_start = gpu_stop = None  # the span's length is negative where the GPU clock disagrees
    if ci.g0 is not None and ci.gd is not None and ci.g0 >= 0:
        if 0 <= ci.g0 + ci.gd <= _INT64_MAX:
            gpu_start, gpu_stop = ci.g0, ci.g0 + ci.gd
    p2p = ci.kind == V.P
    return EngineOp(
        kind=V.P2P if p2p else V.COLL,
        func=ci.f,
        comm_id=_comm_id(ci.c),
        comm_name=ci.cn,
        comm_nranks=ci.n,
        comm_nnodes=ci.nn,
        comm_rank=ci.r,
        peer=ci.pe if p2p else None,
        seq=ci.s,
        size_bytes=ci.b,
        issue_ns=issue,
        busbw_gbs=_float(ci.bw),
        ring_seq=ci.q,
        position=position,
        group_id=max(ci.gr or 0, 0),
        datatype=datatype_code(ci.d),
        user_tag=_user_tag(ci.ut),
        **_times(
            issue, complete, (gpu_start, gpu_stop, ci.ts == V.KERNEL_GPU), 0.0, anchor, offset
        ),
    )


def _times(
    issue: int,
    complete: int,
    gpu: tuple[int | None, int | None, bool],
    exec_us: float,
    anchor: tuple[int, int],
    offset: int | None,
) -> dict:
    """An op's times: the duration (the GPU span where the kernel was timed, else the
    execution time, else the host span) and its start and end on the host clock."""
    gpu_start, gpu_stop, kernel_timing = gpu
    timed = bool(kernel_timing and gpu_start and gpu_stop and gpu_stop >= gpu_start)
    if timed:
        duration = gpu_stop - gpu_start
    elif exec_us:
        # as the C scanner reads it: an execution time past int64's nanoseconds (a writer's
        # clock difference that wrapped) is no duration
        t = exec_us * 1000
        duration = 0 if not t >= 1 else int(t) if t < 2.0**63 else NONE
    else:
        duration = max(0, complete - issue)
    starts, ends = op_times(
        *(np.array([v], np.int64) for v in (issue, complete, duration)),
        *(np.array([v or 0], np.int64) for v in (gpu_start, gpu_stop)),
        np.array([timed]),
        offset,
    )
    start_mono, complete = int(starts[0]), int(ends[0])
    mono0, real0 = anchor
    to_real = real0 - mono0 if anchor != (0, 0) else 0
    return _OpTimes(
        start_ns=start_mono,
        end_ns=complete,
        start_real_ns=max(0, start_mono + to_real),
        end_real_ns=max(0, complete + to_real),
        start_mono_ns=start_mono,
        end_mono_ns=complete,
        duration_ns=duration,
    )._asdict()


class _OpTimes(NamedTuple):
    """An EngineOp's times (its fields of these names)."""

    start_ns: int
    end_ns: int
    start_real_ns: int
    end_real_ns: int
    start_mono_ns: int
    end_mono_ns: int
    duration_ns: int


_COMM_IDS: dict[str, str] = {}  # NVIDIA's "0x2b5e..." -> CommInsight's 16 digits


def _float(value) -> float:
    """A bandwidth as NVIDIA writes it: a number, or "nan"/"inf" strings."""
    try:
        v = float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return v if v == v and v not in (float("inf"), float("-inf")) else 0.0


def _nvidia_op(line: EngineLine, position: LogPosition) -> EngineOp | None:
    """A foreign NVIDIA Inspector line: no issue time and no monotonic clock. Lines are in the
    order NVIDIA wrote them (completion order), which stands for the issue order; an op ended
    by the time its line was dumped (dump_timestamp_us), or at its stop callback in verbose
    mode."""
    h, meta = line.header, line.metadata
    if line.coll_perf is not None:
        perf = line.coll_perf
        func, seq, size, peer = perf.coll, perf.coll_sn, perf.coll_msg_size_bytes, None
        exec_us, busbw, kind = perf.coll_exec_time_us, perf.coll_busbw_gbs, V.COLL
        trace = perf.event_trace_ts
    elif line.p2p_perf is not None:
        perf = line.p2p_perf
        func, seq, size, peer = perf.p2p, perf.p2p_sn, perf.p2p_msg_size_bytes, perf.p2p_peer
        exec_us, busbw, kind = perf.p2p_exec_time_us, perf.p2p_busbw_gbs, V.P2P
        trace = None
    else:
        return None
    duration = max(0, int(exec_us * 1000))
    end_real = (meta.dump_timestamp_us if meta is not None else 0) * 1000
    if trace is not None and trace.coll_stop_ts:
        end_real = trace.coll_stop_ts * 1000
    start_real = max(0, end_real - duration)
    return EngineOp(
        kind=kind,
        func=FUNC_SPELLINGS.get(func, func),
        comm_id=h.id.removeprefix("0x").rjust(16, "0"),
        comm_name=None if h.comm_name in (None, "unknown") else h.comm_name,
        comm_nranks=h.n_ranks,
        comm_nnodes=h.nnodes,
        comm_rank=h.rank,
        peer=peer,
        seq=seq,
        size_bytes=size,
        issue_ns=position.byte_offset,  # file order
        start_ns=start_real,
        end_ns=end_real,
        start_real_ns=start_real,
        end_real_ns=end_real,
        start_mono_ns=None,
        end_mono_ns=None,
        duration_ns=duration,
        busbw_gbs=_float(busbw),
        ring_seq=None,
        position=position,
    )


def _renamed(name: str, plain: str) -> str:
    return f"op name {name!r} read as {plain!r} (functions are named by ASCII letters and digits)"


# NVIDIA Inspector's spellings -> NCCL profiler's (what templates and summaries use)
FUNC_SPELLINGS = {"All2All": "AlltoAll", "AllToAll": "AlltoAll", "AllGatherV": "AllGather"}


def _segment_index(path: Path) -> int | None:
    """A CommInsight segment's index; None for an NVIDIA Inspector file."""
    m = SEGMENT_NAME.match(path.name)
    return int(m["index"]) if m else None


NVIDIA_PROBE_LINES = 1000
PROBE_LINE_BYTES_MAX = 1 << 20  # an Inspector line is under 1 KiB; a longer one is cut


def nvidia_identity(path: Path) -> Identity | None:
    """Whether `path` is an NVIDIA Inspector log (op lines without `ci`) and whose: its host
    and pid, and as global rank the rank in the largest communicator it has (the logs name no
    global rank)."""
    best: tuple[int, int] | None = None
    host = pid = None
    try:
        with open_regular(path, SEGMENT_BYTES_MAX) as f:
            # readline with a bound: a file of one endless line is not read whole
            lines = iter(lambda: f.readline(PROBE_LINE_BYTES_MAX), b"")
            for _, line in zip(range(NVIDIA_PROBE_LINES), lines, strict=False):
                try:
                    decoded = _DECODER.decode(line)
                except BAD_JSON:
                    continue
                if decoded.ci is not None:
                    return None  # a CommInsight file under another name
                if decoded.header is None or decoded.metadata is None:
                    continue
                h, meta = decoded.header, decoded.metadata
                host, pid = meta.hostname or host, meta.pid or pid
                if best is None or h.n_ranks > best[0]:
                    best = (h.n_ranks, h.rank)
    except OSError:
        return None
    if best is None:
        return None
    return Identity(host or "unknown", pid, best[1], None)


def _name(stream: str, index: int) -> str:
    return f"{stream}-{index:06d}.jsonl"


def _base(name: str) -> str:
    """A segment's name whichever file holds it: open, sealed or compressed."""
    return segment_name(name).removesuffix(".partial")


def _preference(path: Path | str) -> int:
    """Which file of a segment index is read (the lowest): the sealed file, then its
    compressed copy (the same bytes), then a leftover open one."""
    name = str(path)
    if name.endswith(".partial"):
        return 2
    return 1 if is_compressed(name) else 0


def preferred_file(path: Path | str, than: Path | str) -> bool:
    """Whether `path` is read rather than `than`, two files of one segment index."""
    return _preference(path) < _preference(than)


@dataclass(frozen=True)
class ProcessFiles:
    """One process's segments as a listing finds them (or one NVIDIA Inspector file, with
    whose it is), before any op is read."""

    stream: str
    segments: tuple[Path, ...]
    nvidia: Identity | None = None

    def gpu_logs(self, problems: list[str], ahead: AheadBudget | None = None) -> list[GpuLog]:
        """Its GpuLogs: one, or one per GPU it drives (what telling them apart met goes to
        problems)."""
        if self.nvidia is not None:
            return [GpuLog(self.stream, list(self.segments), identity=self.nvidia)]
        return gpu_logs_of_process(self.stream, list(self.segments), problems, ahead)


def list_job(directory: str | Path) -> tuple[list[ProcessFiles], list[str]]:
    """The processes whose segments are in `directory`, in the order their GPUs are the
    job's (NVIDIA Inspector files first, then the processes by name), and what could not be
    used."""
    directory = Path(directory)
    problems: list[str] = []
    if not directory.is_dir():
        return [], [f"{directory}: not a directory"]
    streams: dict[str, list[tuple[int, Path]]] = {}
    processes = []
    for path in sorted(directory.iterdir()):
        m = SEGMENT_NAME.match(path.name)
        if m is None:
            if not path.is_file() or not path.name.endswith((".jsonl", ".log", ".json")):
                continue
            identity = nvidia_identity(path)
            if identity is None:
                problems.append(
                    f"{path}: neither an inspector_logs segment nor an NVIDIA Inspector log; "
                    "skipped"
                )
                continue
            processes.append(ProcessFiles(path.stem, (path,), identity))
            continue
        streams.setdefault(m["stream"], []).append((int(m["index"]), path))
    for stream, files in sorted(streams.items()):
        by_index: dict[int, Path] = {}
        for index, path in files:  # sealed over compressed over a leftover .partial
            if index not in by_index or preferred_file(path, by_index[index]):
                by_index[index] = path
        processes.append(ProcessFiles(stream, tuple(by_index[i] for i in sorted(by_index))))
    return processes, problems


def read_gpu_logs(directory: str | Path) -> tuple[list[GpuLog], list[str]]:
    """The GPUs whose segments are in `directory`, and what could not be used."""
    processes, problems = list_job(directory)
    logs = []
    ahead = AheadBudget()  # every process is split before any is read: one bound for all
    for process in processes:
        logs += process.gpu_logs(problems, ahead)
    return logs, problems


def gpu_logs_of_process(
    stream: str, segments: list[Path], problems: list[str], ahead: AheadBudget | None = None
) -> list[GpuLog]:
    """A process's GpuLogs: one, or one per GPU when it drives several (process_gpus)."""
    log = GpuLog(stream, segments)
    reader = _SegmentReader(log, ahead)
    split = split_process(segments, reader.read_ahead)
    problems += split.problems
    who = split.process
    if not split.split:
        if who.host is not None:  # else learnt from the first segment_start that decodes
            log.identity = _identity(who, split.gpus[0])
        log.reader = reader
        return [log]
    logs = [GpuLog(stream + g.suffix, segments, identity=_identity(who, g)) for g in split.gpus]
    reading = _SharedReading(logs[0], len(logs), reader)
    every_member = frozenset(who.members)
    for i, (log, gpu) in enumerate(zip(logs, split.gpus, strict=True)):
        log.device = DeviceSlice(stream, gpu.members, reading, i == 0, every_member)
    return logs


def _identity(who: ProcessMembers, gpu: GpuOfProcess) -> Identity:
    host = who.host if who.host is not None else "unknown"
    return Identity(host, who.pid, gpu.global_rank, gpu.local_rank, gpu.device)
