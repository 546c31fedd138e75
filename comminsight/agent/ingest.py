"""The Agent's ingest pass: SHM rings -> metrics, the recent-ops window and the engine hook.

One `NodeIngest.run_pass()` reads every Profiler's new records (ProducerSet), folds them into
the Prometheus state (NodeMetrics) and hands the completed Coll/P2P ops on, per process and so
per GPU, to the recent-ops window of the API and to the Semantic Engine hook. The service runs
it every poll; bench/agent_ingest.py measures exactly this, so the benchmark is the Agent's
own path, not a copy of it.
"""

from __future__ import annotations

import numpy as np

from comminsight.agent.engine_hook import EngineHook, GpuStream
from comminsight.agent.metrics import NodeMetrics, update_from_producers
from comminsight.agent.producers import Batch, Producer, ProducerSet
from comminsight.agent.recent_ops import Origin, RecentOps
from comminsight.agent.snapshot import rank_or_none
from comminsight.semantic.shm_input import CommInfo
from comminsight.shm_reader import op_records, record_text
from comminsight_gen.abi import shm_v1


class NodeIngest:
    def __init__(
        self,
        producers: ProducerSet,
        metrics: NodeMetrics,
        recent_ops: RecentOps,
        engine: EngineHook,
        node_name: str,
    ) -> None:
        self.producers = producers
        self.metrics = metrics
        self.recent_ops = recent_ops
        self.engine = engine
        self.node_name = node_name
        self._finished: set = set()  # producers whose end the engine was told of

    def run_pass(self, now_mono_ns: int, retire_after_ns: int = 0) -> list[Batch]:
        batches = self.producers.poll(now_mono_ns, retire_after_ns=retire_after_ns)
        update_from_producers(self.metrics, self.producers, batches, now_mono_ns)
        fed = set()
        for batch in batches:
            ops = op_records(batch.records)
            if len(ops):
                self._hand_on(batch.producer, ops)
                fed.add(batch.producer.path)
        mapped = self.producers.producers.values()
        self.recent_ops.set_live({(p.pid, int(p.region.header["start_real_ns"])) for p in mapped})
        for producer in mapped:
            # gone and drained: the engine can close the GPU's last Step now rather than at
            # retirement, a minute later (once per process)
            if (
                producer.gone_since_mono_ns is not None
                and producer.path not in fed
                and producer.path not in self._finished
            ):
                self._finished.add(producer.path)
                self.engine.finished(self.gpu_of(producer))
        self._finished &= {p.path for p in mapped}  # retired files leave the set
        return batches

    def gpu_of(self, producer: Producer) -> GpuStream:
        h = producer.region.header
        device = int(h["cuda_device"])
        return GpuStream(
            self.node_name,
            producer.pid,
            int(h["start_real_ns"]),
            rank_or_none(int(h["rank"])),
            device if device >= 0 else None,
            start_mono_ns=int(h["start_mono_ns"]),
            local_rank=rank_or_none(int(h["local_rank"])),
            job_id=record_text(h["job_id"]) or None,
            shm_file=producer.path.name,
        )

    def _hand_on(self, producer: Producer, ops: np.ndarray) -> None:
        gpu = self.gpu_of(producer)
        self.recent_ops.add(
            Origin(gpu.pid, gpu.global_rank, self.node_name, gpu.start_real_ns, gpu.start_mono_ns),
            ops,
        )
        self.engine.feed(gpu, ops, comm_infos(producer))


def comm_infos(producer: Producer) -> dict[int, CommInfo]:
    """What the process's communicator table says of each communicator (a slot has neither
    the name nor the node count)."""
    infos = {}
    for row in producer.region.comm_entries():
        if int(row["state"]) == shm_v1.CommState.FREE:
            continue
        nnodes = int(row["nnodes"])
        infos[int(row["comm_id"])] = CommInfo(record_text(row["name"]) or None, nnodes or None)
    return infos
