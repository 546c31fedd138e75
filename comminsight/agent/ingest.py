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
from comminsight.agent.producers import Batch, ProducerSet
from comminsight.agent.recent_ops import Origin, RecentOps
from comminsight.agent.snapshot import rank_or_none
from comminsight.shm_reader import op_records


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

    def run_pass(self, now_mono_ns: int, retire_after_ns: int = 0) -> list[Batch]:
        batches = self.producers.poll(now_mono_ns, retire_after_ns=retire_after_ns)
        update_from_producers(self.metrics, self.producers, batches, now_mono_ns)
        for batch in batches:
            ops = op_records(batch.records)
            if len(ops):
                self._hand_on(batch, ops)
        mapped = self.producers.producers.values()
        self.recent_ops.set_live({(p.pid, int(p.region.header["start_real_ns"])) for p in mapped})
        return batches

    def _hand_on(self, batch: Batch, ops: np.ndarray) -> None:
        h = batch.producer.region.header
        pid, start_real = batch.producer.pid, int(h["start_real_ns"])
        rank = rank_or_none(int(h["rank"]))
        self.recent_ops.add(
            Origin(pid, rank, self.node_name, start_real, int(h["start_mono_ns"])), ops
        )
        device = int(h["cuda_device"])
        gpu = GpuStream(self.node_name, pid, start_real, rank, device if device >= 0 else None)
        self.engine.feed(gpu, ops)
