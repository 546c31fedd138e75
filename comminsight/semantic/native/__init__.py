"""The Semantic Engine's C core (engine_core.c), loaded with cffi, and numpy views of its rows.

`make build-engine` compiles engine_core.c into build/engine/libciengine.so, where a
development checkout loads it; the wheel carries it beside this file (setup.py), where an
installed package loads it. The functions here take and fill numpy arrays; what each C
function does is said in engine_core.c.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import NamedTuple

import cffi
import numpy as np

from comminsight_gen.abi import engine_core_v1 as abi

_HERE = Path(__file__).resolve().parent
_CHECKOUT = _HERE.parents[2]
# `make build-engine`'s output in a development checkout: build outputs stay out of the
# source tree. It wins over a library beside this file, which in a checkout is a stale copy.
CHECKOUT_LIBRARY = _CHECKOUT / "build" / "engine" / "libciengine.so"
# Where an installed wheel carries it (or a copy of the package with it compiled beside).
PACKAGED_LIBRARY = _HERE / "libciengine.so"


def _find_library() -> Path:
    """The library to load; with none built, the path the missing-library error should name
    (the checkout's build when this is a checkout)."""
    if CHECKOUT_LIBRARY.is_file():
        return CHECKOUT_LIBRARY
    if PACKAGED_LIBRARY.is_file() or not (_CHECKOUT / "Makefile").is_file():
        return PACKAGED_LIBRARY
    return CHECKOUT_LIBRARY


LIBRARY = _find_library()


NONE = np.iinfo(np.int64).min  # an absent integer (JSON null, or no value)
LINE_OP, LINE_OTHER = int(abi.LineKind.OP), int(abi.LineKind.OTHER)

# Decision bits (ci_decide) and where an op is in the cycle (the engine-core protocol's).
B_BEGIN, B_END, B_MASK = int(abi.Decision.BEGIN), int(abi.Decision.END), abi.BOUNDARY_MASK
IN_STEP, UNEXPECTED, MICRO = (int(abi.Decision[k]) for k in ("IN_STEP", "UNEXPECTED", "MICRO"))
WHERE = {
    None: int(abi.Where.NONE),
    "start": int(abi.Where.START),
    "in": int(abi.Where.IN),
    "off": int(abi.Where.OFF),
}

# ci_scan's columns, one entry per line: the engine-core protocol's columns struct, field by
# field (its numpy format)
LINE_COLUMNS = {name: np.dtype(fmt) for name, fmt in abi.COLUMNS_POINTEES.items()}
# ci_place's Step rows
STEP_DTYPE = abi.STEP_DTYPE


class NativeEngineMissing(RuntimeError):
    pass


_ffi = cffi.FFI()
_ffi.cdef(abi.CDEF)
_lib = None


def lib():
    global _lib
    if _lib is None:
        if not LIBRARY.exists():
            raise NativeEngineMissing(
                f"{LIBRARY} is missing: build the Semantic Engine's C core with `make build-engine`"
            )
        _lib = _ffi.dlopen(str(LIBRARY))
        if _ffi.sizeof("ci_engine_step_v1_t") != STEP_DTYPE.itemsize:
            raise NativeEngineMissing(f"{LIBRARY}: ci_engine_step_v1_t does not match STEP_DTYPE")
    return _lib


def _ptr(ctype: str, array: np.ndarray):
    """A C pointer to a contiguous array's data (from_buffer: no ctypes object per call)."""
    assert array.flags.c_contiguous
    return _ffi.from_buffer(_array_type(ctype), array)


@functools.cache
def _array_type(ctype: str):
    """The cffi array type of a pointer type ("int64_t*" -> int64_t[]), parsed once."""
    return _ffi.typeof(ctype[:-1] + "[]")


class InternTable:
    """Distinct byte strings met by ci_scan (headers, function names) and their indices."""

    def __init__(self, cap: int = 4096, arena: int = 1 << 20) -> None:
        raw = lib().ci_intern_new(cap, arena)
        if raw == _ffi.NULL:
            raise MemoryError("ci_intern_new")
        self._table = _ffi.gc(raw, lib().ci_intern_free)
        self.seen = 0  # entries already handed out by `new_entries`

    def new_entries(self) -> list[bytes]:
        """The entries added since the last call, in index order."""
        count = lib().ci_intern_count(self._table)
        out = []
        n = _ffi.new("int32_t*")
        for i in range(self.seen, count):
            p = lib().ci_intern_bytes(self._table, i, n)
            out.append(bytes(_ffi.buffer(p, n[0])))
        self.seen = count
        return out


SCAN_CHUNK = 1 << 15  # lines per ci_scan call, at least
# Bytes per line assumed when sizing the columns for all of a buffer's lines at once (op lines
# are 500-1000 bytes): one call, no concatenation. Room for lines never written is never
# touched, so it costs address space, not memory.
SCAN_LINE_BYTES = 256


class Lines(dict):
    """ci_scan's output: a column (numpy array) per LINE_COLUMNS name, one entry per line."""

    def __len__(self) -> int:
        return len(self["start"])


class ScanScratch:
    """Columns one scan after another writes into (scan's `scratch`): memory written once
    is written again, not mapped afresh for every segment (a page fault per 4 KiB)."""

    def __init__(self) -> None:
        self.columns: dict[str, np.ndarray] = {}

    def take(self, size: int) -> dict[str, np.ndarray]:
        if not self.columns or len(self.columns["start"]) < size:
            self.columns = {name: np.empty(size, t) for name, t in LINE_COLUMNS.items()}
        return self.columns


def scan(
    data: bytes,
    pos: int,
    headers: InternTable,
    funcs: InternTable,
    trusted: bool = False,
    scratch: ScanScratch | None = None,
) -> tuple[Lines, int]:
    """The complete lines of data[pos:] as columns, and where the rest begins.
    `trusted`: the segment's seal checksum matched (its lines are the writer's own). With
    `scratch`, the columns are views of its arrays, valid until its next scan."""
    parts = []
    next_pos = _ffi.new("int64_t*")
    buf = _ffi.from_buffer(data)
    while True:
        size = max(SCAN_CHUNK, (len(data) - pos) // SCAN_LINE_BYTES + 1)
        if scratch is not None and not parts:
            chunk = scratch.take(size)
            size = len(chunk["start"])
        else:
            chunk = {name: np.empty(size, dtype) for name, dtype in LINE_COLUMNS.items()}
        n = lib().ci_scan(
            buf, len(data), pos, _struct("ci_engine_columns_v1_t*", chunk), size, headers._table,
            funcs._table, int(trusted), next_pos,
        )  # fmt: skip
        parts.append({name: column[:n] for name, column in chunk.items()})
        pos = next_pos[0]
        if n < size:
            break
    if len(parts) == 1:
        return Lines(parts[0]), pos
    return Lines({k: np.concatenate([p[k] for p in parts]) for k in LINE_COLUMNS}), pos


def _struct(ctype: str, columns: dict[str, np.ndarray]):
    """A C struct of pointers to the columns' data, one field per column (the arrays must
    outlive its use)."""
    out = _ffi.new(ctype)
    for name, column in columns.items():
        kind = "double*" if column.dtype == np.float64 else f"int{column.itemsize * 8}_t*"
        setattr(out, name, _ptr(kind, column))
    return out


def gpu_offset(rows: Lines, idx: np.ndarray) -> int | None:
    """The GPU-minus-host clock offset (op_times.py) of the lines idx; None when none of
    them is kernel-timed."""
    idx = np.ascontiguousarray(idx, np.int64)
    out = _ffi.new("int64_t*")
    found = lib().ci_gpu_offset(
        len(idx), _ptr("int64_t*", idx), _struct("ci_engine_columns_v1_t*", rows), out
    )
    return int(out[0]) if found else None


# An op batch's columns, as ci_op_columns fills them (op_batch.COLUMNS, in its order).
OP_COLUMNS = (
    "kind", "func", "comm", "peer", "seq", "size", "issue", "start", "end", "start_real",
    "end_real", "end_mono", "duration", "busbw", "ring_seq", "lost_before", "pos_seg",
    "pos_offset", "pos_record", "pos_end", "order", "arrival", "group_id", "datatype",
    "user_tag",
)  # fmt: skip
if set(OP_COLUMNS) != set(abi.OPS_POINTEES):  # a protocol change the Python side missed
    raise ImportError(f"the engine-core ops struct's fields are not {OP_COLUMNS}")
_OP_DTYPES = {k: np.dtype(abi.OPS_POINTEES[k]) for k in OP_COLUMNS}


def op_columns(
    rows: Lines,
    idx: np.ndarray,
    comm_of_header: np.ndarray,
    code_of_func: np.ndarray,
    first_record: int,
    to_real: int,
    offset: int | None,
    seg: int,
    order_base: int,
) -> dict[str, np.ndarray]:
    """The op columns of scanned op lines idx (see ci_op_columns)."""
    n = len(idx)
    idx = np.ascontiguousarray(idx, np.int64)
    out = {k: np.empty(n, dtype) for k, dtype in _OP_DTYPES.items()}
    lib().ci_op_columns(
        n,
        _ptr("int64_t*", idx),
        _struct("ci_engine_columns_v1_t*", rows),
        _ptr("int64_t*", np.ascontiguousarray(comm_of_header, np.int64)),
        _ptr("int64_t*", np.ascontiguousarray(code_of_func, np.int64)),
        first_record,
        to_real,
        int(offset is not None),
        offset or 0,
        seg,
        order_base,
        _struct("ci_engine_ops_v1_t*", out),
    )
    return out


FIND_CHUNK = 64  # offsets per ci_find_all call


def find_all(data, needle: bytes) -> list[int]:
    """Where `needle` occurs in data (bytes or a mapping), without overlaps, in order. It is
    searched by its first and last bytes together: a needle whose ends are frequent bytes of
    the data (a JSON quote) is slower to find."""
    found: list[int] = []
    buf = _ffi.from_buffer(data)
    out = np.empty(FIND_CHUNK, np.int64)
    pos = 0
    while True:
        k = lib().ci_find_all(
            buf, len(data), pos, needle, len(needle), _ptr("int64_t*", out), FIND_CHUNK
        )
        found += out[:k].tolist()
        if k < FIND_CHUNK:
            return found
        pos = found[-1] + len(needle)


def reorder(
    issue: np.ndarray, arrival: np.ndarray, n_held: int, window: int
) -> tuple[np.ndarray, np.ndarray]:
    """(released in release order, still held) indices; see ci_reorder."""
    n = len(issue)
    issue = np.ascontiguousarray(issue, np.int64)
    arrival = np.ascontiguousarray(arrival, np.int64)
    released = np.empty(n, np.int64)
    held = np.empty(window + 1, np.int64)
    n_held_out = _ffi.new("int64_t*")
    k = lib().ci_reorder(
        _ptr("int64_t*", issue),
        _ptr("int64_t*", arrival),
        n_held,
        n,
        window,
        _ptr("int64_t*", released),
        _ptr("int64_t*", held),
        n_held_out,
    )
    if k < 0:
        raise MemoryError("ci_reorder")
    return released[:k], held[: n_held_out[0]]


def decide(
    role: np.ndarray,
    ckey: np.ndarray,
    cycle: np.ndarray,
    table: np.ndarray | None,
    nroles: int,
    state: int,
    cycle_pos: int,
    started: bool,
    period: bool,
) -> tuple[np.ndarray, int, int, bool]:
    """(decision bits per op, state, cycle position, started) after the ops."""
    n = len(role)
    out = np.empty(n, np.uint8)
    role = np.ascontiguousarray(role, np.int32)
    ckey = np.ascontiguousarray(ckey, np.int32)
    cycle = np.ascontiguousarray(cycle, np.int32)
    if table is None:
        table = np.zeros(4, np.int32)
    io = _ffi.new("int32_t[3]", [state, cycle_pos, int(started)])
    lib().ci_decide(
        n,
        _ptr("int32_t*", role),
        _ptr("int32_t*", ckey),
        _ptr("int32_t*", cycle),
        len(cycle),
        io + 1,
        _ptr("int32_t*", table),
        nroles,
        io,
        int(period),
        io + 2,
        _ptr("uint8_t*", out),
    )
    return out, io[0], io[1], bool(io[2])


class Placement:
    """ci_place's output: Steps (STEP_DTYPE), role rows [step, role], each op's Step."""

    def __init__(self, steps, role_count, role_time, role_bytes, role_max, role_bw, step_of):
        self.steps = steps
        self.role_count = role_count
        self.role_time = role_time
        self.role_bytes = role_bytes
        self.role_max = role_max
        self.role_bw = role_bw
        self.step_of = step_of


def place(
    dec: np.ndarray,
    role: np.ndarray,
    nroles: int,
    cols: dict[str, np.ndarray],
    open_step: np.ndarray | None,
    open_roles: tuple[np.ndarray, ...] | None,
) -> Placement:
    """Ops into Steps; `open_step` (one STEP_DTYPE row) and `open_roles` (count, time, bytes,
    max, bw rows of nroles) continue the Step left open before."""
    n = len(dec)
    dec = np.ascontiguousarray(dec, np.uint8)
    # a Step closes only at a boundary op (begin or end): room for those and the open one
    m = int(np.count_nonzero(dec & B_MASK)) + 2
    steps = np.zeros(m, STEP_DTYPE)
    shape = (m, max(1, nroles))
    counts, times, nbytes, maxes = (np.zeros(shape, np.int64) for _ in range(4))
    bws = np.zeros(shape, np.float64)
    if open_step is not None:
        steps[0] = open_step
        for dst, src in zip((counts, times, nbytes, maxes, bws), open_roles, strict=True):
            dst[0, : len(src)] = src
    step_of = np.empty(n, np.int64)
    c = {
        k: np.ascontiguousarray(cols[k])
        for k in ("duration", "size", "busbw", "lost_before", "end_real", "end_mono")
    }
    k = lib().ci_place(
        n,
        _ptr("uint8_t*", dec),
        _ptr("int32_t*", np.ascontiguousarray(role, np.int32)),
        max(1, nroles),
        _ptr("int64_t*", c["duration"]),
        _ptr("int64_t*", c["size"]),
        _ptr("double*", c["busbw"]),
        _ptr("int64_t*", c["lost_before"]),
        _ptr("int64_t*", c["end_real"]),
        _ptr("int64_t*", c["end_mono"]),
        int(open_step is not None),
        _ptr("ci_engine_step_v1_t*", steps),
        _ptr("int64_t*", counts),
        _ptr("int64_t*", times),
        _ptr("int64_t*", nbytes),
        _ptr("int64_t*", maxes),
        _ptr("double*", bws),
        _ptr("int64_t*", step_of),
    )
    return Placement(steps[:k], counts, times, nbytes, maxes, bws, step_of)


def shapes(
    comm: np.ndarray, func: np.ndarray, peer: np.ndarray, size: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(the first op of each distinct shape, each op's shape number); see ci_shapes."""
    n = len(comm)
    cols = [np.ascontiguousarray(a, np.int64) for a in (comm, func, peer, size)]
    shape = np.empty(n, np.int64)
    first = np.empty(max(1, n), np.int64)
    k = lib().ci_shapes(n, *(_ptr("int64_t*", a) for a in cols), _ptr("int64_t*", shape),
                        _ptr("int64_t*", first))  # fmt: skip
    if k < 0:
        raise MemoryError("ci_shapes")
    return first[:k], shape


def cut_decide(step: np.ndarray, tail: int, last_step: int) -> tuple[np.ndarray, list[int], int]:
    """(decision bits per op, the Steps begun, the latest Step seen) of a job cut's Step per
    op; see ci_cut_decide."""
    n = len(step)
    step = np.ascontiguousarray(step, np.int64)
    out = np.empty(n, np.uint8)
    begun = np.empty(n, np.int64)
    latest = _ffi.new("int64_t*", last_step)
    k = lib().ci_cut_decide(
        n, _ptr("int64_t*", step), tail, latest, _ptr("uint8_t*", out), _ptr("int64_t*", begun)
    )
    return out, begun[:k].tolist(), int(latest[0])


class Spans(NamedTuple):
    """ci_spans' output, one entry per (Step, cell) in that order."""

    step: np.ndarray
    cell: np.ndarray  # kind * ncomm + the communicator's code
    lo: np.ndarray
    hi: np.ndarray
    count: np.ndarray


def spans(
    step_of: np.ndarray,
    kind: np.ndarray,
    comm: np.ndarray,
    comm_code: np.ndarray,
    ncomm: int,
    seq: np.ndarray,
) -> Spans:
    """Each Step's seq span per (kind, communicator code); see ci_spans."""
    n = len(step_of)
    cols = [np.ascontiguousarray(a, np.int64) for a in (step_of, kind, comm, comm_code, seq)]
    out = [np.empty(n, np.int64) for _ in Spans._fields]
    m = lib().ci_spans(
        n, *(_ptr("int64_t*", a) for a in cols[:4]), ncomm, _ptr("int64_t*", cols[4]),
        *(_ptr("int64_t*", a) for a in out),
    )  # fmt: skip
    if m == -1:
        raise MemoryError("ci_spans")
    if m == -2:
        raise ValueError("ci_spans: a Step's ops are not one stretch (step_of goes back)")
    return Spans(*(a[:m] for a in out))


def window_medians(series: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The median of series[start[q]:end[q]] for each q (windows of 1..4096 values)."""
    series = np.ascontiguousarray(series, np.float64)
    start = np.ascontiguousarray(start, np.int64)
    end = np.ascontiguousarray(end, np.int64)
    out = np.empty(len(start), np.float64)
    rc = lib().ci_window_medians(
        _ptr("double*", series), len(start), _ptr("int64_t*", start), _ptr("int64_t*", end),
        _ptr("double*", out),
    )  # fmt: skip
    if rc != 0:
        raise ValueError("ci_window_medians: a window of no value or of more than 4096")
    return out


def history_medians(
    prior: np.ndarray,
    width: int,
    asked: np.ndarray,
    learns: np.ndarray,
    values: np.ndarray,
    min_history: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(median, size) of a bounded history just before each Step; see ci_history_medians."""
    k = len(asked)
    prior = np.ascontiguousarray(prior, np.float64)
    asked = np.ascontiguousarray(asked, np.uint8)
    learns = np.ascontiguousarray(learns, np.uint8)
    values = np.ascontiguousarray(values, np.float64)
    med = np.empty(k, np.float64)
    size = np.empty(k, np.int64)
    rc = lib().ci_history_medians(
        _ptr("double*", prior), len(prior), width, k, _ptr("uint8_t*", asked),
        _ptr("uint8_t*", learns), _ptr("double*", values), min_history, _ptr("double*", med),
        _ptr("int64_t*", size),
    )  # fmt: skip
    if rc == -1:
        raise MemoryError("ci_history_medians")
    if rc != 0:
        raise ValueError(f"ci_history_medians: a window of {width} values holding {len(prior)}")
    return med, size


def longest_runs(codes: np.ndarray, periods: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(run, start) per period; see ci_longest_runs. Every template tries the same probe of
    each GPU, and GPUs of one job issue alike: the same codes come again and again, so the
    answers for the latest few short probes are kept."""
    codes = np.ascontiguousarray(codes, np.int64)
    periods = np.ascontiguousarray(periods, np.int64)
    if len(codes) > RUNS_KEPT_CODES:
        return _longest_runs(codes, periods)
    runs, starts = _kept_longest_runs(codes.tobytes(), periods.tobytes())
    return runs.copy(), starts.copy()


RUNS_KEPT_CODES = 4096  # probes up to this long have their longest runs kept (16 of them)


@functools.lru_cache(maxsize=16)
def _kept_longest_runs(codes: bytes, periods: bytes) -> tuple[np.ndarray, np.ndarray]:
    return _longest_runs(np.frombuffer(codes, np.int64), np.frombuffer(periods, np.int64))


def _longest_runs(codes: np.ndarray, periods: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    runs = np.empty(len(periods), np.int64)
    starts = np.empty(len(periods), np.int64)
    lib().ci_longest_runs(
        _ptr("int64_t*", codes), len(codes), _ptr("int64_t*", periods), len(periods),
        _ptr("int64_t*", runs), _ptr("int64_t*", starts),
    )  # fmt: skip
    return runs, starts
