"""What one simulation run is: workload, shape, ABI, timing and faults (`SimConfig`).

The launcher writes it as JSON into the run directory; every rank process reads it back and
rebuilds the same plan from it, so the plan itself never has to travel between processes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from comminsight.sim.faults import Fault

WORKLOADS = ("ddp", "fsdp", "tp-pp-dp", "moe")
ABI_VERSIONS = (4, 5, 6)


class SimConfigError(ValueError):
    """A configuration the simulation cannot run; the message says which setting is wrong."""


@dataclass(frozen=True)
class SimConfig:
    plugin: str
    home: str
    workload: str = "ddp"
    ranks: int = 2
    nodes: int = 1  # simulated nodes; ranks are spread evenly (LOCAL_RANK, nNodes)
    steps: int = 3  # measured steps, after the warm-up steps
    warmup_steps: int = 1
    grad_accum: int = 1  # micro-batches per step
    extra_ops_every: int = 0  # every N-th steady step has an extra barrier (evaluation); 0: none
    tp: int = 2  # tp-pp-dp only
    pp: int = 2  # tp-pp-dp only
    model_params: int = 125_000_000
    layers: int = 12
    abi: int = 5
    seed: int = 0
    time_scale: float = 1.0  # every modeled duration (host and GPU) is multiplied by this
    hang_hold_s: float = 10.0
    timeout_s: float = 600.0
    comm_names: bool = True  # False: commName is NULL, as PyTorch passes it without Inject
    out: str | None = None  # ground-truth directory; default <home>/sim/<run id>
    faults: tuple[Fault, ...] = field(default_factory=tuple)
    env: tuple[tuple[str, str], ...] = ()  # extra environment of every rank (plugin settings)
    # COMMINSIGHT_HOME of each simulated node's ranks (one per node), so that each node's
    # Agent (a slave of a multi-node job) sees only its own ranks; empty: every rank uses home
    node_homes: tuple[str, ...] = ()

    @property
    def ranks_per_node(self) -> int:
        return self.ranks // self.nodes

    def home_of(self, rank: int) -> str:
        return self.node_homes[rank // self.ranks_per_node] if self.node_homes else self.home

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.steps

    def validate(self) -> SimConfig:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise SimConfigError(message)

        need(self.workload in WORKLOADS, f"workload must be one of {', '.join(WORKLOADS)}")
        need(self.abi in ABI_VERSIONS, "abi must be 4, 5 or 6")
        need(self.ranks >= 1, "ranks must be at least 1")
        need(self.nodes >= 1 and self.ranks % self.nodes == 0, "nodes must divide ranks")
        need(self.steps >= 1 and self.warmup_steps >= 0, "steps >= 1 and warmup >= 0")
        need(self.grad_accum >= 1, "grad-accum must be at least 1")
        need(self.extra_ops_every >= 0, "extra-ops-every must be 0 (none) or more")
        need(self.model_params >= 1_000_000, "model-params must be at least 1M")
        need(self.layers >= 1, "layers must be at least 1")
        need(self.time_scale > 0, "time-scale must be positive")
        need(self.hang_hold_s >= 0 and self.timeout_s > 0, "hang-hold >= 0 and timeout > 0")
        if self.workload == "tp-pp-dp":
            need(self.tp >= 1 and self.pp >= 1, "tp and pp must be at least 1")
            need(self.ranks % (self.tp * self.pp) == 0, "tp*pp must divide ranks")
            need(self.layers % self.pp == 0, "pp must divide layers")
        need(
            not self.node_homes or len(self.node_homes) == self.nodes,
            "node homes: give one per node or none",
        )
        for f in self.faults:
            need(f.rank < self.ranks, f"fault {f}: rank {f.rank} is not below --ranks")
        return self

    def with_out(self, out: str) -> SimConfig:
        return replace(self, out=out)

    def to_json(self) -> str:
        data = asdict(self)
        data["faults"] = [f.to_json() for f in self.faults]
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SimConfig:
        data = json.loads(text)
        data["faults"] = tuple(Fault.from_json(f) for f in data.get("faults", ()))
        data["env"] = tuple((k, v) for k, v in data.get("env", ()))
        data["node_homes"] = tuple(data.get("node_homes", ()))
        return cls(**data)

    @classmethod
    def load(cls, path: Path) -> SimConfig:
        return cls.from_json(path.read_text())
