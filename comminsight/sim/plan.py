"""The plan of a run: communicators, op instances shared by their participants, and each
rank's program of host actions.

An `OpInstance` is one collective (all members of a communicator) or one send/recv pair; it
completes on every participant when the last one has arrived on its GPU plus the op's modeled
duration. Each rank's program is built independently by walking the workload's schedule;
`PlanBuilder` matches a rank's k-th collective on a communicator (or its j-th message to a
peer) with the same instance on the other participants, and checks that they agree.

Ops issued inside `PlanBuilder.nccl_group(rank)` form one NCCL group of that rank
(ncclGroupStart ... ncclGroupEnd): the program brackets them with `GroupStart`/`GroupEnd`, and
NCCL launches them together at the end, so a rank can send to and receive from the same peer
without waiting for it in between (PyTorch's all_to_all_single and batch_isend_irecv).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from comminsight.sim import cost_model
from comminsight.sim.config import FLAT_COMPUTE_NS, SimConfig


@dataclass(frozen=True)
class CommSpec:
    index: int
    role: str  # world | tp | pp | dp: what faults' comm= and the summary refer to
    name: str  # <group_desc>:<group_name>, the name Inject gives NCCL
    comm_id: int  # u64, identical on every member
    members: tuple[int, ...]  # global ranks; a member's comm rank is its position
    nnodes: int

    @property
    def nranks(self) -> int:
        return len(self.members)

    @property
    def comm_id_hex(self) -> str:
        return f"{self.comm_id:016x}"

    def comm_rank(self, global_rank: int) -> int:
        return self.members.index(global_rank)


@dataclass(frozen=True)
class OpInstance:
    id: int
    comm: int
    func: str  # the collective, or "SendRecv" for a pair
    participants: tuple[int, ...]  # global ranks
    nbytes: int  # traffic bytes (nccl-tests' size)
    tuning: cost_model.Tuning
    duration_ns: int  # modeled GPU time once every participant has arrived, unscaled


@dataclass(frozen=True)
class RankOp:
    op_index: int  # position among this rank's ops, all communicators
    comm: int
    comm_op_index: int  # position among this rank's ops on this communicator
    instance: int
    func: str  # as the application calls it: AllReduce ... Send, Recv
    count: int  # API count
    datatype: str  # API datatype
    root: int  # comm rank of the root (0 where the op has none)
    peer: int  # comm rank of the peer of Send/Recv, -1 otherwise
    phase: str
    step: int | None  # None for setup ops
    micro_batch: int | None
    group: int | None = None  # the rank's NCCL group counter; None: issued alone


@dataclass(frozen=True)
class Compute:
    ns: int  # modeled host/GPU compute before the next action, unscaled
    label: str


@dataclass(frozen=True)
class Issue:
    op: RankOp


@dataclass(frozen=True)
class GroupStart:
    group: int  # ncclGroupStart: the ops up to the matching GroupEnd are launched together


@dataclass(frozen=True)
class GroupEnd:
    group: int  # ncclGroupEnd: NCCL launches the group's ops


@dataclass(frozen=True)
class StepBegin:
    step: int
    warmup: bool


@dataclass(frozen=True)
class StepEnd:
    step: int  # the host waits for its GPU here, as loss.item() makes training do


@dataclass(frozen=True)
class HostSync:
    label: str  # the host waits for its GPU (torch.distributed.barrier() does)


Action = Compute | Issue | GroupStart | GroupEnd | StepBegin | StepEnd | HostSync


@dataclass
class WorkloadPlan:
    workload: str
    world: int
    comms: list[CommSpec]
    instances: list[OpInstance]
    programs: list[list[Action]]
    steps: list[tuple[int, bool]] = field(default_factory=list)  # (step, warmup)

    def rank_ops(self, rank: int) -> list[RankOp]:
        return [a.op for a in self.programs[rank] if isinstance(a, Issue)]

    def comm_by_role(self, rank: int, role: str) -> CommSpec | None:
        return next((c for c in self.comms if c.role == role and rank in c.members), None)


def comm_id_for(seed: int, name: str, members: tuple[int, ...]) -> int:
    digest = hashlib.blake2b(f"{seed}|{name}|{members}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") or 1


class PlanBuilder:
    """Collects communicators, instances and programs; workloads call it once per rank."""

    def __init__(self, config: SimConfig):
        self.config = config
        self.comms: list[CommSpec] = []
        self.instances: list[OpInstance] = []
        self.programs: list[list[Action]] = [[] for _ in range(config.ranks)]
        self.steps: list[tuple[int, bool]] = []
        self._instance_keys: dict[tuple, int] = {}
        self._instance_api: dict[int, tuple] = {}
        self._counters: dict[tuple, int] = {}
        self._group_names = 0
        self._open_nccl_groups: dict[int, int] = {}  # rank -> its NCCL group being built
        self._host_rngs = [random.Random(f"{config.seed}/host/{r}") for r in range(config.ranks)]

    # ---- communicators ----

    def new_group_name(self) -> str:
        """The next torch.distributed group name; "0" is the default group's."""
        self._group_names += 1
        return str(self._group_names - 1)

    def add_comm(
        self, role: str, desc: str, members: tuple[int, ...], group_name: str | None = None
    ) -> CommSpec:
        """A communicator named as Inject names it: `<group_desc>:<group_name>`."""
        name = f"{desc}:{self.new_group_name() if group_name is None else group_name}"
        nodes = {r // self.config.ranks_per_node for r in members}
        spec = CommSpec(
            len(self.comms),
            role,
            name,
            comm_id_for(self.config.seed, name, members),
            members,
            len(nodes),
        )
        self.comms.append(spec)
        return spec

    # ---- program actions ----

    def compute(self, rank: int, ns: float, label: str) -> None:
        """Host-side time before the next call, as the config's timing models it: jittered
        per rank (±5 %, or ±60 % when noisy), or the same for every action when flat."""
        if ns > 0:
            timing = self.config.timing
            if timing == "flat":
                ns, jitter = FLAT_COMPUTE_NS, 1.0
            else:
                spread = 0.6 if timing == "noisy" else 0.05
                jitter = 1.0 + self._host_rngs[rank].uniform(-spread, spread)
            self.programs[rank].append(Compute(int(ns * jitter), label))

    def barrier(self, rank: int, comm: CommSpec) -> None:
        """torch.distributed.barrier(): a one-element all-reduce the host then waits for."""
        self.collective(rank, comm, "AllReduce", 1, "ncclFloat32", phase="barrier", step=None)
        self.programs[rank].append(HostSync("barrier"))

    def extra_ops(self, rank: int, comm: CommSpec, step: int) -> None:
        """What a training loop does now and then inside a Step besides training: an
        evaluation or checkpoint barrier, every `extra_ops_every`-th steady Step."""
        every = self.config.extra_ops_every
        steady = step - self.config.warmup_steps
        if every and steady >= 0 and steady % every == every - 1:
            self.collective(rank, comm, "AllReduce", 1, "ncclFloat32", phase="extra", step=step)
            self.programs[rank].append(HostSync("barrier"))

    @contextmanager
    def nccl_group(self, rank: int) -> Iterator[int]:
        """ncclGroupStart/ncclGroupEnd around the collectives, sends and receives `rank` issues
        inside: they are launched as one NCCL group. A nested group joins the outer one, as
        NCCL counts group depth. Yields the group's number (the rank's group counter)."""
        outer = self._open_nccl_groups.get(rank)
        if outer is not None:
            yield outer
            return
        group = self._next(("nccl-group", rank))
        self._open_nccl_groups[rank] = group
        self.programs[rank].append(GroupStart(group))
        try:
            yield group
        finally:
            del self._open_nccl_groups[rank]
            self.programs[rank].append(GroupEnd(group))

    def step_begin(self, rank: int, step: int, warmup: bool) -> None:
        if rank == 0:
            self.steps.append((step, warmup))
        self.programs[rank].append(StepBegin(step, warmup))

    def step_end(self, rank: int, step: int) -> None:
        self.programs[rank].append(StepEnd(step))

    def collective(
        self,
        rank: int,
        comm: CommSpec,
        func: str,
        count: int,
        datatype: str,
        *,
        root: int = 0,
        phase: str,
        step: int | None,
        micro_batch: int | None = None,
    ) -> None:
        k = self._next(("coll", comm.index, rank))
        instance = self._instance(
            ("coll", comm.index, k),
            comm,
            func,
            comm.members,
            cost_model.traffic_bytes(func, count, datatype, comm.nranks),
            (func, count, datatype, root),
        )
        self._issue(rank, comm, instance, func, count, datatype, root, -1, phase, step, micro_batch)

    def send(self, rank: int, comm: CommSpec, peer: int, count: int, datatype: str, **where):
        self._p2p(rank, comm, "Send", rank, comm.members[peer], peer, count, datatype, where)

    def recv(self, rank: int, comm: CommSpec, peer: int, count: int, datatype: str, **where):
        self._p2p(rank, comm, "Recv", comm.members[peer], rank, peer, count, datatype, where)

    def build(self) -> WorkloadPlan:
        if self._open_nccl_groups:
            raise AssertionError(f"workload plan: NCCL groups left open: {self._open_nccl_groups}")
        return WorkloadPlan(
            self.config.workload,
            self.config.ranks,
            self.comms,
            self.instances,
            self.programs,
            self.steps,
        )

    # ---- matching ----

    def _p2p(self, rank, comm, func, sender, receiver, peer, count, datatype, where) -> None:
        # a rank's send to itself pairs with its own receive (all_to_all_single includes self)
        side = (func,) if sender == receiver else ()
        j = self._next(("p2p", comm.index, sender, receiver, rank, *side))
        nbytes = count * cost_model.element_bytes(datatype)
        instance = self._instance(
            ("p2p", comm.index, sender, receiver, j),
            comm,
            "SendRecv",
            (sender, receiver),
            nbytes,
            ("SendRecv", count, datatype),
        )
        self._issue(rank, comm, instance, func, count, datatype, 0, peer, **where)

    def _issue(
        self, rank, comm, instance, func, count, datatype, root, peer, phase, step, micro_batch=None
    ) -> None:
        op = RankOp(
            op_index=self._next(("op", rank)),
            comm=comm.index,
            comm_op_index=self._next(("comm-op", comm.index, rank)),
            instance=instance,
            func=func,
            count=count,
            datatype=datatype,
            root=root,
            peer=peer,
            phase=phase,
            step=step,
            micro_batch=micro_batch,
            group=self._open_nccl_groups.get(rank),
        )
        self.programs[rank].append(Issue(op))

    def _instance(self, key, comm, func, participants, nbytes, api) -> int:
        found = self._instance_keys.get(key)
        if found is not None:
            if self._instance_api[found] != api:
                raise AssertionError(f"workload plan: ranks disagree on {key}: {api}")
            return found
        index = len(self.instances)
        tuning = cost_model.tune(func if func != "SendRecv" else "Send", nbytes, comm.nnodes)
        rng = random.Random(f"{self.config.seed}/op/{key}")
        duration = cost_model.gpu_duration_ns(
            func if func != "SendRecv" else "Send", nbytes, comm.nranks, comm.nnodes, tuning, rng
        )
        if key[0] == "coll" and key[2] == 0:
            duration += cost_model.FIRST_OP_SETUP_NS
        self.instances.append(
            OpInstance(index, comm.index, func, tuple(participants), nbytes, tuning, duration)
        )
        self._instance_keys[key] = index
        self._instance_api[index] = api
        return index

    def _next(self, key: tuple) -> int:
        n = self._counters.get(key, 0)
        self._counters[key] = n + 1
        return n
