"""Ops as columns: the Semantic Engine's unit of work.

An `OpBatch` holds n ops of one GPU as numpy columns (what `EngineOp` holds per op), so that
reordering, role assignment, FSM decisions and Step totals run over whole arrays (and in
C, semantic/native). Communicators and log segments, which repeat on every op, are indices
into tables shared by all batches of the GPU (`CommTable`, `SegmentTable`). `op(i)` gives
one op as an `EngineOp` where a single op is wanted (a Step's first op, trace export).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from comminsight.semantic import native
from comminsight.semantic.native import NONE
from comminsight.semantic.ops import EngineOp
from comminsight.semantic.positions import LogPosition, RingPosition

KINDS = ("coll", "p2p")

# Function names by code, shared by every batch (a handful of names, append-only).
FUNCS: list[str] = []
_FUNC_CODES: dict[str, int] = {}


_PLAIN_FUNC = re.compile(r"[A-Za-z][A-Za-z0-9]{0,31}")


def plain_func_name(name: str) -> str:
    """`name` as a step summary carries an op's function: ASCII letters and digits, a letter
    first, at most 32. NCCL's own names are so already; a stand-in's or a damaged log's may
    not be ("All-Reduce", "Ünïcode"), and are kept, as the nearest plain name."""
    if _PLAIN_FUNC.fullmatch(name):
        return name
    kept = "".join(c for c in name if c.isascii() and c.isalnum()).lstrip("0123456789")
    return kept[:32] or "Unknown"


def is_func(func, *names: str):
    """Per op (function codes, or one code): whether its function is one of `names`. Compared
    one name at a time: np.isin takes about five times as long over a GPU's op stream."""
    out = func == func_code(names[0])
    for name in names[1:]:
        out = out | (func == func_code(name))
    return out


def func_code(name: str) -> int:
    name = plain_func_name(name)
    code = _FUNC_CODES.get(name)
    if code is None:
        code = _FUNC_CODES[name] = len(FUNCS)
        FUNCS.append(name)
    return code


class Comm(NamedTuple):
    comm_id: str  # 16 lowercase hex digits
    name: str | None
    nranks: int
    nnodes: int | None
    rank: int


class OpShape(NamedTuple):
    """The fields of an op that decide its role (an EngineOp has them too)."""

    func: str
    comm_id: str
    comm_name: str | None
    comm_nranks: int
    comm_nnodes: int | None
    comm_rank: int
    peer: int | None
    size_bytes: int


@dataclass
class CommTable:
    """The communicators (as this rank sees them) of one GPU's ops; a batch's `comm` column
    indexes `comms`."""

    comms: list[Comm] = field(default_factory=list)
    _index: dict[Comm, int] = field(default_factory=dict)

    def index(self, comm: Comm) -> int:
        i = self._index.get(comm)
        if i is None:
            i = self._index[comm] = len(self.comms)
            self.comms.append(comm)
        return i


class SegmentTable:
    """Log segment names and indices, for positions (`pos_seg` column); ring positions use
    pos_seg -1 and pos_offset = ring_seq."""

    def __init__(self) -> None:
        self.segments: list[tuple[str, int | None]] = []

    def add(self, name: str, index: int | None) -> int:
        self.segments.append((name, index))
        return len(self.segments) - 1


INT_COLUMNS = (
    "kind", "func", "comm", "peer", "seq", "size", "issue", "start", "end", "start_real",
    "end_real", "end_mono", "duration", "ring_seq", "lost_before", "pos_seg", "pos_offset",
    "pos_record", "pos_end", "order", "arrival", "group_id", "datatype", "user_tag",
)  # fmt: skip
COLUMNS = INT_COLUMNS + ("busbw",)


# How many lazy levels (a take or a concat over other lazy columns) a batch may stack before it
# is made concrete. The live engine takes and concatenates a little at every batch (the reorder
# window, the selection probe): without a bound, a batch's columns would reach back through
# every batch ever fed, keeping each one alive, and reading a column never read before would
# recurse once per batch (a RecursionError some tens of seconds into a live run).
MAX_LAZY_DEPTH = 8


