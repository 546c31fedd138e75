from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, BinaryIO, TextIO, TYPE_CHECKING, Generator

from attrs import define as _attrs_define
from attrs import field as _attrs_field

from ..types import UNSET, Unset

from ..models.communicator_state import CommunicatorState
from ..models.name_source import NameSource
from typing import cast

if TYPE_CHECKING:
  from ..models.comm_rank import CommRank





T = TypeVar("T", bound="Communicator")



@_attrs_define
class Communicator:
    """ One NCCL communicator: identity, and live progress of every rank this agent sees (its
    node's ranks; on a master, the ranks of every node, joined by comm_id).

        Attributes:
            comm_id (str): NCCL communicator id (commId in profiler ABI v5+, commHash in v4), 16 lowercase hex digits, zero
                padded.
            name (None | str): commName, "<group_desc>:<group_name>" when Inject named it; null when NCCL passed none.
            name_source (NameSource): Where a communicator's name came from - none; NCCL's commName (shm v1 name_source); or
                CommInsight Inject, when the commName is one Inject set for that process (its metadata/inject group lines,
                inject-metadata v1, naming nccl-config or torch-option).
            nranks (int):
            nnodes (int | None): nNodes as NCCL reported it at init.
            state (CommunicatorState): active (initialized on at least one rank seen and not finalized on all of them) or
                finalized (on every rank seen).
            ranks_seen (list[int]): comm ranks whose data reaches this agent, ascending.
            complete (bool): ranks_seen covers all nranks (hang diagnosis across the whole communicator is possible).
            nodes (list[str]): Nodes holding ranks_seen, ascending. On a master fed through relays, only the nodes of the
                entries it holds (a rank's own, or a class's representative, see CommRank.same_state_ranks); ask a relay for the
                nodes below it.
            created_real_ns (int): First init of the communicator seen on any rank.
            finalized_real_ns (int | None):
            ops_completed_total (int): Summed over ranks_seen.
            bytes_completed_total (int): Summed over ranks_seen.
            ranks_inflight (int): Ranks in ranks_seen with at least one op in flight.
            oldest_inflight_age_ms (int | None): Age of the oldest op in flight on any rank seen; null when none.
            open_hang_report_ids (list[str]):
            ranks (list[CommRank] | None): One entry per rank in ranks_seen, by comm_rank, in the full view; null in the
                summary view.
     """

    comm_id: str
    name: None | str
    name_source: NameSource
    nranks: int
    nnodes: int | None
    state: CommunicatorState
    ranks_seen: list[int]
    complete: bool
    nodes: list[str]
    created_real_ns: int
    finalized_real_ns: int | None
    ops_completed_total: int
    bytes_completed_total: int
    ranks_inflight: int
    oldest_inflight_age_ms: int | None
    open_hang_report_ids: list[str]
    ranks: list[CommRank] | None
    additional_properties: dict[str, Any] = _attrs_field(init=False, factory=dict)





    def to_dict(self) -> dict[str, Any]:
        from ..models.comm_rank import CommRank # noqa: PLC0415
        comm_id = self.comm_id

        name: None | str
        name = self.name

        name_source = self.name_source.value

        nranks = self.nranks

        nnodes: int | None
        nnodes = self.nnodes

        state = self.state.value

        ranks_seen = self.ranks_seen



        complete = self.complete

        nodes = self.nodes



        created_real_ns = self.created_real_ns

        finalized_real_ns: int | None
        finalized_real_ns = self.finalized_real_ns

        ops_completed_total = self.ops_completed_total

        bytes_completed_total = self.bytes_completed_total

        ranks_inflight = self.ranks_inflight

        oldest_inflight_age_ms: int | None
        oldest_inflight_age_ms = self.oldest_inflight_age_ms

        open_hang_report_ids = self.open_hang_report_ids



        ranks: list[dict[str, Any]] | None
        if isinstance(self.ranks, list):
            ranks = []
            for ranks_type_0_item_data in self.ranks:
                ranks_type_0_item = ranks_type_0_item_data.to_dict()
                ranks.append(ranks_type_0_item)


        else:
            ranks = self.ranks


        field_dict: dict[str, Any] = {}
        field_dict.update(self.additional_properties)
        field_dict.update({
            "comm_id": comm_id,
            "name": name,
            "name_source": name_source,
            "nranks": nranks,
            "nnodes": nnodes,
            "state": state,
            "ranks_seen": ranks_seen,
            "complete": complete,
            "nodes": nodes,
            "created_real_ns": created_real_ns,
            "finalized_real_ns": finalized_real_ns,
            "ops_completed_total": ops_completed_total,
            "bytes_completed_total": bytes_completed_total,
            "ranks_inflight": ranks_inflight,
            "oldest_inflight_age_ms": oldest_inflight_age_ms,
            "open_hang_report_ids": open_hang_report_ids,
            "ranks": ranks,
        })

        return field_dict



    @classmethod
    def from_dict(cls: type[T], src_dict: Mapping[str, Any]) -> T:
        from ..models.comm_rank import CommRank # noqa: PLC0415
        d = dict(src_dict)
        comm_id = d.pop("comm_id")

        def _parse_name(data: object) -> None | str:
            if data is None:
                return data
            return cast(None | str, data)

        name = _parse_name(d.pop("name"))


        name_source = NameSource(d.pop("name_source"))




        nranks = d.pop("nranks")

        def _parse_nnodes(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        nnodes = _parse_nnodes(d.pop("nnodes"))


        state = CommunicatorState(d.pop("state"))




        ranks_seen = cast(list[int], d.pop("ranks_seen"))


        complete = d.pop("complete")

        nodes = cast(list[str], d.pop("nodes"))


        created_real_ns = d.pop("created_real_ns")

        def _parse_finalized_real_ns(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        finalized_real_ns = _parse_finalized_real_ns(d.pop("finalized_real_ns"))


        ops_completed_total = d.pop("ops_completed_total")

        bytes_completed_total = d.pop("bytes_completed_total")

        ranks_inflight = d.pop("ranks_inflight")

        def _parse_oldest_inflight_age_ms(data: object) -> int | None:
            if data is None:
                return data
            return cast(int | None, data)

        oldest_inflight_age_ms = _parse_oldest_inflight_age_ms(d.pop("oldest_inflight_age_ms"))


        open_hang_report_ids = cast(list[str], d.pop("open_hang_report_ids"))


        def _parse_ranks(data: object) -> list[CommRank] | None:
            if data is None:
                return data
            try:
                if not isinstance(data, list):
                    raise TypeError()
                ranks_type_0 = []
                _ranks_type_0 = data
                for ranks_type_0_item_data in (_ranks_type_0):
                    ranks_type_0_item = CommRank.from_dict(ranks_type_0_item_data)



                    ranks_type_0.append(ranks_type_0_item)

                return ranks_type_0
            except (TypeError, ValueError, AttributeError, KeyError):
                pass
            return cast(list[CommRank] | None, data)

        ranks = _parse_ranks(d.pop("ranks"))


        communicator = cls(
            comm_id=comm_id,
            name=name,
            name_source=name_source,
            nranks=nranks,
            nnodes=nnodes,
            state=state,
            ranks_seen=ranks_seen,
            complete=complete,
            nodes=nodes,
            created_real_ns=created_real_ns,
            finalized_real_ns=finalized_real_ns,
            ops_completed_total=ops_completed_total,
            bytes_completed_total=bytes_completed_total,
            ranks_inflight=ranks_inflight,
            oldest_inflight_age_ms=oldest_inflight_age_ms,
            open_hang_report_ids=open_hang_report_ids,
            ranks=ranks,
        )


        communicator.additional_properties = d
        return communicator

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
