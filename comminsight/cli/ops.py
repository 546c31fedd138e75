"""`comminsight comms | inflight | ops recent`: communicators and their progress, operations
in flight now and the most recently completed ones."""

from __future__ import annotations

from rich.markup import escape

from comminsight.cli.client import answer
from comminsight.cli.node import list_all_communicators, opt, yes_no
from comminsight.cli.output import Output, new_table
from comminsight.human_units import (
    bandwidth_text,
    ms_text,
    size_text,
    time_text,
    us_text,
)
from comminsight_client import Client
from comminsight_client.api.communicators import get_communicator
from comminsight_client.api.ops import list_inflight_ops, list_recent_ops
from comminsight_client.models import (
    Communicator,
    CommunicatorView,
    InflightOpList,
    OpRecordList,
)
from comminsight_client.types import UNSET

COMM_NOT_FOUND = "list the communicators with `comminsight comms`"


def comms_cmd(client: Client, args, out: Output) -> None:
    if args.id:
        one: Communicator = answer(
            get_communicator,
            args.id,
            client=client,
            view=CommunicatorView.FULL,
            not_found_hint=COMM_NOT_FOUND,
        )
        items: list[Communicator] = [one]
    else:
        items = list_all_communicators(client, args.state, args.name, args.full)
    if out.json:
        out.json_value(items[0].to_dict() if args.id else [c.to_dict() for c in items])
        return
    table = new_table(
        "Communicators",
        (
            "comm_id",
            "name",
            "state",
            "ranks seen",
            "nodes",
            "ops",
            "bytes",
            "in flight",
            "oldest",
            "open hangs",
        ),
        right=("ops", "bytes", "in flight", "open hangs"),
    )
    for c in items:
        table.add_row(
            c.comm_id,
            escape(opt(c.name)),
            c.state.value,
            f"{len(c.ranks_seen)}/{c.nranks}",
            ", ".join(c.nodes),
            str(c.ops_completed_total),
            size_text(c.bytes_completed_total),
            str(c.ranks_inflight),
            ms_text(c.oldest_inflight_age_ms),
            str(len(c.open_hang_report_ids)),
        )
    out.table(table)
    for c in items:
        if c.ranks:
            out.table(ranks_table(c))


def ranks_table(c: Communicator):
    table = new_table(
        f"{c.comm_id} {escape(opt(c.name))}: ranks",
        (
            "rank",
            "global",
            "node",
            "pid",
            "enqueued",
            "started",
            "completed",
            "in flight",
            "oldest op",
            "last progress",
            "alive",
        ),
        right=("rank", "global", "pid", "enqueued", "started", "completed", "in flight"),
    )
    for r in c.ranks or []:
        coll = r.progress.collectives
        oldest = r.progress.oldest_inflight
        age = r.progress.last_progress_age_ms
        table.add_row(
            str(r.comm_rank),
            opt(r.global_rank),
            r.node_name,
            str(r.pid),
            opt(coll.last_enqueued_seq),
            opt(coll.last_gpu_started_seq),
            opt(coll.last_completed_seq),
            str(r.progress.inflight_count),
            f"{oldest.func} {ms_text(oldest.age_ms)}" if oldest else "-",
            f"{ms_text(age)} ago" if age is not None else "-",
            yes_no(r.alive),
        )
    return table


def inflight_cmd(client: Client, args, out: Output) -> None:
    body: InflightOpList = answer(
        list_inflight_ops,
        client=client,
        min_age_ms=args.min_age_ms,
        comm_id=args.comm_id or UNSET,
        rank=args.rank if args.rank is not None else UNSET,
        limit=args.limit,
    )
    if out.json:
        out.json_value(body.to_dict())
        return
    table = new_table(
        f"In flight: {body.total} (as of {time_text(body.as_of_real_ns)} UTC)",
        (
            "age",
            "comm_id",
            "rank",
            "global",
            "node",
            "op",
            "seq",
            "size",
            "state",
            "channels",
            "queued",
            "flagged",
        ),
        right=("rank", "global", "seq", "size", "queued"),
    )
    for op in body.items:
        table.add_row(
            ms_text(op.age_ms),
            op.comm_id,
            str(op.comm_rank),
            opt(op.global_rank),
            op.node_name,
            op.func,
            str(op.seq),
            size_text(op.size_bytes),
            op.state.value,
            f"{op.channels_completed}/{op.channels_started}/{opt(op.n_channels)}",
            str(op.inflight_count),
            "[red]yes[/red]" if op.hang_flagged else "no",
        )
    out.table(table)


def recent_ops_cmd(client: Client, args, out: Output) -> None:
    body: OpRecordList = answer(
        list_recent_ops,
        client=client,
        comm_id=args.comm_id or UNSET,
        rank=args.rank if args.rank is not None else UNSET,
        func=args.func_name or UNSET,
        limit=args.limit,
    )
    if out.json:
        out.json_value(body.to_dict())
        return
    table = new_table(
        f"Recently completed ops: {len(body.items)}, newest first",
        (
            "completed (UTC)",
            "comm_id",
            "rank",
            "global",
            "node",
            "op",
            "seq",
            "size",
            "type",
            "algo/proto",
            "channels",
            "duration",
            "algbw",
            "busbw",
            "timing",
            "step",
        ),
        right=("rank", "global", "seq", "size", "channels", "duration", "algbw", "busbw"),
    )
    for op in body.items:
        table.add_row(
            time_text(op.completed_real_ns),
            op.comm_id,
            str(op.comm_rank),
            opt(op.global_rank),
            op.node_name,
            op.func,
            str(op.seq),
            size_text(op.size_bytes),
            op.datatype,
            f"{opt(op.algo)}/{opt(op.proto)}",
            str(op.n_channels),
            us_text(op.duration_us),
            bandwidth_text(op.algbw_gbs),
            bandwidth_text(op.busbw_gbs),
            op.timing_source.value,
            opt(op.step),
        )
    out.table(table)