class LazyColumns(Mapping):
    """Columns made on first use (a gather or a concatenation of other batches' columns):
    the engine reorders and slices whole batches, but reads only some columns of each.
    `depth`: how many lazy levels a column read may go through (MAX_LAZY_DEPTH at most)."""

    __slots__ = ("_make", "_made", "depth")

    def __init__(self, make: Callable[[str], np.ndarray], depth: int = 1) -> None:
        self._make = make
        self._made: dict[str, np.ndarray] = {}
        self.depth = depth

    def __getitem__(self, name: str) -> np.ndarray:
        column = self._made.get(name)
        if column is None:
            column = self._made[name] = self._make(name)
        return column

    def __setitem__(self, name: str, column: np.ndarray) -> None:
        self._made[name] = column

    def __iter__(self):
        return iter(COLUMNS)

    def __len__(self) -> int:
        return len(COLUMNS)

    def concrete(self) -> dict[str, np.ndarray]:
        """Every column made: a plain dict that no longer refers to the source batches (a
        column that is a slice of a larger one is copied, not to keep all of that alive)."""
        columns = {**{name: self[name] for name in COLUMNS}, **self._made}
        return {name: c.copy() if c.base is not None else c for name, c in columns.items()}


class OpBatch:
    """n ops of one GPU in columns (all int64 but busbw). end_mono is NONE for ops without a
    monotonic clock (NVIDIA logs; start_mono is then None too), peer and ring_seq NONE when
    absent. order is the input order of the op's position (checkpoints), arrival the
    engine's arrival counter, group_id the op's NCCL group (0: unknown), datatype the shm
    protocol's code of its element type (0: unknown), user_tag the call's userProfilerTag
    (0: none)."""

    __slots__ = ("cols", "comms", "segments", "n", "_shapes")

    def __init__(
        self,
        cols: dict[str, np.ndarray] | LazyColumns,
        comms: CommTable,
        segments: SegmentTable,
        n: int | None = None,
    ) -> None:
        self.cols = cols
        self.comms = comms
        self.segments = segments
        self.n = len(cols["seq"]) if n is None else n
        self._shapes = None

    @classmethod
    def empty(cls, comms: CommTable, segments: SegmentTable) -> OpBatch:
        cols = {c: np.empty(0, np.int64) for c in INT_COLUMNS}
        cols["busbw"] = np.empty(0, np.float64)
        return cls(cols, comms, segments, 0)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    @property
    def depth(self) -> int:
        """Lazy levels under this batch's columns (0: every column is an array)."""
        return self.cols.depth if isinstance(self.cols, LazyColumns) else 0

    def make_concrete(self) -> OpBatch:
        """Make every column now (in place) and drop the references to the batches they came
        from; the batch itself is returned."""
        if isinstance(self.cols, LazyColumns):
            self.cols = self.cols.concrete()
        return self

    def _source(self) -> tuple[dict[str, np.ndarray] | LazyColumns, int]:
        """The columns a new lazy batch may read from, and their depth (made concrete first
        where another level would pass MAX_LAZY_DEPTH)."""
        if self.depth >= MAX_LAZY_DEPTH:
            self.make_concrete()
        return self.cols, self.depth

    def take(self, idx) -> OpBatch:
        """The ops at `idx` (an index array or a slice), columns gathered when used."""
        cols, depth = self._source()
        if isinstance(idx, slice):
            n = len(range(*idx.indices(self.n)))
        else:
            n = len(idx)
        return OpBatch(
            LazyColumns(lambda name: cols[name][idx], depth + 1), self.comms, self.segments, n
        )

    def concat(self, other: OpBatch) -> OpBatch:
        if not len(other):
            return self
        if not len(self):
            return other
        (a, depth_a), (b, depth_b) = self._source(), other._source()
        return OpBatch(
            LazyColumns(lambda name: np.concatenate((a[name], b[name])), max(depth_a, depth_b) + 1),
            self.comms,
            self.segments,
            self.n + other.n,
        )

    def comm(self, i: int) -> Comm:
        return self.comms.comms[int(self.cols["comm"][i])]

    def position(self, i: int):
        """The input position of op i (a LogPosition or a RingPosition)."""
        c = self.cols
        seg = int(c["pos_seg"][i])
        ring = int(c["ring_seq"][i])
        if seg < 0:
            return RingPosition(int(c["pos_offset"][i]))
        name, index = self.segments.segments[seg]
        return LogPosition(
            name,
            index,
            int(c["pos_offset"][i]),
            int(c["pos_record"][i]),
            None if ring == NONE else ring,
            int(c["pos_end"][i]),
        )

    def op(self, i: int) -> EngineOp:
        c = self.cols
        comm = self.comm(i)
        end_mono = int(c["end_mono"][i])
        peer, ring = int(c["peer"][i]), int(c["ring_seq"][i])
        return EngineOp(
            kind=KINDS[int(c["kind"][i])],
            func=FUNCS[int(c["func"][i])],
            comm_id=comm.comm_id,
            comm_name=comm.name,
            comm_nranks=comm.nranks,
            comm_nnodes=comm.nnodes,
            comm_rank=comm.rank,
            peer=None if peer == NONE else peer,
            seq=int(c["seq"][i]),
            size_bytes=int(c["size"][i]),
            issue_ns=int(c["issue"][i]),
            start_ns=int(c["start"][i]),
            end_ns=int(c["end"][i]),
            start_real_ns=int(c["start_real"][i]),
            end_real_ns=int(c["end_real"][i]),
            start_mono_ns=None if end_mono == NONE else int(c["start"][i]),
            end_mono_ns=None if end_mono == NONE else end_mono,
            duration_ns=int(c["duration"][i]),
            busbw_gbs=float(c["busbw"][i]),
            ring_seq=None if ring == NONE else ring,
            lost_before=int(c["lost_before"][i]),
            position=self.position(i),
            arrival=int(c["arrival"][i]),
            group_id=int(c["group_id"][i]),
            datatype=int(c["datatype"][i]),
            user_tag=int(c["user_tag"][i]),
        )

    def shape(self, i: int) -> OpShape:
        """What a role depends on, of op i (templates.role_of reads these fields)."""
        c = self.cols
        comm = self.comm(i)
        peer = int(c["peer"][i])
        return OpShape(
            FUNCS[int(c["func"][i])],
            comm.comm_id,
            comm.name,
            comm.nranks,
            comm.nnodes,
            comm.rank,
            None if peer == NONE else peer,
            int(c["size"][i]),
        )

    def ops(self) -> list[EngineOp]:
        return [self.op(i) for i in range(len(self))]

    def shapes(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct op shapes (communicator, function, size, peer): (the index of one op
        of each shape, each op's shape number). Roles depend on the shape only."""
        if self._shapes is None:
            c = self.cols
            self._shapes = native.shapes(c["comm"], c["func"], c["peer"], c["size"])
        return self._shapes


def from_engine_ops(ops: list[EngineOp], comms: CommTable, segments: SegmentTable) -> OpBatch:
    """Columns of EngineOps (ops decoded by the Python paths: NVIDIA logs, unusual lines)."""

    def col(values, dtype=np.int64):
        return np.fromiter(values, dtype, len(ops))

    def opt(v):
        return NONE if v is None else v

    positions = [op.position for op in ops]
    seg_ids: dict[tuple, int] = {}

    def seg(p) -> int:
        if not isinstance(p, LogPosition):
            return -1
        key = (p.segment, p.segment_index)
        if key not in seg_ids:
            seg_ids[key] = segments.add(*key)
        return seg_ids[key]

    cols = {
        "kind": col(KINDS.index(op.kind) for op in ops),
        "func": col(func_code(op.func) for op in ops),
        "comm": col(
            comms.index(
                Comm(op.comm_id, op.comm_name, op.comm_nranks, op.comm_nnodes, op.comm_rank)
            )
            for op in ops
        ),
        "peer": col(opt(op.peer) for op in ops),
        "seq": col(op.seq for op in ops),
        "size": col(op.size_bytes for op in ops),
        "issue": col(op.issue_ns for op in ops),
        "start": col(op.start_ns for op in ops),
        "end": col(op.end_ns for op in ops),
        "start_real": col(op.start_real_ns for op in ops),
        "end_real": col(op.end_real_ns for op in ops),
        "end_mono": col(opt(op.end_mono_ns) for op in ops),
        "duration": col(op.duration_ns for op in ops),
        "busbw": col((op.busbw_gbs for op in ops), np.float64),
        "ring_seq": col(opt(op.ring_seq) for op in ops),
        "lost_before": col(op.lost_before for op in ops),
        "pos_seg": col(seg(p) for p in positions),
        "pos_offset": col(
            p.byte_offset if isinstance(p, LogPosition) else getattr(p, "ring_seq", 0)
            for p in positions
        ),
        "pos_record": col(p.record_index if isinstance(p, LogPosition) else 0 for p in positions),
        "pos_end": col(p.end_offset if isinstance(p, LogPosition) else 0 for p in positions),
        "order": col(order_key(p) for p in positions),
        "arrival": np.zeros(len(ops), np.int64),
        "group_id": col(op.group_id for op in ops),
        "datatype": col(op.datatype for op in ops),
        "user_tag": col(op.user_tag for op in ops),
    }
    return OpBatch(cols, comms, segments)


SEGMENT_SHIFT = 40  # order key of a log position: segment index << 40 | byte offset


def order_key(position) -> int:
    if position is None:
        return 0
    segment, offset = position.order()
    return (segment << SEGMENT_SHIFT) | offset
