"""Which ring records a Profiler could have written: the fields of an op slot that have a range.

A slot whose seq and kind are right may still hold anything (a forger's bytes, a corrupted
page): an op code no Profiler sends, a rank outside its communicator, a time years from the
region's clock. Believed, such a record turns into an ingest lag of 10^13 ms or an engine
error far from its cause, so each batch is checked here before anything uses it; the records
that fail are dropped and counted by the first field that fails (`SlotRejects`).
Enum codes must be ones this Agent knows: a slot is this ABI's own layout, written by the
Profiler built with it (unlike the FIFO's events, whose codes may come from a newer one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from comminsight_gen.abi import shm_v1

_KINDS = [int(k) for k in shm_v1.RecordKind if int(k) != shm_v1.RecordKind.NONE]
_OPS = [int(shm_v1.RecordKind.COLL), int(shm_v1.RecordKind.P2P)]
_CODES = (
    ("func", max(int(c) for c in shm_v1.Func)),
    ("datatype", max(int(c) for c in shm_v1.Datatype)),
    ("algo", max(int(c) for c in shm_v1.Algo)),
    ("proto", max(int(c) for c in shm_v1.Proto)),
    ("timing_source", max(int(c) for c in shm_v1.TimingSource)),
)
_TIMES = ("host_start_mono_ns", "host_stop_mono_ns", "complete_mono_ns", "api_start_mono_ns")
MAX_SIZE = 1 << 50  # bytes or elements in one op: a petabyte is no NCCL call
# how far a record's monotonic time may lie before its region was created, or after now
# (0 means not measured)
CLOCK_SLACK_NS = 60 * 1_000_000_000


@dataclass
class SlotRejects:
    """Ring records dropped because a field is out of its range: all, by field, the latest."""

    total: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)
    latest: str | None = None  # "ring seq N: <field> <value> ..." of the latest rejected batch


def check_slots(
    records: np.ndarray, start_mono_ns: int, now_mono_ns: int, rejects: SlotRejects
) -> np.ndarray:
    """The records whose fields are in range (the batch itself when all are, the common
    case); the others are counted in `rejects`."""
    if not len(records):
        return records
    ok = np.ones(len(records), dtype=bool)
    first: tuple[int, str] | None = None

    def require(reason: str, good: np.ndarray, value: str) -> None:
        nonlocal ok, first
        bad = ok & ~good
        n = int(np.count_nonzero(bad))
        if not n:
            return
        rejects.by_reason[reason] = rejects.by_reason.get(reason, 0) + n
        i = int(np.argmax(bad))
        if first is None or i < first[0]:
            first = (i, f"{reason} {_value(records[i], value)}")
        ok &= good

    kind = records["kind"]
    require("kind", np.isin(kind, _KINDS), "kind")
    op = np.isin(kind, _OPS)
    for name, top in _CODES:
        require(name, ~op | (records[name] <= top), name)
    nranks, rank, peer = records["nranks"], records["rank"], records["peer"]
    require("rank", ~op | ((nranks >= 1) & (rank >= 0) & (rank < nranks)), "rank")
    require("peer", ~op | (peer == shm_v1.NO_RANK) | ((peer >= 0) & (peer < nranks)), "peer")
    require("size", ~op | ((records["count"] < MAX_SIZE) & (records["bytes"] < MAX_SIZE)), "bytes")
    low = np.uint64(max(start_mono_ns - CLOCK_SLACK_NS, 0))
    high = np.uint64(now_mono_ns + CLOCK_SLACK_NS)
    for name in _TIMES:
        t = records[name]
        require("time", (t == 0) | ((t >= low) & (t <= high)), name)
    if ok.all():
        return records
    rejects.total += int(len(records) - np.count_nonzero(ok))
    if first is not None:
        seq = int(records["seq"][first[0]])
        rejects.latest = f"ring seq {seq}: {first[1]}"
    return records[ok]


def _value(record, name: str) -> str:
    if name == "rank":
        return f"{int(record['rank'])} of nranks {int(record['nranks'])}"
    if name == "peer":
        return f"{int(record['peer'])} of nranks {int(record['nranks'])}"
    if name == "bytes":
        return f"count {int(record['count'])}, bytes {int(record['bytes'])}"
    if name in _TIMES:
        return f"({name} {int(record[name])} ns is not within the region's clock)"
    return str(int(record[name]))
