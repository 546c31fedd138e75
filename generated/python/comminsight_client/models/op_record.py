from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.op_kind import OpKind
from ..models.timing_source import TimingSource
from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="OpRecord")



@_attrs_define
class OpRecord:
    """ One completed Collective or P2P operation on one rank (shm v1 op_slot, decoded).

        Attributes:
            comm_id (str): NCCL communicator id (commId in profiler ABI v5+, commHash in v4), 16 lowercase hex digits, zero
                padded.
            comm_rank (int): A rank (global rank in the job unless the field name says comm_rank).
            global_rank (int | None):
            node_name (str): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host name); unique in a job.
            pid (int):
            seq (int): Sequence number of the op (see SeqProgress).
            kind (OpKind): coll = a collective; p2p = a send or receive (the values hang-report and step-summary use).
            func (str): NCCL function name, e.g. AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, Send,
                Recv.
            datatype (str):
            count (int):
            size_bytes (int):
            root (int | None):
            peer (int | None):
            algo (None | str):
            proto (None | str):
            n_channels (int):
            n_warps (int):
            stream_id (int | None): CUDA stream handle as an integer; null when NCCL reported none.
            graph_captured (bool): Captured into a CUDA graph.
            forced_complete (bool): Completed by finalize or process exit rather than by NCCL's events.
            enqueued_mono_ns (int):
            completed_mono_ns (int | None): Host time the op was known complete; null when timing_source is none.
            completed_real_ns (int | None):
            gpu_start_ns (int | None): GPU globaltimer at the earliest channel start; comparable only with GPU times of the
                same device. Null without GPU timing.
            gpu_end_ns (int | None): GPU globaltimer at the latest channel stop. Null without GPU timing.
            timing_source (TimingSource): Where an op's duration comes from, with the shm v1 timing_source labels (the same
                words
                NCCL Inspector's coll_timing_source uses): kernel_gpu (GPU globaltimer ticks of the
                kernel channels), kernel_cpu (host times of the kernel-channel events), collective_cpu
                (host start/stop of the op; KernelCh events were off), none (never completed in view).
            duration_us (float | None): kernel_gpu: earliest channel start to latest channel stop on the GPU; kernel_cpu:
                enqueue to the last channel stop as the host saw it; collective_cpu: the call's start to stop on the host (its
                enqueue, not its GPU execution); null when none (no timing, or a call swept before the host saw it stop).
            algbw_gbs (float | None): size_bytes / duration in GB/s (1e9 bytes/s); null without a duration.
            busbw_gbs (float | None): Bus bandwidth in GB/s with NCCL's per-function factor; null without a duration.
            step (int | None): Step index the Semantic Engine assigned the op to; null until it has.
            user_tag (int | None | Unset): The tag the application gave the NCCL call (ncclCollConfig_t.userProfilerTag,
                profiler ABI v7, NCCL 2.31+); null when untagged or not reported.
            kernel_variant (None | str | Unset): Name of the kernel variant NCCL launched for a collective (profiler ABI
                v7); null when not reported.
            sym_coll (bool | Unset): The collective ran a symmetric-memory kernel (profiler ABI v7 isSymColl); false when
                not reported.
     """

    comm_id: str
    comm_rank: int
    global_rank: int | None
    node_name: str
    pid: int
    seq: int
    kind: OpKind
    func: str
    datatype: str
    count: int
    size_bytes: int
    root: int | None
    peer: int | None
    algo: None | str
    proto: None | str
    n_channels: int
    n_warps: int
    stream_id: int | None
    graph_captured: bool
    forced_complete: bool
    enqueued_mono_ns: int
    completed_mono_ns: int | None
    completed_real_ns: int | None
    gpu_start_ns: int | None
    gpu_end_ns: int | None
    timing_source: TimingSource
    duration_us: float | None
    algbw_gbs: float | None
    busbw_gbs: float | None
    step: int | None
    user_tag: int | None | Unset = UNSET
    kernel_variant: None | str | Unset = UNSET
    sym_coll: bool | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        comm_id = self.comm_id

        comm_rank = self.comm_rank

        global_rank: int | None
        global_rank = self.global_rank

        node_name = self.node_name

        pid = self.pid

        seq = self.seq

        kind = self.kind.value

        func = self.func

        datatype = self.datatype

        count = self.count

        size_bytes = self.size_bytes

        root: int | None
        root = self.root

        peer: int | None
        peer = self.peer

        algo: None | str
        algo = self.algo

        proto: None | str
        proto = self.proto

        n_channels = self.n_channels

        n_warps = self.n_warps

        stream_id: int | None
        stream_id = self.stream_id

        graph_captured = self.graph_captured

        forced_complete = self.forced_complete

        enqueued_mono_ns = self.enqueued_mono_ns

        completed_mono_ns: int | None
        completed_mono_ns = self.completed_mono_ns

        completed_real_ns: int | None
        completed_real_ns = self.completed_real_ns

        gpu_start_ns: int | None
        gpu_start_ns = self.gpu_start_ns

        gpu_end_ns: int | None
        gpu_end_ns = self.gpu_end_ns

        timing_source = self.timing_source.value

        duration_us: float | None
        duration_us = self.duration_us

        algbw_gbs: float | None
        algbw_gbs = self.algbw_gbs

        busbw_gbs: float | None
        busbw_gbs = self.busbw_gbs

        step: int | None
        step = self.step

        user_tag: int | None | Unset
        if isinstance(self.user_tag, Unset):
            user_tag = UNSET
        else:
            user_tag = self.user_tag

        kernel_variant: None | str | Unset
        if isinstance(self.kernel_variant, Unset):
            kernel_variant = UNSET
        else:
            kernel_variant = self.kernel_variant

        sym_coll = self.sym_coll


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "comm_id": comm_id,
            "comm_rank": comm_rank,
            "global_rank": global_rank,
            "node_name": node_name,
            "pid": pid,
            "seq": seq,
            "kind": kind,
            "func": func,
            "datatype": datatype,
            "count": count,
            "size_bytes": size_bytes,
            "root": root,
            "peer": peer,
            "algo": algo,
            "proto": proto,
            "n_channels": n_channels,
            "n_warps": n_warps,
            "stream_id": stream_id,
            "graph_captured": graph_captured,
            "forced_complete": forced_complete,
            "enqueued_mono_ns": enqueued_mono_ns,
            "completed_mono_ns": completed_mono_ns,
            "completed_real_ns": completed_real_ns,
            "gpu_start_ns": gpu_start_ns,
            "gpu_end_ns": gpu_end_ns,
            "timing_source": timing_source,
            "duration_us": duration_us,
            "algbw_gbs": algbw_gbs,
            "busbw_gbs": busbw_gbs,
            "step": step,
        })
        if user_tag is not UNSET:
            field_dict["user_tag"] = user_tag
        if kernel_variant is not UNSET:
            field_dict["kernel_variant"] = kernel_variant
        if sym_coll is not UNSET:
            field_dict["sym_coll"] = sym_coll

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        comm_id = d.pop("comm_id")

        comm_rank = d.pop("comm_rank")

        def _parse_global_rank(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        global_rank = _parse_global_rank(d.pop("global_rank"))


        node_name = d.pop("node_name")

        pid = d.pop("pid")

        seq = d.pop("seq")

        kind = OpKind(d.pop("kind"))




        func = d.pop("func")

        datatype = d.pop("datatype")

        count = d.pop("count")

        size_bytes = d.pop("size_bytes")

        def _parse_root(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        root = _parse_root(d.pop("root"))


        def _parse_peer(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        peer = _parse_peer(d.pop("peer"))


        def _parse_algo(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        algo = _parse_algo(d.pop("algo"))


        def _parse_proto(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        proto = _parse_proto(d.pop("proto"))


        n_channels = d.pop("n_channels")

        n_warps = d.pop("n_warps")

        def _parse_stream_id(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        stream_id = _parse_stream_id(d.pop("stream_id"))


        graph_captured = d.pop("graph_captured")

        forced_complete = d.pop("forced_complete")

        enqueued_mono_ns = d.pop("enqueued_mono_ns")

        def _parse_completed_mono_ns(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        completed_mono_ns = _parse_completed_mono_ns(d.pop("completed_mono_ns"))


        def _parse_completed_real_ns(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        completed_real_ns = _parse_completed_real_ns(d.pop("completed_real_ns"))


        def _parse_gpu_start_ns(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        gpu_start_ns = _parse_gpu_start_ns(d.pop("gpu_start_ns"))


        def _parse_gpu_end_ns(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        gpu_end_ns = _parse_gpu_end_ns(d.pop("gpu_end_ns"))


        timing_source = TimingSource(d.pop("timing_source"))




        def _parse_duration_us(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        duration_us = _parse_duration_us(d.pop("duration_us"))


        def _parse_algbw_gbs(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        algbw_gbs = _parse_algbw_gbs(d.pop("algbw_gbs"))


        def _parse_busbw_gbs(data: object) -> float | None:
            if data is None:
                return data
            return cast(float | None, data)

        busbw_gbs = _parse_busbw_gbs(d.pop("busbw_gbs"))


        def _parse_step(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        step = _parse_step(d.pop("step"))


        def _parse_user_tag(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        user_tag = _parse_user_tag(d.pop("user_tag", UNSET))


        def _parse_kernel_variant(data: object) -> None | str | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(None | str | Unset, data)

        kernel_variant = _parse_kernel_variant(d.pop("kernel_variant", UNSET))


        sym_coll = d.pop("sym_coll", UNSET)

        op_record = cls(
            comm_id=comm_id,
            comm_rank=comm_rank,
            global_rank=global_rank,
            node_name=node_name,
            pid=pid,
            seq=seq,
            kind=kind,
            func=func,
            datatype=datatype,
            count=count,
            size_bytes=size_bytes,
            root=root,
            peer=peer,
            algo=algo,
            proto=proto,
            n_channels=n_channels,
            n_warps=n_warps,
            stream_id=stream_id,
            graph_captured=graph_captured,
            forced_complete=forced_complete,
            enqueued_mono_ns=enqueued_mono_ns,
            completed_mono_ns=completed_mono_ns,
            completed_real_ns=completed_real_ns,
            gpu_start_ns=gpu_start_ns,
            gpu_end_ns=gpu_end_ns,
            timing_source=timing_source,
            duration_us=duration_us,
            algbw_gbs=algbw_gbs,
            busbw_gbs=busbw_gbs,
            step=step,
            user_tag=user_tag,
            kernel_variant=kernel_variant,
            sym_coll=sym_coll,
        )


        op_record.additional_properties = d
        return op_record

    @property
    def additional_keys(self) -> list[str]:
        return list(self.additional_properties.keys())

    def __getitem__(self, key: str) -> Any:
        return self.additional_properties[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.additional_properties[key] = value

    def __delitem__(self, key: str) -> None:
        del self.additional_properties[key]

    def __contains__(self, key: str) -> bool:
        return key in self.additional_properties
