"""Hang reports on disk: `<home>/metadata/hangs/<report_id>.json`, one hang-report v1 each.

Reports are the evidence an operator reads after the job is gone, so each is written
atomically (a crash leaves the previous version or the new one) and re-written in place when
the same hang is seen again or resolved: report ids are stable for one hang (diagnosis.
report_id). On start the Agent loads what an earlier run left; a file that is not a valid
report is named in `errors`, moved to `hangs/invalid/` for inspection, and does not stop the
others from loading.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

import msgspec

from comminsight.durable_files import make_private_dirs, write_atomically
from comminsight.safe_open import read_regular
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.models.hang_report_v1 import HangReport, ReportStatus, Resolution

log = logging.getLogger(__name__)

# hang-report v1's report_id pattern: no '/', no leading '.', so a file name in this directory.
REPORT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
INVALID = "invalid"
# a report file read back at start is refused beyond this: one damaged or planted (a sparse
# file of terabytes) must not take the Agent's memory; the reports of the largest jobs are far
# smaller, their per-rank lists being one entry per rank
REPORT_BYTES_MAX = 256 << 20
# An open report's evidence (ages, progress) changes every pass; on disk it is refreshed at
# most this often unless what it concludes changes (verdict, severity, status, culprits).
REFRESH_NS = 5_000_000_000


def _conclusion(report: HangReport) -> tuple:
    return (
        report.verdict,
        report.severity,
        report.status,
        tuple(sorted(c.comm_rank for c in report.culprits)),
    )


class HangStore:
    def __init__(self, home: str | Path) -> None:
        self.dir = Path(home) / home_names.METADATA / home_names.HANGS
        self.reports: dict[str, HangReport] = {}
        self.errors: dict[str, str] = {}  # file name -> why it was not loaded
        # report id -> why its latest version is not on disk (a full disk); retried each pass
        self.write_errors: dict[str, str] = {}
        self.write_failures = 0  # attempts that failed, retried ones included
        self._on_disk: dict[str, tuple[HangReport, int]] = {}  # id -> (as written, when)

    def path_of(self, report_id: str) -> Path:
        if not REPORT_ID.match(report_id):
            raise ValueError(
                f"hang report id {report_id!r} does not match hang-report v1's report_id pattern"
            )
        return self.dir / f"{report_id}.json"

    def save(self, report: HangReport, now_mono_ns: int | None = None) -> bool:
        """Keep the report; write it if it is new, concludes something new, or its evidence
        on disk is older than REFRESH_NS. A report seen again keeps its first detection time.
        True when it was written."""
        now = time.monotonic_ns() if now_mono_ns is None else now_mono_ns
        old = self.reports.get(report.report_id)
        if (
            old is not None
            and old.resolution is Resolution.operator
            and report.status is ReportStatus.open
        ):
            return False  # an operator closed this hang; seeing it again does not reopen it
        if old is not None and old.status is report.status:
            report = msgspec.structs.replace(
                report, detected_mono_ns=old.detected_mono_ns, detected_real_ns=old.detected_real_ns
            )
        path = self.path_of(report.report_id)
        self.reports[report.report_id] = report  # served fresh even when not written now
        written, written_at = self._on_disk.get(report.report_id, (None, 0))
        if written == report:
            return False
        if (
            written is not None
            and _conclusion(written) == _conclusion(report)
            and now - written_at < REFRESH_NS
        ):
            return False
        return self._write(path, report, now)

    def _write(self, path: Path, report: HangReport, now: int) -> bool:
        """Write one report; on failure (a full disk) leave no temporary file, remember why
        and leave it to retry_unwritten, so that a report is not lost to a moment without
        space."""
        try:
            write_atomically(path, msgspec.json.encode(report))
        except OSError as err:
            self.write_failures += 1
            temp = path.with_name(path.name + ".tmp")
            try:
                temp.unlink()
            except OSError:
                pass
            why = f"cannot write {path}: {err.strerror or err}"
            if self.write_errors.get(report.report_id) != why:
                log.error("hang report %s: %s; tried again each pass", report.report_id, why)
            self.write_errors[report.report_id] = why
            return False
        if self.write_errors.pop(report.report_id, None) is not None:
            log.warning("hang report %s written at last: %s", report.report_id, path)
        self._on_disk[report.report_id] = (report, now)
        return True

    def retry_unwritten(self, now_mono_ns: int | None = None) -> int:
        """Write again the reports whose last write failed; how many are still unwritten."""
        now = time.monotonic_ns() if now_mono_ns is None else now_mono_ns
        for report_id in list(self.write_errors):
            report = self.reports.get(report_id)
            if report is None:
                del self.write_errors[report_id]
                continue
            if not self._write(self.path_of(report_id), report, now):
                break  # the disk is still full: the others wait for the next pass
        return len(self.write_errors)

    def load(self) -> None:
        """Every report an earlier run left; invalid files are set aside and named."""
        if not self.dir.is_dir():
            return
        decoder = msgspec.json.Decoder(HangReport)
        for path in sorted(self.dir.glob("*.json")):
            try:
                report = decoder.decode(read_regular(path, REPORT_BYTES_MAX))
                if path.stem != report.report_id:
                    raise ValueError(f"holds report {report.report_id!r}, not {path.stem!r}")
            except (OSError, *NOT_JSON) as err:
                self._set_aside(path, str(err))
                continue
            self.reports[report.report_id] = report
            self._on_disk[report.report_id] = (report, -REFRESH_NS)  # refresh allowed at once

    def _set_aside(self, path: Path, reason: str) -> None:
        self.errors[path.name] = reason
        log.error(
            "hang report %s is not a valid hang-report v1 (%s); moved to %s/", path, reason, INVALID
        )
        target = self.dir / INVALID
        try:
            make_private_dirs(target)
            # a rename, never a copy: what is set aside may be a FIFO or a link
            os.replace(path, target / path.name)
        except OSError as err:
            log.error("cannot move %s aside: %s", path, err)
