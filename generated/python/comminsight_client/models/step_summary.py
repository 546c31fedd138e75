from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..types import UNSET, Unset
from typing import cast
from typing import Literal, cast

if TYPE_CHECKING:
  from ..models.anomaly import Anomaly
  from ..models.comm_seq_span import CommSeqSpan
  from ..models.op_ref import OpRef
  from ..models.producer import Producer
  from ..models.recovery import Recovery
  from ..models.role_stats import RoleStats
  from ..models.slowest_op import SlowestOp





T = TypeVar("T", bound="StepSummary")



@_attrs_define
class StepSummary:
    """ One training Step recovered by the Semantic Engine from the completed-op stream of one GPU. Written one per line
    (JSON lines) under semantics/step/, served by the Agent API, printed by `comminsight steps --json`. A Step spans
    from the start of its first op to the completion of its last op; the Semantic Engine's template decides which op
    begins and which ends a Step. Arrays are in a defined order (roles by name, anomalies by kind then description) so
    that a resumed engine writes byte-identical output.

        Attributes:
            schema_version (Literal[1]): Version of this record format; readers refuse other versions.
            host (str): Host name of the GPU's process.
            global_rank (int): Global rank of the GPU's process (RANK). For inputs that lack it (NVIDIA Inspector logs) the
                engine uses the GPU's rank in its largest communicator.
            step_index (int): Index of this Step: 0 for the first Step recovered, then consecutive. Start-up ops (barriers,
                parameter broadcasts) are in no Step, so the training's first Step is 0; with recovery method job the same index
                is the same iteration on every GPU of the job.
            start_real_ns (int): CLOCK_REALTIME time at which the Step's first op started, nanoseconds since the Unix epoch.
            end_real_ns (int): CLOCK_REALTIME time at which the Step's last op completed, nanoseconds since the Unix epoch.
            duration_ns (int): end - start in nanoseconds (from the monotonic times when present).
            op_count (int): Number of ops in the Step.
            warmup (bool): True when the Step falls within the template's warm-up tolerance (early Steps that may differ
                from the steady pattern).
            total_bytes (int): Sum of the message sizes of the Step's ops, in bytes.
            total_op_time_ns (int): Sum of the execution times of the Step's ops; ops on different streams overlap, so it
                can exceed duration_ns.
            busbw_gbs (float): Bus bandwidth of the Step's ops in GB/s, weighted by execution time: sum(busbw x time) /
                sum(time); 0 when total_op_time_ns is 0.
            roles (list[RoleStats]): Per-role totals, one entry per role present in the Step, ordered by role name.
            slowest_op (SlowestOp): The Step's slowest op and what it was.
            first_op (OpRef): Points at one op of this GPU's stream: the communicator, and the op's sequence number in it.
            last_op (OpRef): Points at one op of this GPU's stream: the communicator, and the op's sequence number in it.
            anomalies (list[Anomaly]): What was unusual about the Step; empty when nothing was. Ordered by kind, then
                description.
            recovery (Recovery): How the Step was recovered.
            produced_by (Producer): The engine run that produced the record.
            job_id (str | Unset): Job identifier (e.g. SLURM_JOB_ID or TORCHELASTIC_RUN_ID); absent when the input did not
                record it (e.g. NVIDIA Inspector logs).
            pid (int | Unset): Process id driving the GPU; absent when unknown.
            local_rank (int | Unset): Local rank on the node (LOCAL_RANK); absent when unknown.
            cuda_device (int | Unset): CUDA device ordinal of the GPU within its process; absent when unknown.
            start_mono_ns (int | Unset): CLOCK_MONOTONIC time (on the GPU's host) at which the Step's first op started;
                absent when the input had no monotonic times (NVIDIA Inspector logs).
            end_mono_ns (int | Unset): CLOCK_MONOTONIC time at which the Step's last op completed; absent when the input had
                no monotonic times.
            period_ns (int | Unset): Start of the next Step minus start of this one: the iteration time including compute
                after the last op. Absent when the next Step had not begun when this record was written.
            micro_step_count (int | Unset): Micro-batches recognized in the Step (gradient accumulation); absent when the
                template does not count them.
            comm_seqs (list[CommSeqSpan] | Unset): The Step's boundary candidates: for each communicator this GPU used in
                the Step (its collectives and its sends/receives counted apart), the seq of the Step's first and of its last op
                on that communicator, and how many of the Step's ops were on it. NCCL's collective seq (coll_sn) is the same on
                every member rank for the same collective, so two GPUs of one communicator took the same iteration exactly when
                their coll spans on it are equal; the master reconciles the step indices of nodes that numbered their Steps
                apart through these spans, never through op streams. P2P counters are each rank's own and need not agree across
                ranks. Ordered by kind (coll first), then comm_id; a Step that used more than 64 (kind, communicator) pairs
                lists the first 64 in that order. Absent when the engine did not track them: records of an engine that predates
                this field, or a Step left open in a checkpoint that predates it.
     """

    schema_version: Literal[1]
    host: str
    global_rank: int
    step_index: int
    start_real_ns: int
    end_real_ns: int
    duration_ns: int
    op_count: int
    warmup: bool
    total_bytes: int
    total_op_time_ns: int
    busbw_gbs: float
    roles: list[RoleStats]
    slowest_op: SlowestOp
    first_op: OpRef
    last_op: OpRef
    anomalies: list[Anomaly]
    recovery: Recovery
    produced_by: Producer
    job_id: str | Unset = UNSET
    pid: int | Unset = UNSET
    local_rank: int | Unset = UNSET
    cuda_device: int | Unset = UNSET
    start_mono_ns: int | Unset = UNSET
    end_mono_ns: int | Unset = UNSET
    period_ns: int | Unset = UNSET
    micro_step_count: int | Unset = UNSET
    comm_seqs: list[CommSeqSpan] | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.anomaly import Anomaly # noqa: PLC0415
        from ..models.comm_seq_span import CommSeqSpan # noqa: PLC0415
        from ..models.op_ref import OpRef # noqa: PLC0415
        from ..models.producer import Producer # noqa: PLC0415
        from ..models.recovery import Recovery # noqa: PLC0415
        from ..models.role_stats import RoleStats # noqa: PLC0415
        from ..models.slowest_op import SlowestOp # noqa: PLC0415
        schema_version = self.schema_version

        host = self.host

        global_rank = self.global_rank

        step_index = self.step_index

        start_real_ns = self.start_real_ns

        end_real_ns = self.end_real_ns

        duration_ns = self.duration_ns

        op_count = self.op_count

        warmup = self.warmup

        total_bytes = self.total_bytes

        total_op_time_ns = self.total_op_time_ns

        busbw_gbs = self.busbw_gbs

        roles = []
        for roles_item_data in self.roles:
            roles_item = roles_item_data.to_dict()
            roles.append(roles_item)



        slowest_op = self.slowest_op.to_dict()

        first_op = self.first_op.to_dict()

        last_op = self.last_op.to_dict()

        anomalies = []
        for anomalies_item_data in self.anomalies:
            anomalies_item = anomalies_item_data.to_dict()
            anomalies.append(anomalies_item)



        recovery = self.recovery.to_dict()

        produced_by = self.produced_by.to_dict()

        job_id = self.job_id

        pid = self.pid

        local_rank = self.local_rank

        cuda_device = self.cuda_device

        start_mono_ns = self.start_mono_ns

        end_mono_ns = self.end_mono_ns

        period_ns = self.period_ns

        micro_step_count = self.micro_step_count

        comm_seqs: list[dict[str, Any]] | Unset = UNSET
        if not isinstance(self.comm_seqs, Unset):
            comm_seqs = []
            for comm_seqs_item_data in self.comm_seqs:
                comm_seqs_item = comm_seqs_item_data.to_dict()
                comm_seqs.append(comm_seqs_item)




        field_dict: dict[str, Any] = {}

        field_dict.update({
            "schema_version": schema_version,
            "host": host,
            "global_rank": global_rank,
            "step_index": step_index,
            "start_real_ns": start_real_ns,
            "end_real_ns": end_real_ns,
            "duration_ns": duration_ns,
            "op_count": op_count,
            "warmup": warmup,
            "total_bytes": total_bytes,
            "total_op_time_ns": total_op_time_ns,
            "busbw_gbs": busbw_gbs,
            "roles": roles,
            "slowest_op": slowest_op,
            "first_op": first_op,
            "last_op": last_op,
            "anomalies": anomalies,
            "recovery": recovery,
            "produced_by": produced_by,
        })
        if job_id is not UNSET:
            field_dict["job_id"] = job_id
        if pid is not UNSET:
            field_dict["pid"] = pid
        if local_rank is not UNSET:
            field_dict["local_rank"] = local_rank
        if cuda_device is not UNSET:
            field_dict["cuda_device"] = cuda_device
        if start_mono_ns is not UNSET:
            field_dict["start_mono_ns"] = start_mono_ns
        if end_mono_ns is not UNSET:
            field_dict["end_mono_ns"] = end_mono_ns
        if period_ns is not UNSET:
            field_dict["period_ns"] = period_ns
        if micro_step_count is not UNSET:
            field_dict["micro_step_count"] = micro_step_count
        if comm_seqs is not UNSET:
            field_dict["comm_seqs"] = comm_seqs

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.anomaly import Anomaly # noqa: PLC0415
        from ..models.comm_seq_span import CommSeqSpan # noqa: PLC0415
        from ..models.op_ref import OpRef # noqa: PLC0415
        from ..models.producer import Producer # noqa: PLC0415
        from ..models.recovery import Recovery # noqa: PLC0415
        from ..models.role_stats import RoleStats # noqa: PLC0415
        from ..models.slowest_op import SlowestOp # noqa: PLC0415
        d = dict(src_dict)
        schema_version = cast(Literal[1] , d.pop("schema_version"))
        if schema_version != 1:
            raise ValueError(f"schema_version must match const 1, got '{schema_version}'")

        host = d.pop("host")

        global_rank = d.pop("global_rank")

        step_index = d.pop("step_index")

        start_real_ns = d.pop("start_real_ns")

        end_real_ns = d.pop("end_real_ns")

        duration_ns = d.pop("duration_ns")

        op_count = d.pop("op_count")

        warmup = d.pop("warmup")

        total_bytes = d.pop("total_bytes")

        total_op_time_ns = d.pop("total_op_time_ns")

        busbw_gbs = d.pop("busbw_gbs")

        roles = []
        _roles = d.pop("roles")
        for roles_item_data in (_roles):
            roles_item = RoleStats.from_dict(roles_item_data)



            roles.append(roles_item)


        slowest_op = SlowestOp.from_dict(d.pop("slowest_op"))




        first_op = OpRef.from_dict(d.pop("first_op"))




        last_op = OpRef.from_dict(d.pop("last_op"))




        anomalies = []
        _anomalies = d.pop("anomalies")
        for anomalies_item_data in (_anomalies):
            anomalies_item = Anomaly.from_dict(anomalies_item_data)



            anomalies.append(anomalies_item)


        recovery = Recovery.from_dict(d.pop("recovery"))




        produced_by = Producer.from_dict(d.pop("produced_by"))




        job_id = d.pop("job_id", UNSET)

        pid = d.pop("pid", UNSET)

        local_rank = d.pop("local_rank", UNSET)

        cuda_device = d.pop("cuda_device", UNSET)

        start_mono_ns = d.pop("start_mono_ns", UNSET)

        end_mono_ns = d.pop("end_mono_ns", UNSET)

        period_ns = d.pop("period_ns", UNSET)

        micro_step_count = d.pop("micro_step_count", UNSET)

        _comm_seqs = d.pop("comm_seqs", UNSET)
        comm_seqs: list[CommSeqSpan] | Unset = UNSET
        if _comm_seqs is not UNSET:
            comm_seqs = []
            for comm_seqs_item_data in _comm_seqs:
                comm_seqs_item = CommSeqSpan.from_dict(comm_seqs_item_data)



                comm_seqs.append(comm_seqs_item)


        step_summary = cls(
            schema_version=schema_version,
            host=host,
            global_rank=global_rank,
            step_index=step_index,
            start_real_ns=start_real_ns,
            end_real_ns=end_real_ns,
            duration_ns=duration_ns,
            op_count=op_count,
            warmup=warmup,
            total_bytes=total_bytes,
            total_op_time_ns=total_op_time_ns,
            busbw_gbs=busbw_gbs,
            roles=roles,
            slowest_op=slowest_op,
            first_op=first_op,
            last_op=last_op,
            anomalies=anomalies,
            recovery=recovery,
            produced_by=produced_by,
            job_id=job_id,
            pid=pid,
            local_rank=local_rank,
            cuda_device=cuda_device,
            start_mono_ns=start_mono_ns,
            end_mono_ns=end_mono_ns,
            period_ns=period_ns,
            micro_step_count=micro_step_count,
            comm_seqs=comm_seqs,
        )

        return step_summary

