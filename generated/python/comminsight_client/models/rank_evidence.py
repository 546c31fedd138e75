from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.process_state import ProcessState
from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.hang_evidence import HangEvidence
  from ..models.inflight_evidence import InflightEvidence
  from ..models.progress_mark import ProgressMark





T = TypeVar("T", bound="RankEvidence")



@_attrs_define
class RankEvidence:
    """ What one rank of the communicator last did, as its node's Agent saw it at detection. Progress marks are absent until
    the rank reached that stage once (or when no data arrived).

        Attributes:
            comm_rank (int): Rank within the communicator.
            node_name (str): Node name of the rank's Agent.
            process_state (ProcessState): alive: the process exists and its heartbeat is fresh; exited: the process is gone
                or its heartbeat is stale beyond the threshold; unknown: no data (its node Agent is unreachable or has not seen
                it).
            global_rank (int | Unset): Global rank of the process; absent when unknown.
            host (str | Unset): Host name of the rank's process; absent when no data arrived.
            pid (int | Unset): Process id; absent when no data arrived.
            pid_namespace (int | Unset): Inode of the PID namespace the pid is numbered in; absent where the Profiler did
                not record it or no data arrived.
            heartbeat_age_ms (int | Unset): Time since the process's profiler heartbeat last advanced, in milliseconds;
                absent when no data arrived.
            data_age_ms (int | Unset): How old this evidence was when the diagnosis was made (sampling and transport delay),
                in milliseconds; absent when no data arrived.
            joined (bool | Unset): Whether the rank has enqueued the report's op (op.seq); absent when the report concerns
                no op or no data arrived.
            join_delay_ms (int | Unset): For straggler: how much later than the first rank this rank joined, on average over
                recent ops, in milliseconds.
            last_enqueued (ProgressMark | Unset): The latest operation a rank reached at one stage, and when.
            last_gpu_started (ProgressMark | Unset): The latest operation a rank reached at one stage, and when.
            last_completed (ProgressMark | Unset): The latest operation a rank reached at one stage, and when.
            inflight (InflightEvidence | Unset): The oldest op a rank has enqueued and not completed.
            inflight_count (int | Unset): Ops enqueued and not completed; absent when no data arrived.
            hang_evidence (HangEvidence | Unset): Network proxy progress a rank's Profiler recorded after its watchdog
                flagged this communicator and raised the activation mask by ProxyOp|ProxyStep. NCCL fixes an op's mask when the
                op is issued, so the op that was in flight at the raise gets no proxy events: the channels describe the
                communicator's ops issued after it (first_proxy_op..last_proxy_op), which queue behind the stuck one.
            same_state_ranks (str | Unset): On a master fed through relays: the other ranks this entry stands for, which a
                relay found in the same state, as runs ("0-6,8-99999"); they have no entry of their own. Absent for a rank's own
                entry.
            same_state_count (int | Unset): Ranks this entry stands for, itself included; absent for a rank's own entry.
     """

    comm_rank: int
    node_name: str
    process_state: ProcessState
    global_rank: int | Unset = UNSET
    host: str | Unset = UNSET
    pid: int | Unset = UNSET
    pid_namespace: int | Unset = UNSET
    heartbeat_age_ms: int | Unset = UNSET
    data_age_ms: int | Unset = UNSET
    joined: bool | Unset = UNSET
    join_delay_ms: int | Unset = UNSET
    last_enqueued: ProgressMark | Unset = UNSET
    last_gpu_started: ProgressMark | Unset = UNSET
    last_completed: ProgressMark | Unset = UNSET
    inflight: InflightEvidence | Unset = UNSET
    inflight_count: int | Unset = UNSET
    hang_evidence: HangEvidence | Unset = UNSET
    same_state_ranks: str | Unset = UNSET
    same_state_count: int | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.hang_evidence import HangEvidence # noqa: PLC0415
        from ..models.inflight_evidence import InflightEvidence # noqa: PLC0415
        from ..models.progress_mark import ProgressMark # noqa: PLC0415
        comm_rank = self.comm_rank

        node_name = self.node_name

        process_state = self.process_state.value

        global_rank = self.global_rank

        host = self.host

        pid = self.pid

        pid_namespace = self.pid_namespace

        heartbeat_age_ms = self.heartbeat_age_ms

        data_age_ms = self.data_age_ms

        joined = self.joined

        join_delay_ms = self.join_delay_ms

        last_enqueued: dict[str, Any] | Unset = UNSET
        if not isinstance(self.last_enqueued, Unset):
            last_enqueued = self.last_enqueued.to_dict()

        last_gpu_started: dict[str, Any] | Unset = UNSET
        if not isinstance(self.last_gpu_started, Unset):
            last_gpu_started = self.last_gpu_started.to_dict()

        last_completed: dict[str, Any] | Unset = UNSET
        if not isinstance(self.last_completed, Unset):
            last_completed = self.last_completed.to_dict()

        inflight: dict[str, Any] | Unset = UNSET
        if not isinstance(self.inflight, Unset):
            inflight = self.inflight.to_dict()

        inflight_count = self.inflight_count

        hang_evidence: dict[str, Any] | Unset = UNSET
        if not isinstance(self.hang_evidence, Unset):
            hang_evidence = self.hang_evidence.to_dict()

        same_state_ranks = self.same_state_ranks

        same_state_count = self.same_state_count


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "comm_rank": comm_rank,
            "node_name": node_name,
            "process_state": process_state,
        })
        if global_rank is not UNSET:
            field_dict["global_rank"] = global_rank
        if host is not UNSET:
            field_dict["host"] = host
        if pid is not UNSET:
            field_dict["pid"] = pid
        if pid_namespace is not UNSET:
            field_dict["pid_namespace"] = pid_namespace
        if heartbeat_age_ms is not UNSET:
            field_dict["heartbeat_age_ms"] = heartbeat_age_ms
        if data_age_ms is not UNSET:
            field_dict["data_age_ms"] = data_age_ms
        if joined is not UNSET:
            field_dict["joined"] = joined
        if join_delay_ms is not UNSET:
            field_dict["join_delay_ms"] = join_delay_ms
        if last_enqueued is not UNSET:
            field_dict["last_enqueued"] = last_enqueued
        if last_gpu_started is not UNSET:
            field_dict["last_gpu_started"] = last_gpu_started
        if last_completed is not UNSET:
            field_dict["last_completed"] = last_completed
        if inflight is not UNSET:
            field_dict["inflight"] = inflight
        if inflight_count is not UNSET:
            field_dict["inflight_count"] = inflight_count
        if hang_evidence is not UNSET:
            field_dict["hang_evidence"] = hang_evidence
        if same_state_ranks is not UNSET:
            field_dict["same_state_ranks"] = same_state_ranks
        if same_state_count is not UNSET:
            field_dict["same_state_count"] = same_state_count

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.hang_evidence import HangEvidence # noqa: PLC0415
        from ..models.inflight_evidence import InflightEvidence # noqa: PLC0415
        from ..models.progress_mark import ProgressMark # noqa: PLC0415
        d = dict(src_dict)
        comm_rank = d.pop("comm_rank")

        node_name = d.pop("node_name")

        process_state = ProcessState(d.pop("process_state"))




        global_rank = d.pop("global_rank", UNSET)

        host = d.pop("host", UNSET)

        pid = d.pop("pid", UNSET)

        pid_namespace = d.pop("pid_namespace", UNSET)

        heartbeat_age_ms = d.pop("heartbeat_age_ms", UNSET)

        data_age_ms = d.pop("data_age_ms", UNSET)

        joined = d.pop("joined", UNSET)

        join_delay_ms = d.pop("join_delay_ms", UNSET)

        _last_enqueued = d.pop("last_enqueued", UNSET)
        last_enqueued: ProgressMark | Unset
        if isinstance(_last_enqueued,  Unset):
            last_enqueued = UNSET
        else:
            last_enqueued = ProgressMark.from_dict(_last_enqueued)




        _last_gpu_started = d.pop("last_gpu_started", UNSET)
        last_gpu_started: ProgressMark | Unset
        if isinstance(_last_gpu_started,  Unset):
            last_gpu_started = UNSET
        else:
            last_gpu_started = ProgressMark.from_dict(_last_gpu_started)




        _last_completed = d.pop("last_completed", UNSET)
        last_completed: ProgressMark | Unset
        if isinstance(_last_completed,  Unset):
            last_completed = UNSET
        else:
            last_completed = ProgressMark.from_dict(_last_completed)




        _inflight = d.pop("inflight", UNSET)
        inflight: InflightEvidence | Unset
        if isinstance(_inflight,  Unset):
            inflight = UNSET
        else:
            inflight = InflightEvidence.from_dict(_inflight)




        inflight_count = d.pop("inflight_count", UNSET)

        _hang_evidence = d.pop("hang_evidence", UNSET)
        hang_evidence: HangEvidence | Unset
        if isinstance(_hang_evidence,  Unset):
            hang_evidence = UNSET
        else:
            hang_evidence = HangEvidence.from_dict(_hang_evidence)




        same_state_ranks = d.pop("same_state_ranks", UNSET)

        same_state_count = d.pop("same_state_count", UNSET)

        rank_evidence = cls(
            comm_rank=comm_rank,
            node_name=node_name,
            process_state=process_state,
            global_rank=global_rank,
            host=host,
            pid=pid,
            pid_namespace=pid_namespace,
            heartbeat_age_ms=heartbeat_age_ms,
            data_age_ms=data_age_ms,
            joined=joined,
            join_delay_ms=join_delay_ms,
            last_enqueued=last_enqueued,
            last_gpu_started=last_gpu_started,
            last_completed=last_completed,
            inflight=inflight,
            inflight_count=inflight_count,
            hang_evidence=hang_evidence,
            same_state_ranks=same_state_ranks,
            same_state_count=same_state_count,
        )

        return rank_evidence

