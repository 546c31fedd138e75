"""The ground truth: per rank, a JSON-lines file of everything the simulated NCCL did.

`rank-<R>.jsonl` in the run directory, one object per line, each with a "kind":

- `run`    first line: workload, rank, world_size, pid, abi, plugin, seed, time_scale, and
           gpu_tick_offset_ns (GPU tick = CLOCK_MONOTONIC ns + this offset, for this rank)
- `comm`   a communicator was initialized: comm_id (16 hex digits), name, role, nranks, rank,
           nnodes, init_ns, init_result
- `op`     one op this rank issued (written once its fate is known): op_index, comm_id, rank
           (in the communicator), func, seq (null for Send/Recv), count, datatype, bytes (as
           NCCL's Coll/P2p descriptor has them: AllGather/Broadcast in ncclInt8), api_count,
           api_datatype, root, peer, algo, proto, n_channels, n_warps, step, phase,
           host_start_ns / host_stop_ns (around the Coll/P2p start/stop calls), gpu_start_tick
           / gpu_end_tick (the KernelCh pTimer values; end null if it never finished),
           kernel_ch_events, completed, mismatch (null, or what differed from the peers),
           group (the rank's count of its NCCL groups, from 0, for an op issued inside
           ncclGroupStart/End with others; null for an op issued alone)
- `step`   a training step: step, warmup, first_op, last_op (op_index), start_ns, end_ns,
           completed
- `fault`  a fault this rank applied: fault, spec, op_index, comm_id, func, at_ns
- `comm_finalize` finalize was called: comm_id, finalize_ns, aborted
- `end`    last line: status (done | aborted | left: a `leave` fault), ops_issued,
           ops_completed, nonzero_returns

Times are CLOCK_MONOTONIC ns (the host clock the plugin reads too). A rank that died has no
`end` line.
"""

from __future__ import annotations

import json
import os
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

FORMAT_VERSION = 1
# A long run's truth is tens of thousands of lines; msgspec decodes them several times faster
# than json into the same dicts. What it refuses (NaN and Infinity as json.dumps writes them,
# integers past 64 bits) json.loads decodes, so every file reads as json reads it.
_DECODE = msgspec.json.Decoder().decode
# NaN and Infinity would be written as null: the simulator's records hold none
_ENCODE = msgspec.json.Encoder().encode


def truth_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank-{rank:05d}.jsonl"


class GroundTruthWriter:
    """Appends records from any thread; each line is flushed so a killed rank loses nothing."""

    def __init__(self, path: Path):
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        self._lock = threading.Lock()

    def write(self, kind: str, **fields) -> None:
        # one write per line, nothing buffered; msgspec encodes several times faster than json
        # (every op of every simulated rank passes here)
        line = _ENCODE({"kind": kind, **fields}) + b"\n"
        with self._lock:
            if self._fd < 0:
                raise ValueError("write to a closed ground-truth file")
            done = 0
            while done < len(line):
                done += os.write(self._fd, line[done:])

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


@dataclass
class RankTruth:
    rank: int
    records: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))

    @property
    def run(self) -> dict:
        return self.records["run"][0]

    @property
    def ops(self) -> list[dict]:
        return sorted(self.records["op"], key=lambda r: r["op_index"])

    @property
    def end(self) -> dict | None:
        ends = self.records["end"]
        return ends[0] if ends else None

    def of(self, kind: str) -> list[dict]:
        return self.records[kind]


def read_rank_truth(path: Path, rank: int) -> RankTruth:
    truth = RankTruth(rank)
    if path.exists():
        for line in path.read_bytes().splitlines():
            if line.strip():
                try:
                    record = _DECODE(line)
                except msgspec.DecodeError:
                    record = json.loads(line)
                truth.records[record["kind"]].append(record)
    return truth


def read_ground_truth(run_dir: Path | str, world: int | None = None) -> list[RankTruth]:
    """Every rank's ground truth, by rank (world read from config.json when not given)."""
    run_dir = Path(run_dir)
    if world is None:
        world = json.loads((run_dir / "config.json").read_text())["ranks"]
    return [read_rank_truth(truth_path(run_dir, r), r) for r in range(world)]
