from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.inflight_state import InflightState
from ..models.op_kind import OpKind
from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="InflightOp")



@_attrs_define
class InflightOp:
    """ The oldest operation enqueued on a rank of a communicator and not completed yet
    (the profiler publishes the oldest one; inflight_count says how many are queued).

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
            datatype (str): NCCL datatype name, e.g. ncclFloat32.
            count (int): Element count.
            size_bytes (int): Message size (count times element size).
            root (int | None): Root rank of a rooted collective; null otherwise.
            peer (int | None): Peer rank of a send or receive; null for collectives.
            algo (None | str): NCCL algorithm (RING, TREE, ...); null when not reported.
            proto (None | str): NCCL protocol (SIMPLE, LL, LL128); null when not reported.
            n_channels (int | None): Channels NCCL reported for the op, when known.
            channels_started (int):
            channels_completed (int):
            state (InflightState): enqueued (host enqueued, no GPU channel started yet) or gpu_started (at least one GPU
                channel started).
            inflight_count (int): Ops in flight on this rank and communicator, this one included.
            enqueued_mono_ns (int):
            enqueued_real_ns (int):
            gpu_started_mono_ns (int | None):
            age_ms (int): Time since enqueue, measured on the rank's node.
            hang_flagged (bool): The profiler's watchdog flagged this op as past the hang threshold.
            pid_namespace (int | None | Unset): Inode of the PID namespace pid is numbered in: pods on one node each number
                their own, so with pid it names the process. Null where the Profiler did not record it.
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
    n_channels: int | None
    channels_started: int
    channels_completed: int
    state: InflightState
    inflight_count: int
    enqueued_mono_ns: int
    enqueued_real_ns: int
    gpu_started_mono_ns: int | None
    age_ms: int
    hang_flagged: bool
    pid_namespace: int | None | Unset = UNSET
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

        n_channels: int | None
        n_channels = self.n_channels

        channels_started = self.channels_started

        channels_completed = self.channels_completed

        state = self.state.value

        inflight_count = self.inflight_count

        enqueued_mono_ns = self.enqueued_mono_ns

        enqueued_real_ns = self.enqueued_real_ns

        gpu_started_mono_ns: int | None
        gpu_started_mono_ns = self.gpu_started_mono_ns

        age_ms = self.age_ms

        hang_flagged = self.hang_flagged

        pid_namespace: int | None | Unset
        if isinstance(self.pid_namespace, Unset):
            pid_namespace = UNSET
        else:
            pid_namespace = self.pid_namespace


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
            "channels_started": channels_started,
            "channels_completed": channels_completed,
            "state": state,
            "inflight_count": inflight_count,
            "enqueued_mono_ns": enqueued_mono_ns,
            "enqueued_real_ns": enqueued_real_ns,
            "gpu_started_mono_ns": gpu_started_mono_ns,
            "age_ms": age_ms,
            "hang_flagged": hang_flagged,
        })
        if pid_namespace is not UNSET:
            field_dict["pid_namespace"] = pid_namespace

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


        def _parse_n_channels(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        n_channels = _parse_n_channels(d.pop("n_channels"))


        channels_started = d.pop("channels_started")

        channels_completed = d.pop("channels_completed")

        state = InflightState(d.pop("state"))




        inflight_count = d.pop("inflight_count")

        enqueued_mono_ns = d.pop("enqueued_mono_ns")

        enqueued_real_ns = d.pop("enqueued_real_ns")

        def _parse_gpu_started_mono_ns(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        gpu_started_mono_ns = _parse_gpu_started_mono_ns(d.pop("gpu_started_mono_ns"))


        age_ms = d.pop("age_ms")

        hang_flagged = d.pop("hang_flagged")

        def _parse_pid_namespace(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        pid_namespace = _parse_pid_namespace(d.pop("pid_namespace", UNSET))


        inflight_op = cls(
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
            channels_started=channels_started,
            channels_completed=channels_completed,
            state=state,
            inflight_count=inflight_count,
            enqueued_mono_ns=enqueued_mono_ns,
            enqueued_real_ns=enqueued_real_ns,
            gpu_started_mono_ns=gpu_started_mono_ns,
            age_ms=age_ms,
            hang_flagged=hang_flagged,
            pid_namespace=pid_namespace,
        )


        inflight_op.additional_properties = d
        return inflight_op

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
