"""The Agent's ingest pass: SHM rings -> metrics, the recent-ops window and the engine hook.

One `NodeIngest.run_pass()` reads every Profiler's new records (ProducerSet), folds them into
the Prometheus state (NodeMetrics) and hands the completed Coll/P2P ops on, per GPU (a process
that drives several GPUs split by its communicator members: producer_gpus), to the recent-ops
window of the API and to the Semantic Engine hook. The service runs it every poll;
bench/agent_ingest.py measures exactly this, so the benchmark is the Agent's own path, not a
copy of it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import numpy as np

from comminsight.agent.metrics.node import NodeMetrics, update_from_producers
from comminsight.agent.receivers.producer_gpus import ProcessGpus
from comminsight.agent.receivers.producers import Batch, Producer, ProducerSet
from comminsight.agent.state.process_labels import header_labels, index_label
from comminsight.agent.state.recent_ops import Origin, RecentOps
from comminsight.agent.steps.engine_hook import EngineHook, GpuStream
from comminsight.semantic.process_gpus import GpuOfProcess
from comminsight.semantic.shm_input import CommInfo
from comminsight.shm_reader import op_records, rank_or_none, record_text
from comminsight_gen.abi import shm_v1

log = logging.getLogger("comminsight.agent.node.ingest")


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
        # producers whose end the engine was told of, and their GPUs
        self._finished: dict[Path, list[GpuStream]] = {}
        self._gpus: dict[Path, ProcessGpus] = {}  # each mapped producer's GPUs
        self._told_present = False

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
                gpus = self._finished[producer.path] = self.gpus_of(producer)
                for gpu in gpus:
                    self.engine.finished(gpu)
        # forgotten by this very pass (past the ended processes remembered) before the loop
        # above could tell the engine they ended: told now, or their GPUs stay open for ever
        for producer in self.producers.retired_in_pass:
            if producer.path not in self._finished and producer.path in self._gpus:
                gpus = self._finished[producer.path] = self.gpus_of(producer)
                for gpu in gpus:
                    self.engine.finished(gpu)
        paths = {p.path for p in mapped}
        if not self._told_present:  # which processes resumed from a checkpoint have ended
            self._told_present = True
            self.engine.present(self.producers.shm_names())
        # retired files leave the sets; the engine need keep nothing of their GPUs now
        for path in self._finished.keys() - paths:
            for gpu in self._finished.pop(path):
                self.engine.retired(gpu)
        for path in self._gpus.keys() - paths:
            del self._gpus[path]
        return batches

    def gpus_of(self, producer: Producer) -> list[GpuStream]:
        """The GPU streams of a process: one, unless it drives several GPUs."""
        split = self._split(producer)
        if not split.split:
            return [self.gpu_of(producer)]
        return [self._gpu_stream(producer, g) for g in split.gpus]

    def _split(self, producer: Producer, rows: np.ndarray | None = None) -> ProcessGpus:
        split = self._gpus.get(producer.path)
        if split is None:
            h = producer.region.header
            split = self._gpus[producer.path] = ProcessGpus(producer.path.name)
            # the process's own ranks: its GPUs' local ranks count from its LOCAL_RANK
            split.members.global_rank = rank_or_none(int(h["rank"]))
            split.members.local_rank = rank_or_none(int(h["local_rank"]))
        rows = producer.region.comm_entries() if rows is None else rows
        was_split = split.split if split.gpus else None
        if split.update(rows):
            for problem in split.problems:
                log.warning("semantic engine input: %s", problem)
            if was_split is False and split.split:
                # its GPUs' engines start now; the ops handed on before stay one stream
                log.warning(
                    "semantic engine input: %s: the process drives several GPUs from now "
                    "on (a communicator on another device); its earlier ops stay one stream",
                    producer.path.name,
                )
        return split

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
            labels=header_labels(h, self.metrics.placement),
            host=record_text(h["hostname"]),
            uid=producer.uid,
        )

    def _gpu_stream(self, producer: Producer, g: GpuOfProcess) -> GpuStream:
        whole = self.gpu_of(producer)
        return replace(
            whole,
            global_rank=g.global_rank,
            cuda_device=g.device,
            local_rank=g.local_rank,
            suffix=g.suffix,
            labels=replace(
                whole.labels,
                rank=index_label(g.global_rank),
                local_rank=index_label(g.local_rank),
                cuda_device=index_label(g.device),
                # the header's UUID (and so the node's index of it) is its first device's
                gpu=whole.labels.gpu if g.device == whole.cuda_device else "",
                uuid=whole.labels.uuid if g.device == whole.cuda_device else "",
            ),
        )

    def _hand_on(self, producer: Producer, ops: np.ndarray) -> None:
        gpu = self.gpu_of(producer)
        self.recent_ops.add(
            Origin(gpu.pid, gpu.global_rank, self.node_name, gpu.start_real_ns, gpu.start_mono_ns),
            ops,
        )
        rows = producer.region.comm_entries()
        comms = comm_infos(rows)
        split = self._split(producer, rows)
        if not split.split:
            self.engine.feed(gpu, ops, comms)
            return
        for g, records in split.partition(ops):
            self.engine.feed(self._gpu_stream(producer, g), records, comms)


def comm_infos(rows: np.ndarray) -> dict[int, CommInfo]:
    """What a process's communicator table rows say of each communicator (a slot has neither
    the name nor the node count)."""
    infos = {}
    for row in rows:
        if int(row["state"]) == shm_v1.CommState.FREE:
            continue
        nnodes = int(row["nnodes"])
        infos[int(row["comm_id"])] = CommInfo(record_text(row["name"]) or None, nnodes or None)
    return infos
