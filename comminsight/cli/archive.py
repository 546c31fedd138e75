"""`comminsight archive [status | flush [--wait]]`: where sealed logs and summaries go, what is
waiting, the local disk budget; and uploading everything sealed now (needs the agent's token).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.markup import escape
from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn

from comminsight.cli.client import AgentUnavailable, answer, changing_client
from comminsight.cli.output import Output, new_table, terminal_progress
from comminsight.human_units import size_text, time_text
from comminsight_client import Client
from comminsight_client.api.archive import flush_archive, get_archive_status
from comminsight_client.models import ArchiveFlush, ArchiveStatus

POLL_S = 0.5


def status_cmd(client: Client, args, out: Output) -> None:
    status: ArchiveStatus = answer(get_archive_status, client=client)
    if out.json:
        out.json_value(status.to_dict())
        return
    print_status(out, status)


def flush_cmd(client: Client, args, out: Output) -> None:
    before: ArchiveStatus = answer(get_archive_status, client=client)
    queued: ArchiveFlush = answer(flush_archive, client=changing_client(args))
    if not args.wait:
        if out.json:
            out.json_value(queued.to_dict())
            return
        if out.plain:
            table = new_table(None, ("queued_files", "queued_bytes", "already_running"))
            table.add_row(
                str(queued.queued_files),
                str(queued.queued_bytes),
                "yes" if queued.already_running else "no",
            )
            out.table(table)
            return
        joined = " (joined the pass already running)" if queued.already_running else ""
        out.line(
            f"flush queued{joined}: {queued.queued_files} files, "
            f"{size_text(queued.queued_bytes)}; follow it with `comminsight archive`",
            markup=False,
        )
        return
    progress = terminal_progress(
        out.console,
        SpinnerColumn(),
        TextColumn("uploading"),
        BarColumn(),
        TextColumn("{task.fields[files]}"),
        TimeElapsedColumn(),
    )
    total = queued.queued_files
    with progress:
        task = progress.add_task("flush", total=total or None, files=f"0/{total} files")

        def show(s: ArchiveStatus) -> None:
            # the queued files not pending any more (files sealed since count as pending too)
            done = total - min(s.pending_files, total)
            progress.update(task, completed=done, files=f"{done}/{total} files")

        status = wait_for_flush(client, before.failed_uploads_total, args.wait_s, show)
    if out.json:
        out.json_value({"flush": queued.to_dict(), "status": status.to_dict()})
        return
    out.line(
        f"flushed: {queued.queued_files} files, {size_text(queued.queued_bytes)} queued",
        markup=False,
    )
    print_status(out, status)


def wait_for_flush(
    client: Client,
    failed_before: int,
    deadline_s: float,
    on_status: Callable[[ArchiveStatus], None] = lambda status: None,
) -> ArchiveStatus:
    """The archive status once no pass runs and nothing sealed waits, or a pass ended with
    failed uploads (left for the next pass); AgentUnavailable when `deadline_s` passes first.
    (Not just "no pass runs": the flush's pass starts in the background after the answer.)
    `on_status` sees every status read on the way."""
    deadline = time.monotonic() + deadline_s
    while True:
        status: ArchiveStatus = answer(get_archive_status, client=client)
        on_status(status)
        settled = status.pending_files == 0 or status.failed_uploads_total > failed_before
        if settled and not status.flush_in_progress:
            return status
        if time.monotonic() >= deadline:
            raise AgentUnavailable(
                f"the flush still runs after {deadline_s:.0f} s ({status.pending_files} files, "
                f"{size_text(status.pending_bytes)} pending)",
                "it goes on in the agent; follow it with `comminsight archive`",
            )
        time.sleep(POLL_S)


def print_status(out: Output, s: ArchiveStatus) -> None:
    budget = size_text(s.disk_budget_bytes) if s.disk_budget_bytes is not None else "none"
    table = new_table("Archive", ("", "value"))
    for name, value in (
        ("provider", s.provider.value),
        ("destination", escape(s.url)),
        ("pending", f"{s.pending_files} files, {size_text(s.pending_bytes)}"),
        (
            "uploaded",
            f"{s.uploaded_files_total} files, {size_text(s.uploaded_bytes_total)} compressed",
        ),
        ("last upload", utc(s.last_upload_real_ns)),
        ("failed attempts", str(s.failed_uploads_total)),
        ("local disk", f"{size_text(s.disk_used_bytes)} used of budget {budget}"),
        ("deleted locally", f"{s.local_deleted_files_total} archived files"),
        ("flush running", "yes" if s.flush_in_progress else "no"),
    ):
        table.add_row(name, value)
    error = s.last_error
    if error:
        table.add_row(
            "last error",
            escape(
                f"{utc(error.at_real_ns)}, {error.file or '-'} (attempt "
                f"{error.attempts}): {error.message}"
            ),
        )
    out.table(table)


def utc(real_ns: int | None) -> str:
    return f"{time_text(real_ns)} UTC" if real_ns else "-"
