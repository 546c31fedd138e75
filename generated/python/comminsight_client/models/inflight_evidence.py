from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.op_class import OpClass
from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.proxy_progress import ProxyProgress





T = TypeVar("T", bound="InflightEvidence")



@_attrs_define
class InflightEvidence:
    """ The oldest op a rank has enqueued and not completed.

        Attributes:
            kind (OpClass): coll = a collective; p2p = a send or receive.
            func (str): Function name as NCCL reported it.
            seq (int): Sequence number (as in OpInfo.seq).
            count (int): Element count.
            datatype (str): NCCL datatype name.
            size_bytes (int): Message size: element count times datatype size.
            age_ms (int): Time in flight at detection, in milliseconds, measured on the rank's node.
            n_channels (int): Channels NCCL assigned.
            channels_started (int): Channels whose kernel start was seen.
            channels_completed (int): Channels whose kernel stop was seen.
            root (int | Unset): Root rank of a rooted collective; absent otherwise.
            peer (int | Unset): Peer rank of a send/receive; absent otherwise.
            proxy (list[ProxyProgress] | Unset): Proxy progress per channel and peer; absent when proxy events were not
                enabled.
            gpu_timed (bool | Unset): false: NCCL was not asked to time this op on the GPU
                (COMMINSIGHT_PROFILER_GPU_TIMING=sampled) and no later kernel of its communicator has started on this rank, so
                it may have completed already: 'in flight' is then only unproven. Absent where the op is GPU-timed.
     """

    kind: OpClass
    func: str
    seq: int
    count: int
    datatype: str
    size_bytes: int
    age_ms: int
    n_channels: int
    channels_started: int
    channels_completed: int
    root: int | Unset = UNSET
    peer: int | Unset = UNSET
    proxy: list[ProxyProgress] | Unset = UNSET
    gpu_timed: bool | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.proxy_progress import ProxyProgress # noqa: PLC0415
        kind = self.kind.value

        func = self.func

        seq = self.seq

        count = self.count

        datatype = self.datatype

        size_bytes = self.size_bytes

        age_ms = self.age_ms

        n_channels = self.n_channels

        channels_started = self.channels_started

        channels_completed = self.channels_completed

        root = self.root

        peer = self.peer

        proxy: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.proxy, Unset):
            proxy = []
            for proxy_item_data in self.proxy:
                proxy_item = proxy_item_data.to_dict()
                proxy.append(proxy_item)



        gpu_timed = self.gpu_timed


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "kind": kind,
            "func": func,
            "seq": seq,
            "count": count,
            "datatype": datatype,
            "size_bytes": size_bytes,
            "age_ms": age_ms,
            "n_channels": n_channels,
            "channels_started": channels_started,
            "channels_completed": channels_completed,
        })
        if root is not UNSET:
            field_dict["root"] = root
        if peer is not UNSET:
            field_dict["peer"] = peer
        if proxy is not UNSET:
            field_dict["proxy"] = proxy
        if gpu_timed is not UNSET:
            field_dict["gpu_timed"] = gpu_timed

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.proxy_progress import ProxyProgress # noqa: PLC0415
        d = dict(src_dict)
        kind = OpClass(d.pop("kind"))




        func = d.pop("func")

        seq = d.pop("seq")

        count = d.pop("count")

        datatype = d.pop("datatype")

        size_bytes = d.pop("size_bytes")

        age_ms = d.pop("age_ms")

        n_channels = d.pop("n_channels")

        channels_started = d.pop("channels_started")

        channels_completed = d.pop("channels_completed")

        root = d.pop("root", UNSET)

        peer = d.pop("peer", UNSET)

        _proxy = d.pop("proxy", UNSET)
        proxy: list[ProxyProgress] | Unset = UNSET
        if _proxy is not UNSET:
            proxy = []
            for proxy_item_data in _proxy:
                proxy_item = ProxyProgress.from_dict(proxy_item_data)



                proxy.append(proxy_item)


        gpu_timed = d.pop("gpu_timed", UNSET)

        inflight_evidence = cls(
            kind=kind,
            func=func,
            seq=seq,
            count=count,
            datatype=datatype,
            size_bytes=size_bytes,
            age_ms=age_ms,
            n_channels=n_channels,
            channels_started=channels_started,
            channels_completed=channels_completed,
            root=root,
            peer=peer,
            proxy=proxy,
            gpu_timed=gpu_timed,
        )

        return inflight_evidence

