"""The host side of one process's simulated NCCL: communicators and the API call sequence.

What NCCL 2.28.9 does on the calling thread for one ncclAllReduce/ncclSend/... in its implicit
group (src/enqueue.cc, src/group.cc, src/plugin/profiler.cc):

  GroupApi start (groupDepth 1) · state GroupStartApiStop · CollApi|P2pApi start · its stop ·
  state GroupEndApiStart · KernelLaunch start · its stop · Group start · Coll|P2p start ·
  Coll|P2p stop · Group stop · GroupApi stop

Inside a user group (ncclGroupStart · ncclSend · ncclRecv · ... · ncclGroupEnd) NCCL starts one
GroupApi at the group's first op (groupDepth 2: that op's implicit group nests in the user's),
runs the API events of every op as it is called, and launches at ncclGroupEnd:

  GroupApi start (groupDepth 2) · GroupStartApiStop · (*Api start · stop) per op ·
  GroupEndApiStart · per communicator: KernelLaunch start · stop · Group start · every task's
  start · every task's stop · Group stop · then GroupApi stop

The Coll stops microseconds after it starts, when the op is enqueued; the GPU work is reported
later by the proxy thread (`proxy.py`) through KernelCh events whose parent is the Coll. The
activation mask is read once at each op's call, at the start of taskAppend, before its
GroupApi and CollApi/P2pApi events (NCCL 2.28 on: ncclProfilerStartGroupApiEvent keeps it for
the call), and every event of the call and its task uses that value, as NCCL stores it in the
task: a plugin that changes the mask at the API event changes the next call's. Sequence
numbers count per communicator and per function, whether or not a plugin listens.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from comminsight.sim import cost_model
from comminsight.sim.abi import ProfilerAbi
from comminsight.sim.board import Board
from comminsight.sim.cuda_runtime import CudaRuntime
from comminsight.sim.event_gate import starts
from comminsight.sim.plan import CommSpec, OpInstance, RankOp
from comminsight.sim.proxy import ProxyThread
from comminsight.sim.truth import GroundTruthWriter
from comminsight_gen.abi.nccl_profiler_v5 import EventState, EventType

STREAM_BASE = 0x7F3A_0000_0000  # fake cudaStream_t / device addresses, one range per comm
BUFFER_BASE = 0x7E00_0000_0000


@dataclass
class SimComm:
    spec: CommSpec
    rank: int  # this process's rank in the communicator
    context: object = None  # the plugin's context, None if init failed
    init_result: int | None = None
    seq: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def stream(self) -> int:
        return STREAM_BASE + self.spec.index * 0x1000


@dataclass
class IssuedOp:
    """An op handed from the calling thread to the proxy thread."""

    op: RankOp
    comm: SimComm
    instance: OpInstance
    mask: int
    task: object  # the Coll/P2p handle: parent of KernelCh and ProxyOp events (set at launch)
    launch_ns: int  # set at launch
    n_channels: int
    mismatched: bool
    record: dict  # the ground-truth line, completed by the proxy thread


IMPLICIT_GROUP_DEPTH = 1  # NCCL's ncclGroupDepth inside a lone op's own implicit group
# ncclGroupDepth when NCCL starts the GroupApi of a user group: at its first op, inside that
# op's implicit group nested in the user's (ncclEnqueueCheck, then taskAppend)
EXPLICIT_GROUP_DEPTH = 2


@dataclass
class _OpenGroup:
    """An NCCL group between its first op's call and its end."""

    depth: int
    api: object = None  # the GroupApi handle, None when not started or not delivered
    api_started: bool = False
    ops: list[IssuedOp] = field(default_factory=list)
    api_of: dict[int, object] = field(default_factory=dict)  # id(op) -> its *Api handle


def _in_order_of_first_use(comms) -> list[SimComm]:
    seen: dict[int, SimComm] = {}
    for comm in comms:
        seen.setdefault(id(comm), comm)
    return list(seen.values())


