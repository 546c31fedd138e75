"""Does the Profiler record each process's GPU UUID, as DCGM and nvidia-smi name the GPU, and
its job id, so that the Agent's /metrics can be joined with DCGM's series?

Launch (on the GPU machine, one GPU is enough; the plugin built by `make build-profiler`):

    PYTHONPATH=generated/python:. COMMINSIGHT_HOME=$(mktemp -d) COMMINSIGHT_AGENT_AUTOSTART=0 \
    NCCL_PROFILER_PLUGIN=$PWD/dist/libnccl-profiler-comminsight.so SLURM_JOB_ID=4242 \
    python -m torch.distributed.run --nproc_per_node=2 --rdzv-backend=c10d \
        --rdzv-endpoint=127.0.0.1:29560 bench/gpu/uuid_label_check.py

Two ranks on GPU 0 (NCCL_HOSTID apart, as NCCL wants one rank of a host per GPU; a
single-rank communicator publishes no ops), torchrun without --rdzv-id, so its run id is its
default "none": init_process_group("nccl") (PyTorch loads the CUDA runtime and driver, as in
training), a few all-reduces, then, while the processes still run, each rank's SHM region is
read with the generated numpy dtypes: header.cuda_uuid and every comm
row's cuda_uuid must equal `nvidia-smi --query-gpu=uuid -i <the physical GPU>` and torch's
own device UUID; header.job_id must be EXPECT_JOB_ID, else SLURM_JOB_ID (torchrun's default
run id "none" does not count), and header.rank the process's RANK.
Where the Agent's Python dependencies are installed the Agent's ingest pass reads the region
too and its /metrics sample must carry the same UUID label.

Prints JSON lines {"bench":"gpu_uuid_label","metric",...}; exits 1 when a check fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from comminsight_gen.abi import shm_v1

BENCH = "gpu_uuid_label"


def emit(metric: str, value, unit: str = "") -> None:
    line = {"bench": BENCH, "rank": int(os.environ.get("RANK", 0)), "metric": metric}
    line.update(value=value, unit=unit)
    print(json.dumps(line, separators=(",", ":")), flush=True)


def uuid_text(raw) -> str:
    b = bytes(raw)
    if not any(b):
        return ""
    h = b.hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def nvidia_smi_uuid(device: int) -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    physical = visible.split(",")[device] if visible else str(device)
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader", "-i", physical],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def read_region(home: Path) -> tuple[np.void, np.ndarray]:
    (path,) = sorted((home / "shms").glob(f"*-{os.getpid()}-*.shm"))  # this process's
    data = path.resolve().read_bytes()
    header = np.frombuffer(data, shm_v1.HEADER_DTYPE, 1)[0]
    rows = np.frombuffer(
        data,
        shm_v1.COMM_ENTRY_DTYPE,
        int(header["comm_capacity"]),
        int(header["comm_table_offset"]),
    )
    return header, rows[rows["state"] != shm_v1.CommState.FREE]


def agent_label(home: Path) -> str | None:
    """The UUID label of the Agent's comminsight_ops_total sample, or None without the
    Agent's dependencies."""
    try:
        from prometheus_client.parser import text_string_to_metric_families

        from comminsight.agent.metrics.node import NodeMetrics, update_from_producers
        from comminsight.agent.receivers.producers import ProducerSet
    except ImportError as e:
        emit("agent_ingest_skipped", str(e))
        return None
    producers = ProducerSet(home)
    metrics = NodeMetrics()
    now = time.monotonic_ns()
    update_from_producers(metrics, producers, producers.poll(now), now)
    text = metrics.render().decode()
    emit("agent_producers", len(producers.producers))
    emit("agent_records", producers.counters.records)
    emit("agent_refused", dict(producers.counters.refused))
    emit("agent_slots_rejected", dict(producers.counters.slots_rejected_by_reason))
    producers.close()
    samples = [
        s
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "comminsight_ops_total"
    ]
    emit(
        "agent_ops_series",
        sorted(
            [s.labels[k] for k in ("job_id", "host", "rank", "gpu", "UUID", "comm", "op_type")]
            + [s.value]
            for s in samples
        ),
    )
    return ",".join(sorted({s.labels["UUID"] for s in samples}))


def main() -> int:
    home = Path(os.environ["COMMINSIGHT_HOME"])
    rank = int(os.environ["RANK"])
    os.environ.setdefault("NCCL_HOSTID", f"host-{rank}")  # every rank on GPU 0
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
    x = torch.ones(1 << 20, device="cuda")
    for _ in range(8):
        dist.all_reduce(x)
    dist.barrier()
    torch.cuda.synchronize()
    time.sleep(0.5)  # the rings' records are complete; the regions are read while we run
    header, rows = read_region(home)
    want = nvidia_smi_uuid(0)
    torch_uuid = str(torch.cuda.get_device_properties(0).uuid)
    got = uuid_text(header["cuda_uuid"])
    rows_got = sorted({uuid_text(r["cuda_uuid"]) for r in rows})
    job = header["job_id"].split(b"\0", 1)[0].decode()
    emit("nvidia_smi_uuid", want)
    emit("torch_uuid", torch_uuid)
    emit("header_cuda_device", int(header["cuda_device"]))
    emit("header_cuda_uuid", got)
    emit("comm_rows_cuda_uuid", rows_got)
    emit("header_job_id", job)
    ok = got == want and rows_got == [want] and want.endswith(torch_uuid.removeprefix("GPU-"))
    ok = ok and job == os.environ.get("EXPECT_JOB_ID", os.environ.get("SLURM_JOB_ID", ""))
    ok = ok and int(header["rank"]) == rank
    emit("torchelastic_run_id", os.environ.get("TORCHELASTIC_RUN_ID", ""))
    label = agent_label(home) if rank == 0 else None
    if label is not None:
        emit("agent_uuid_label", label)
        ok = ok and label == want
    dist.barrier()  # the other rank's region stays live until rank 0 has read it
    dist.destroy_process_group()
    emit("pass", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
