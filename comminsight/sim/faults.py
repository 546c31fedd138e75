"""Fault specifications of the simulated NCCL: which rank misbehaves, how, and before which op.

A spec is `KIND:key=value,...`, e.g. `skip:rank=1,op=7` or `sleep:rank=0,op=3,seconds=2`.
`op` is 0-based. Without `comm=ROLE` it counts every op the rank issues, on all of its
communicators; with it (`comm=tp`) it counts only the ops on the rank's first communicator of
that role (world, tp, pp, dp).

`leave` is the uneven-inputs end of a data-parallel job: the rank ran out of data before op K,
so once its GPU finished the earlier ops it destroys every communicator (ncclCommDestroy) and
its process exits cleanly, while its peers go on into op K and wait there for ever.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from comminsight.sim.plan import RankOp, WorkloadPlan

KINDS = ("skip", "sleep", "die", "mismatch", "leave")
# Faults after which some op can never complete: the run then hangs until --hang-hold ends it.
HANGING_KINDS = frozenset({"skip", "die", "mismatch", "leave"})
MISMATCH_FIELDS = ("count", "func")

_KEYS = {
    "skip": {"rank", "op", "comm"},
    "sleep": {"rank", "op", "comm", "seconds"},
    "die": {"rank", "op", "comm"},
    "mismatch": {"rank", "op", "comm", "field"},
    "leave": {"rank", "op", "comm"},
}


class FaultSpecError(ValueError):
    """A fault spec that cannot be parsed; the message names the spec and the problem."""


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    op: int
    comm: str | None = None  # communicator role (world, tp, pp, dp); None: all of the rank's ops
    seconds: float = 0.0  # sleep: wall-clock seconds, never scaled by --time-scale
    field: str = "count"  # mismatch: what differs from the peers

    @property
    def hangs(self) -> bool:
        return self.kind in HANGING_KINDS

    def targets(self, plan: WorkloadPlan, op: RankOp) -> bool:
        """Whether this fault applies to `op` of its rank."""
        if self.comm is None:
            return op.op_index == self.op
        comm = plan.comm_by_role(self.rank, self.comm)
        return comm is not None and op.comm == comm.index and op.comm_op_index == self.op

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Fault:
        return cls(**data)

    def __str__(self) -> str:
        parts = [f"rank={self.rank}", f"op={self.op}"]
        if self.comm:
            parts.append(f"comm={self.comm}")
        if self.kind == "sleep":
            parts.append(f"seconds={self.seconds:g}")
        if self.kind == "mismatch":
            parts.append(f"field={self.field}")
        return f"{self.kind}:{','.join(parts)}"


def parse_fault(spec: str) -> Fault:
    kind, sep, rest = spec.partition(":")
    kind = kind.strip()
    if kind not in KINDS:
        raise FaultSpecError(f"fault {spec!r}: kind must be one of {', '.join(KINDS)}")
    values: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))) if sep else ():
        key, eq, value = item.partition("=")
        if not eq or not value:
            raise FaultSpecError(f"fault {spec!r}: {item!r} is not key=value")
        if key not in _KEYS[kind]:
            raise FaultSpecError(
                f"fault {spec!r}: unknown key {key!r} (a {kind} fault takes "
                f"{', '.join(sorted(_KEYS[kind]))})"
            )
        values[key] = value
    for required in ("rank", "op") + (("seconds",) if kind == "sleep" else ()):
        if required not in values:
            raise FaultSpecError(f"fault {spec!r}: {required}= is required")
    try:
        rank, op = int(values["rank"]), int(values["op"])
        seconds = float(values.get("seconds", 0.0))
    except ValueError as e:
        raise FaultSpecError(f"fault {spec!r}: {e}") from None
    if rank < 0 or op < 0 or seconds < 0:
        raise FaultSpecError(f"fault {spec!r}: rank, op and seconds must not be negative")
    field = values.get("field", "count")
    if field not in MISMATCH_FIELDS:
        raise FaultSpecError(f"fault {spec!r}: field must be one of {', '.join(MISMATCH_FIELDS)}")
    return Fault(kind, rank, op, values.get("comm"), seconds, field)
