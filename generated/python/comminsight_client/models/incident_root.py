from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.verdict import Verdict
from ..types import UNSET, Unset
from typing import cast

if TYPE_CHECKING:
  from ..models.comm_ref import CommRef
  from ..models.culprit import Culprit
  from ..models.op_info import OpInfo





T = TypeVar("T", bound="IncidentRoot")



@_attrs_define
class IncidentRoot:
    """ The report that explains the others: its culprits, verdict, communicator and op.

        Attributes:
            report_id (str): The root hang report (HangReport.report_id).
            verdict (Verdict): rank_not_joined: some ranks have not enqueued the operation (op.seq) while the others wait in
                it (culprits: the missing ranks). op_mismatch: ranks enqueued different operations (func, count, datatype or
                root/peer) at the same sequence number. all_joined_none_complete: every rank enqueued the op and none completes
                (culprits: a peer the proxy/network evidence points at, if any). stuck_outside_nccl: no op in flight and no
                progress for longer than the threshold while other ranks wait. process_died: a rank's process is gone or its
                heartbeat is stale. comm_init_stuck: communicator initialization has not finished on some ranks. straggler: no
                hang, but some ranks join ops consistently later than the others. inconclusive: the evidence is insufficient
                (e.g. ranks whose node Agent is unreachable). rank_left: ranks left the communicator while the others wait in
                the operation (op), which can therefore never complete: they finalized it (ncclCommDestroy or ncclCommAbort; the
                uneven-inputs end of data-parallel training, where a rank out of data destroys its process group and exits), or
                their process ended and its rows were retired (culprits: the ranks that left; the reason says how and whether
                the process exited). Added after release 0.1.0, as the last value: a reader of an earlier release does not know
                it.
            comm (CommRef): Identity of the communicator.
            culprits (list[Culprit]): The ranks the root report blames; empty when its evidence names none (the incident
                then says the cause is not known).
            summary (str): The root report's summary.
            op (OpInfo | Unset): An operation on the communicator, identified by its sequence number.
     """

    report_id: str
    verdict: Verdict
    comm: CommRef
    culprits: list[Culprit]
    summary: str
    op: OpInfo | Unset = UNSET





    def to_dict(self) -> dict[str, Any]:
        from ..models.comm_ref import CommRef # noqa: PLC0415
        from ..models.culprit import Culprit # noqa: PLC0415
        from ..models.op_info import OpInfo # noqa: PLC0415
        report_id = self.report_id

        verdict = self.verdict.value

        comm = self.comm.to_dict()

        culprits = []
        for culprits_item_data in self.culprits:
            culprits_item = culprits_item_data.to_dict()
            culprits.append(culprits_item)



        summary = self.summary

        op: dict[str, Any] | Unset = UNSET
        if not isinstance(self.op, Unset):
            op = self.op.to_dict()


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "report_id": report_id,
            "verdict": verdict,
            "comm": comm,
            "culprits": culprits,
            "summary": summary,
        })
        if op is not UNSET:
            field_dict["op"] = op

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.comm_ref import CommRef # noqa: PLC0415
        from ..models.culprit import Culprit # noqa: PLC0415
        from ..models.op_info import OpInfo # noqa: PLC0415
        d = dict(src_dict)
        report_id = d.pop("report_id")

        verdict = Verdict(d.pop("verdict"))




        comm = CommRef.from_dict(d.pop("comm"))




        culprits = []
        _culprits = d.pop("culprits")
        for culprits_item_data in (_culprits):
            culprits_item = Culprit.from_dict(culprits_item_data)



            culprits.append(culprits_item)


        summary = d.pop("summary")

        _op = d.pop("op", UNSET)
        op: OpInfo | Unset
        if isinstance(_op,  Unset):
            op = UNSET
        else:
            op = OpInfo.from_dict(_op)




        incident_root = cls(
            report_id=report_id,
            verdict=verdict,
            comm=comm,
            culprits=culprits,
            summary=summary,
            op=op,
        )

        return incident_root

