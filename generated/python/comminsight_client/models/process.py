from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.ingest_state import IngestState
from ..types import UNSET, Unset
from typing import cast






T = TypeVar("T", bound="Process")



@_attrs_define
class Process:
    """ One profiled process (one Profiler SHM file).

        Attributes:
            pid (int):
            node_name (str): Agent node name (COMMINSIGHT_AGENT_NODE_NAME, default the host name); unique in a job.
            process_name (str): Executable and first arguments, as the profiler recorded them.
            job_id (None | str): Job id from the launcher environment, if any.
            global_rank (int | None): RANK of the process, if the launcher set it.
            local_rank (int | None): LOCAL_RANK of the process, if set.
            world_size (int | None):
            cuda_device (int | None): CUDA device ordinal as the process sees it.
            device_uuid (None | str): GPU UUID (when the profiler could load the CUDA runtime).
            comm_ids (list[str]): Communicators this process is a member of, ascending.
            shm_file (str): Path of the process's SHM file as the agent opened it.
            shm_abi_version (int): ABI version in the SHM header (shm protocol version).
            ingest_state (IngestState): How the agent consumes a process's SHM file. active: being read; draining: the
                producer
                exited and its remaining data is being read; retired: drained and closed; quarantined:
                the file was refused (unknown ABI version, corrupt header or truncated) and is not read.
            ingest_state_reason (None | str): Why a file is quarantined; null otherwise.
            alive (bool): The pid exists and the heartbeat is fresh.
            heartbeat_mono_ns (int | None): Last profiler heartbeat in the SHM header.
            heartbeat_age_ms (int | None):
            started_real_ns (int):
            nccl_profiler_abi_version (int | None): The ncclProfiler_vN that NCCL picked (4, 5, ...).
            event_mask (int | None): Current NCCL event activation mask of the process.
            records_read_total (int):
            records_overwritten_total (int): Ring slots overwritten before the agent read them.
            fifo_events_dropped_total (int): Hang events the profiler dropped because the FIFO was full or unread.
            pid_namespace (int | None | Unset): Inode of the PID namespace pid is numbered in: pods on one node each number
                their own, so with pid it names the process. Null where the Profiler did not record it.
     """

    pid: int
    node_name: str
    process_name: str
    job_id: None | str
    global_rank: int | None
    local_rank: int | None
    world_size: int | None
    cuda_device: int | None
    device_uuid: None | str
    comm_ids: list[str]
    shm_file: str
    shm_abi_version: int
    ingest_state: IngestState
    ingest_state_reason: None | str
    alive: bool
    heartbeat_mono_ns: int | None
    heartbeat_age_ms: int | None
    started_real_ns: int
    nccl_profiler_abi_version: int | None
    event_mask: int | None
    records_read_total: int
    records_overwritten_total: int
    fifo_events_dropped_total: int
    pid_namespace: int | None | Unset = UNSET
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        pid = self.pid

        node_name = self.node_name

        process_name = self.process_name

        job_id: None | str
        job_id = self.job_id

        global_rank: int | None
        global_rank = self.global_rank

        local_rank: int | None
        local_rank = self.local_rank

        world_size: int | None
        world_size = self.world_size

        cuda_device: int | None
        cuda_device = self.cuda_device

        device_uuid: None | str
        device_uuid = self.device_uuid

        comm_ids = self.comm_ids



        shm_file = self.shm_file

        shm_abi_version = self.shm_abi_version

        ingest_state = self.ingest_state.value

        ingest_state_reason: None | str
        ingest_state_reason = self.ingest_state_reason

        alive = self.alive

        heartbeat_mono_ns: int | None
        heartbeat_mono_ns = self.heartbeat_mono_ns

        heartbeat_age_ms: int | None
        heartbeat_age_ms = self.heartbeat_age_ms

        started_real_ns = self.started_real_ns

        nccl_profiler_abi_version: int | None
        nccl_profiler_abi_version = self.nccl_profiler_abi_version

        event_mask: int | None
        event_mask = self.event_mask

        records_read_total = self.records_read_total

        records_overwritten_total = self.records_overwritten_total

        fifo_events_dropped_total = self.fifo_events_dropped_total

        pid_namespace: int | None | Unset
        if isinstance(self.pid_namespace, Unset):
            pid_namespace = UNSET
        else:
            pid_namespace = self.pid_namespace


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "pid": pid,
            "node_name": node_name,
            "process_name": process_name,
            "job_id": job_id,
            "global_rank": global_rank,
            "local_rank": local_rank,
            "world_size": world_size,
            "cuda_device": cuda_device,
            "device_uuid": device_uuid,
            "comm_ids": comm_ids,
            "shm_file": shm_file,
            "shm_abi_version": shm_abi_version,
            "ingest_state": ingest_state,
            "ingest_state_reason": ingest_state_reason,
            "alive": alive,
            "heartbeat_mono_ns": heartbeat_mono_ns,
            "heartbeat_age_ms": heartbeat_age_ms,
            "started_real_ns": started_real_ns,
            "nccl_profiler_abi_version": nccl_profiler_abi_version,
            "event_mask": event_mask,
            "records_read_total": records_read_total,
            "records_overwritten_total": records_overwritten_total,
            "fifo_events_dropped_total": fifo_events_dropped_total,
        })
        if pid_namespace is not UNSET:
            field_dict["pid_namespace"] = pid_namespace

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        d = dict(src_dict)
        pid = d.pop("pid")

        node_name = d.pop("node_name")

        process_name = d.pop("process_name")

        def _parse_job_id(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        job_id = _parse_job_id(d.pop("job_id"))


        def _parse_global_rank(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        global_rank = _parse_global_rank(d.pop("global_rank"))


        def _parse_local_rank(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        local_rank = _parse_local_rank(d.pop("local_rank"))


        def _parse_world_size(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        world_size = _parse_world_size(d.pop("world_size"))


        def _parse_cuda_device(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        cuda_device = _parse_cuda_device(d.pop("cuda_device"))


        def _parse_device_uuid(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        device_uuid = _parse_device_uuid(d.pop("device_uuid"))


        comm_ids = cast(list[str], d.pop("comm_ids"))


        shm_file = d.pop("shm_file")

        shm_abi_version = d.pop("shm_abi_version")

        ingest_state = IngestState(d.pop("ingest_state"))




        def _parse_ingest_state_reason(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        ingest_state_reason = _parse_ingest_state_reason(d.pop("ingest_state_reason"))


        alive = d.pop("alive")

        def _parse_heartbeat_mono_ns(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        heartbeat_mono_ns = _parse_heartbeat_mono_ns(d.pop("heartbeat_mono_ns"))


        def _parse_heartbeat_age_ms(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        heartbeat_age_ms = _parse_heartbeat_age_ms(d.pop("heartbeat_age_ms"))


        started_real_ns = d.pop("started_real_ns")

        def _parse_nccl_profiler_abi_version(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        nccl_profiler_abi_version = _parse_nccl_profiler_abi_version(d.pop("nccl_profiler_abi_version"))


        def _parse_event_mask(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        event_mask = _parse_event_mask(d.pop("event_mask"))


        records_read_total = d.pop("records_read_total")

        records_overwritten_total = d.pop("records_overwritten_total")

        fifo_events_dropped_total = d.pop("fifo_events_dropped_total")

        def _parse_pid_namespace(data: object) -> int | None | Unset:
            if data is None:
                return data
            if isinstance(data, Unset):
                return data
            return cast(int | None | Unset, data)

        pid_namespace = _parse_pid_namespace(d.pop("pid_namespace", UNSET))


        process = cls(
            pid=pid,
            node_name=node_name,
            process_name=process_name,
            job_id=job_id,
            global_rank=global_rank,
            local_rank=local_rank,
            world_size=world_size,
            cuda_device=cuda_device,
            device_uuid=device_uuid,
            comm_ids=comm_ids,
            shm_file=shm_file,
            shm_abi_version=shm_abi_version,
            ingest_state=ingest_state,
            ingest_state_reason=ingest_state_reason,
            alive=alive,
            heartbeat_mono_ns=heartbeat_mono_ns,
            heartbeat_age_ms=heartbeat_age_ms,
            started_real_ns=started_real_ns,
            nccl_profiler_abi_version=nccl_profiler_abi_version,
            event_mask=event_mask,
            records_read_total=records_read_total,
            records_overwritten_total=records_overwritten_total,
            fifo_events_dropped_total=fifo_events_dropped_total,
            pid_namespace=pid_namespace,
        )


        process.additional_properties = d
        return process

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