class SimNccl:
    def __init__(
        self,
        abi: ProfilerAbi,
        comms: list[CommSpec],
        instances: list[OpInstance],
        rank: int,
        board: Board,
        truth: GroundTruthWriter,
        time_scale: float,
        gpu_tick_offset_ns: int,
        comm_names: bool,
        mask=None,
        cuda: CudaRuntime | None = None,
        cuda_device: int = 0,
        user_tags: bool = False,
    ):
        self.abi, self.rank, self.truth = abi, rank, truth
        # ABI v7: each call tagged 1 + its training step (0, untagged, for set-up ops), as a
        # framework would through ncclCollConfig_t.userProfilerTag
        self._user_tags = user_tags
        self._specs, self._instances, self._comm_names = comms, instances, comm_names
        # ONE int for the whole process, as in NCCL: shared by the ranks of a process
        self.mask = mask if mask is not None else abi.new_activation_mask()
        self.cuda, self.cuda_device = cuda, cuda_device
        self.comms: dict[int, SimComm] = {}
        self.proxy = ProxyThread(abi, board, rank, truth, time_scale, gpu_tick_offset_ns)
        self.ops_issued = 0
        self._group: _OpenGroup | None = None  # the user's group between start and end

    # ---- communicators ----

    def comm(self, index: int) -> SimComm:
        """The communicator, initialized on first use as PyTorch does without device_id."""
        comm = self.comms.get(index)
        if comm is None:
            spec = self._specs[index]
            comm = SimComm(spec, spec.comm_rank(self.rank))
            name = spec.name if self._comm_names else None
            if self.cuda is not None:  # NCCL's cudaSetDevice(comm->cudaDev) at init
                self.cuda.set_device(self.cuda_device)
            init_ns = time.monotonic_ns()
            result = self.abi.init(
                self.mask, spec.comm_id, name, spec.nnodes, spec.nranks, comm.rank
            )
            comm.context, comm.init_result = result.context, result.result
            self.comms[index] = comm
            self.truth.write(
                "comm",
                comm_id=spec.comm_id_hex,
                name=spec.name,
                role=spec.role,
                nranks=spec.nranks,
                rank=comm.rank,
                nnodes=spec.nnodes,
                init_ns=init_ns,
                init_result=result.result,
                mask_after_init=int(self.mask[0]),
            )
        return comm

    def finalize_all(self, aborted: bool) -> None:
        """ncclCommDestroy / ncclCommAbort of every communicator: the plugin's finalize."""
        for comm in self.comms.values():
            if comm.context is not None:
                self.abi.finalize(comm.context)
            self.truth.write(
                "comm_finalize",
                comm_id=comm.spec.comm_id_hex,
                finalize_ns=time.monotonic_ns(),
                aborted=aborted,
            )

    # ---- ops ----

    def group_start(self) -> None:
        """ncclGroupStart: nothing reaches the plugin until the group's first op."""
        if self._group is None:
            self._group = _OpenGroup(depth=EXPLICIT_GROUP_DEPTH)

    def group_end(self) -> list[IssuedOp]:
        """ncclGroupEnd: launch every op issued since group_start, as one group."""
        group, self._group = self._group, None
        return self._launch(group) if group is not None else []

    def issue(self, op: RankOp, mismatched: dict | None = None) -> IssuedOp | None:
        """One ncclAllReduce/ncclSend/...: inside a group its API part only (None is returned,
        the group's end launches it), else the whole op in its implicit group."""
        if self._group is not None:
            self._api_call(self._group, op, mismatched)
            return None
        group = _OpenGroup(depth=IMPLICIT_GROUP_DEPTH)
        self._api_call(group, op, mismatched)
        return self._launch(group)[0]

    def unlaunched(self) -> list[IssuedOp]:
        """Ops of a group whose end was never reached (their rank stopped inside it)."""
        return list(self._group.ops) if self._group is not None else []

    def _api_call(self, group: _OpenGroup, op: RankOp, mismatched: dict | None) -> None:
        """The part of an op NCCL runs at its call (taskAppend): the group's GroupApi at the
        first op whose mask wants it, then the op's CollApi/P2pApi. The task keeps the mask
        read here, before them."""
        comm = self.comm(op.comm)
        ctx, abi = comm.context, self.abi
        mask = int(self.mask[0]) if ctx is not None else 0
        instance = self._instances[op.instance]
        record = self._record(op, comm, instance, mismatched)
        record["host_api_ns"] = time.monotonic_ns()
        if not group.api_started and starts(EventType.GROUP_API, mask):
            group.api = abi.start_group_api(ctx, group.depth)
            group.api_started = True
            abi.record_state(group.api, EventState.GROUP_START_API_STOP)
        tag = {"user_tag": self._tag(op)} if self._user_tags else {}
        if op.func in cost_model.P2P_FUNCS:
            api = (
                abi.start_p2p_api(ctx, group.api, op.func, op.count, op.datatype, 0, **tag)
                if starts(EventType.P2P_API, mask)
                else None
            )
        else:
            api = (
                abi.start_coll_api(
                    ctx, group.api, op.func, op.count, op.datatype, op.root, 0, **tag
                )
                if starts(EventType.COLL_API, mask)
                else None
            )
        task_mask = mask
        abi.stop(api)
        issued = IssuedOp(
            op, comm, instance, task_mask, None, 0, record["n_channels"], bool(mismatched), record
        )
        group.ops.append(issued)
        group.api_of[id(issued)] = api

    def _launch(self, group: _OpenGroup) -> list[IssuedOp]:
        """ncclGroupEnd of the outermost group: one kernel plan per communicator (KernelLaunch,
        then a Group event with the plan's tasks as children), then the GroupApi stops. The GPU
        side runs the whole group as one launch, so its sends and receives can meet."""
        self.abi.record_state(group.api, EventState.GROUP_END_API_START)
        for comm in _in_order_of_first_use(issued.comm for issued in group.ops):
            self._launch_plan(comm, group, [i for i in group.ops if i.comm is comm])
        self.abi.stop(group.api)
        self.ops_issued += len(group.ops)
        self.proxy.submit(group.ops)
        return group.ops

    def _launch_plan(self, comm: SimComm, group: _OpenGroup, ops: list[IssuedOp]) -> None:
        abi, ctx = self.abi, comm.context
        # NCCL decides the plan's events by the first task that captured a mask
        mask = next((i.mask for i in ops if i.mask), 0)
        launch = (
            abi.start_kernel_launch(ctx, group.api, comm.stream)
            if starts(EventType.KERNEL_LAUNCH, mask)
            else None
        )
        abi.stop(launch)
        launch_ns = time.monotonic_ns()
        plan_group = abi.start_group(ctx) if starts(EventType.GROUP, mask) else None
        # a plan starts its collective tasks, then its P2P tasks, and stops them all after
        ordered = sorted(ops, key=lambda i: i.op.func in cost_model.P2P_FUNCS)
        for issued in ordered:
            api = group.api_of[id(issued)]
            issued.launch_ns = launch_ns
            issued.record["host_start_ns"] = time.monotonic_ns()
            issued.task = self._start_task(
                comm, issued.op, issued.record, api, plan_group, issued.mask
            )
        for issued in ordered:
            abi.stop(issued.task)
            issued.record["host_stop_ns"] = time.monotonic_ns()
        abi.stop(plan_group)

    @staticmethod
    def _tag(op: RankOp) -> int:
        return 0 if op.step is None else op.step + 1

    def _start_task(self, comm: SimComm, op: RankOp, record: dict, api, group, mask: int):
        buffers = BUFFER_BASE + (op.op_index << 24)
        if op.func in cost_model.P2P_FUNCS:
            if not starts(EventType.P2P, mask):
                return None
            p2p = {
                "func": op.func,
                "buff": buffers,
                "datatype": record["datatype"],
                "count": record["count"],
                "peer": op.peer,
                "n_channels": record["n_channels"],
                "user_tag": self._tag(op) if self._user_tags else 0,
            }
            return self.abi.start_p2p(comm.context, api, group, comm.rank, p2p)
        # NCCL numbers collectives per function, plugin or not (RAS relies on it too)
        record["seq"] = comm.seq[op.func]
        comm.seq[op.func] += 1
        if not starts(EventType.COLL, mask):
            return None
        coll = {
            "seq": record["seq"],
            "func": op.func,
            "send_buff": buffers,
            "recv_buff": buffers + (1 << 23),
            "count": record["count"],
            "root": op.root,
            "datatype": record["datatype"],
            "n_channels": record["n_channels"],
            "n_warps": record["n_warps"],
            "algo": record["algo"],
            "proto": record["proto"],
            "user_tag": self._tag(op) if self._user_tags else 0,
        }
        if self.abi.version >= 7:  # the kernel NCCL 2.31+ names, and symmetric kernels never
            coll["kernel_variant"] = f"{op.func}_{record['algo']}_{record['proto']}"
        return self.abi.start_coll(comm.context, api, group, comm.rank, coll)

    def _record(self, op: RankOp, comm: SimComm, instance: OpInstance, mismatched) -> dict:
        count, datatype = op.count, op.datatype
        if op.func in cost_model.BYTE_FUNCS:  # NCCL hands these to the device as bytes
            count, datatype = count * cost_model.element_bytes(datatype), "ncclInt8"
        tuning = instance.tuning
        return {
            "op_index": op.op_index,
            "comm_id": comm.spec.comm_id_hex,
            "comm_name": comm.spec.name,
            "role": comm.spec.role,
            "rank": comm.rank,
            "global_rank": self.rank,
            "comm_op_index": op.comm_op_index,
            "instance": instance.id,
            "func": op.func,
            "seq": None,
            "count": count,
            "datatype": datatype,
            "bytes": count * cost_model.element_bytes(datatype),
            "api_count": op.count,
            "api_datatype": op.datatype,
            "root": op.root if op.peer < 0 else None,
            "peer": op.peer if op.peer >= 0 else None,
            "algo": tuning.algo,
            "proto": tuning.proto,
            "n_channels": tuning.n_channels,
            "n_warps": tuning.n_warps,
            "step": op.step,
            "phase": op.phase,
            "group": op.group,
            "micro_batch": op.micro_batch,
            "host_api_ns": None,
            "host_start_ns": None,
            "host_stop_ns": None,
            "gpu_start_tick": None,
            "gpu_end_tick": None,
            "kernel_ch_events": 0,
            "completed": False,
            "mismatch": mismatched,
        }
