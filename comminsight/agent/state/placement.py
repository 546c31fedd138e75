"""Where a profiled process runs, in the names a cluster's other exporters use: the node (the
Agent's `host`, and the Kubernetes node from the Downward API), the pod, namespace and
container its cgroup places it in, and the node's index of its GPU as DCGM's exporter numbers
it (`gpu`), the CUDA ordinal inside the process staying `cuda_device`.

Every part is a cached lookup (workload_identity, gpu_index): a pass asks for each producer,
and an answer once known does not change for the process. What cannot be known here is "",
never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from comminsight.agent.state.gpu_index import GpuIndex
from comminsight.agent.state.workload_identity import Workload, WorkloadLookup

NOWHERE = Workload()


@dataclass
class Placement:
    node_name: str
    kubernetes_node: str = ""
    workloads: WorkloadLookup | None = field(default=None, repr=False)
    gpus: GpuIndex | None = field(default=None, repr=False)

    @classmethod
    def of_node(cls, node_name: str, kubernetes_node: str = "") -> Placement:
        """This node's lookups, as the running Agent uses them."""
        return cls(node_name, kubernetes_node, WorkloadLookup(), GpuIndex())

    def workload(self, pid: int, start_ticks: int, pid_namespace: int) -> Workload:
        if self.workloads is None:
            return NOWHERE
        return self.workloads.of_pid(pid, start_ticks, pid_namespace)

    def gpu_index(self, uuid: str) -> str:
        if self.gpus is None or not uuid:
            return ""
        return self.gpus.index_of(uuid)
