from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.cause_link import CauseLink
from ..models.verdict import Verdict
from typing import cast

if TYPE_CHECKING:
  from ..models.comm_ref import CommRef





T = TypeVar("T", bound="IncidentConsequence")



@_attrs_define
class IncidentConsequence:
    """ A report blocked behind the root, and the link that places it there.

        Attributes:
            report_id (str): The consequence's hang report.
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
            follows_from (str): The report it follows from directly (the root, or another consequence on the way to it).
            link (CauseLink): Why a report follows from another. culprit_waits: the ranks it blames wait in the other
                report's op (a rank stuck there cannot issue ops on this communicator). same_culprit: it blames the same process
                as the other, which explains it more precisely. waited_there_first: its waiting ranks are stuck in the other
                report's op: their kernel there runs and does not finish while their kernel here never started, or they have had
                that op in flight since before they enqueued this one (a process's ops run in order on its streams). p2p_peer: a
                rank it waits for in a send/receive is blocked in the other report's op. missing_member: it waits for ranks of
                which no data arrived, and every process that could be them is blocked behind the other report's root (or is its
                culprit).
            reason (str): The link in words, naming the ranks and ops that make it.
     """

    report_id: str
    verdict: Verdict
    comm: CommRef
    follows_from: str
    link: CauseLink
    reason: str





    def to_dict(self) -> dict[str, Any]:
        from ..models.comm_ref import CommRef # noqa: PLC0415
        report_id = self.report_id

        verdict = self.verdict.value

        comm = self.comm.to_dict()

        follows_from = self.follows_from

        link = self.link.value

        reason = self.reason


        field_dict: dict[str, Any] = {}

        field_dict.update({
            "report_id": report_id,
            "verdict": verdict,
            "comm": comm,
            "follows_from": follows_from,
            "link": link,
            "reason": reason,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.comm_ref import CommRef # noqa: PLC0415
        d = dict(src_dict)
        report_id = d.pop("report_id")

        verdict = Verdict(d.pop("verdict"))




        comm = CommRef.from_dict(d.pop("comm"))




        follows_from = d.pop("follows_from")

        link = CauseLink(d.pop("link"))




        reason = d.pop("reason")

        incident_consequence = cls(
            report_id=report_id,
            verdict=verdict,
            comm=comm,
            follows_from=follows_from,
            link=link,
            reason=reason,
        )

        return incident_consequence

