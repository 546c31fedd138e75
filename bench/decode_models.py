"""How fast the generated bindings decode what the Profiler writes (one core, this process).

Prints JSON lines {"bench","metric","value","unit"}:
- inspector-log lines through the generated msgspec model vs. the standard library's json
  (the reason the models are msgspec Structs: the Engine's budget is >= 1 M records/s/core);
- SHM op slots through the generated numpy dtype (the Agent's ingest path: >= 2 M records/s).
Timings are compared as ratios inside one run; absolute numbers vary with the machine.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgspec
import numpy as np

from comminsight_gen.abi import shm_v1
from comminsight_gen.models.inspector_log_v1 import InspectorLogRecord

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "contract-tests/fixtures/json/inspector-log/v1/valid/coll-allreduce.json"
N_LINES = 200_000
N_SLOTS = 1 << 20


def emit(metric: str, value: float, unit: str) -> None:
    print(
        json.dumps(
            {"bench": "decode_models", "metric": metric, "value": round(value, 3), "unit": unit}
        ),
        flush=True,
    )


def best_rate(fn, n: int, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def main() -> None:
    template = json.loads(SAMPLE.read_text())
    lines = []
    for i in range(N_LINES):
        template["coll_perf"]["coll_sn"] = i
        template["ci"]["ring_seq"] = i + 1
        lines.append(json.dumps(template, separators=(",", ":")).encode())
    blob = b"\n".join(lines)
    emit("inspector_log_line_bytes", len(blob) / N_LINES, "bytes")

    decoder = msgspec.json.Decoder(InspectorLogRecord)
    msgspec_rate = best_rate(lambda: [decoder.decode(line) for line in lines], N_LINES)
    stdlib_rate = best_rate(lambda: [json.loads(line) for line in lines], N_LINES)
    emit("inspector_log_msgspec_records_per_s", msgspec_rate, "records/s")
    emit("inspector_log_stdlib_json_records_per_s", stdlib_rate, "records/s")
    emit("inspector_log_msgspec_over_stdlib", msgspec_rate / stdlib_rate, "ratio")

    ring = np.zeros(N_SLOTS, dtype=shm_v1.OP_SLOT_DTYPE)
    ring["seq"] = np.arange(1, N_SLOTS + 1)
    ring["bytes"] = 1 << 20
    raw = ring.tobytes()

    def ingest() -> None:
        view = np.frombuffer(raw, dtype=shm_v1.OP_SLOT_DTYPE)
        ok = view["seq"] == np.arange(1, N_SLOTS + 1, dtype=np.uint64)
        int(view["bytes"][ok].sum())

    emit("shm_op_slot_numpy_records_per_s", best_rate(ingest, N_SLOTS), "records/s")


if __name__ == "__main__":
    main()
