"""Archive sealed local data exactly once, compressed with zstd, and keep local disk in budget.

One pass (`Archiver.run_once`, synchronous; the agent's loop calls it through
`asyncio.to_thread`):

1. find complete local files of every registered kind (sealed inspector_logs segments, as
   `.jsonl` or as the Profiler compressed them, `.jsonl.zst`; step summaries); open segments
   (`*.partial`) are never touched;
2. upload each file the ledger does not list: compress with zstd into a temporary object (a
   file already compressed is checked to be one whole zstd frame and sent as it is; a damaged
   one is refused, never archived), commit it to its final name, check its size, then record
   it in the ledger (size + sha256); failed attempts are retried with exponential backoff up
   to COMMINSIGHT_COMMON_ARCHIVE_RETRY_MAX;
3. delete archived local files (with their compressed copy, if both are there), oldest first,
   until local data fits COMMINSIGHT_COMMON_DISK_BUDGET_BYTES (0: never delete).

A segment is one file for the archive whichever form it is in: its ledger key is its
uncompressed name (`inspector_logs/<name>.jsonl`) and its object `<prefix>/inspector_logs/
<name>.jsonl.zst` either way, so a segment archived as `.jsonl` and compressed since is not
sent again.

Exactly once across crashes: a crash before the commit leaves only a temporary object, which
the next pass overwrites; a crash after the commit but before the ledger write leaves a final
object with no entry, which the next pass reads back and adopts when its content matches the
local file, instead of sending it again.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from comminsight.agent.archive.ledger import ArchiveLedger
from comminsight.agent.archive.local import (
    DEFAULT_KINDS,
    USERS_INSPECTOR_LOGS,
    ArchiveKind,
    DiskBudget,
    LocalData,
    LocalFile,
)
from comminsight.agent.archive.providers import (
    ArchiveConfigError,
    FsspecProvider,
    LocalDirectoryProvider,
    Provider,
    provider_for_url,
)
from comminsight.agent.archive.upload import DamagedFile, ZstdUploader
from comminsight.agent.core.metric_family import metric_family
from comminsight.agent.receivers.acting_as import files_as
from comminsight.backoff import Backoff
from comminsight.safe_open import UntrustedFile
from comminsight_gen import home_v1_names as home_names
from comminsight_gen import metrics_v1
from comminsight_gen.config_v1 import ConfigV1

__all__ = [
    "ArchiveConfigError",
    "ArchiveErrorInfo",
    "ArchiveKind",
    "ArchiveStatusSnapshot",
    "Archiver",
    "DEFAULT_KINDS",
    "FlushResult",
    "FsspecProvider",
    "LocalDirectoryProvider",
    "PassReport",
    "Provider",
    "RetryPolicy",
    "provider_for_url",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """At most max_attempts, with exponential backoff between them."""

    max_attempts: int = 8
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0

    def delay_after(self, attempt: int) -> float:
        return Backoff(self.base_delay_s, self.max_delay_s).delay(attempt)


@dataclass
class ArchiveErrorInfo:
    """Field names follow the agent-master-api ArchiveError schema."""

    message: str
    file: str | None
    at_real_ns: int
    attempts: int


@dataclass
class ArchiveStatusSnapshot:
    """Field names follow the agent-master-api ArchiveStatus schema; `to_dict` feeds the API."""

    provider: str
    url: str
    pending_files: int
    pending_bytes: int
    uploaded_files_total: int
    uploaded_bytes_total: int
    failed_uploads_total: int
    local_deleted_files_total: int
    disk_budget_bytes: int | None
    disk_used_bytes: int
    flush_in_progress: bool
    last_upload_real_ns: int | None
    last_error: ArchiveErrorInfo | None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class FlushResult:
    """Field names follow the agent-master-api ArchiveFlush schema."""

    queued_files: int
    queued_bytes: int
    requested_real_ns: int
    already_running: bool

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PassReport:
    """What one pass did."""

    uploaded_files: int = 0
    uploaded_bytes: int = 0  # compressed
    adopted_files: int = 0  # already in the archive after a crash; recorded, not re-sent
    failed_files: list[str] = field(default_factory=list)
    deleted_files: int = 0
    deleted_bytes: int = 0
    disk_used_bytes: int = 0  # after deletion
    pending_files: int = 0  # still not archived after the pass


class Archiver:
    """Runs archive passes: uploads what the ledger lacks (with retries), applies the disk
    budget, and keeps the counters the API's archive status reports."""

    def __init__(
        self,
        home: str | Path,
        provider: Provider,
        *,
        zstd_level: int = 3,
        retry: RetryPolicy | None = None,
        disk_budget_bytes: int = 0,
        kinds: Iterable[ArchiveKind] = DEFAULT_KINDS,
        prefix: str = "",
        sleep: Callable[[float], None] = time.sleep,
        clock_ns: Callable[[], int] = time.time_ns,
    ):
        self.home = Path(home)
        self.provider = provider
        self.zstd_level = zstd_level
        self.retry = retry or RetryPolicy()
        self.disk_budget_bytes = disk_budget_bytes
        # Several nodes may share one archive (a 3FS mount, a bucket): objects go under the
        # node's name so equal relative paths from different nodes cannot collide.
        self.prefix = prefix.strip("/")
        self._sleep = sleep
        self._clock_ns = clock_ns
        self.ledger = ArchiveLedger(self.home / home_names.METADATA / home_names.ARCHIVE_LEDGER)
        self.local = LocalData(
            self.home, kinds, exclude=(self.ledger.directory, self.home / home_names.ARCHIVES)
        )
        self._pass_lock = threading.Lock()  # one pass at a time
        self._state_lock = threading.Lock()  # counters read by status() from another thread
        self._rescan_requested = False
        self._failed_uploads_total = 0
        self._last_error: ArchiveErrorInfo | None = None

    @classmethod
    def from_settings(cls, settings: ConfigV1, **kwargs) -> Archiver:
        """An Archiver configured from COMMINSIGHT_* settings; a bad URL is ArchiveConfigError."""
        provider = provider_for_url(settings.common_archive_url, settings.home)
        kwargs.setdefault("prefix", settings.agent_node_name or socket.gethostname())
        if settings.agent_shared_home:  # every user's segments too
            kwargs.setdefault("kinds", (*DEFAULT_KINDS, USERS_INSPECTOR_LOGS))
        return cls(
            settings.home,
            provider,
            zstd_level=settings.common_archive_zstd_level,
            retry=RetryPolicy(max_attempts=settings.common_archive_retry_max),
            disk_budget_bytes=settings.common_disk_budget_bytes,
            **kwargs,
        )

    @property
    def last_error(self) -> ArchiveErrorInfo | None:
        """The last failed upload, None once an upload succeeded again."""
        with self._state_lock:
            return self._last_error

    def register_kind(self, kind: ArchiveKind) -> None:
        """Archive another kind of file (e.g. a new summary directory) from the next pass on."""
        self.local.add_kind(kind)

    # -- passes --------------------------------------------------------------------------

    def run_once(self) -> PassReport:
        """Upload everything pending, then apply the disk budget. Blocks; thread-safe."""
        with self._pass_lock:
            report = PassReport()
            uploader = ZstdUploader(self.provider, self.zstd_level, self._clock_ns)
            while True:
                with self._state_lock:
                    self._rescan_requested = False
                if not self._upload_pending(uploader, report):
                    break  # the archive is failing: stop here, the next pass resumes
                with self._state_lock:
                    if not self._rescan_requested:
                        break  # no flush arrived during the pass
            self._apply_disk_budget(report)
            report.pending_files = len(self._pending())
            return report

    def flush(self, wait: bool = True) -> FlushResult:
        """Archive every sealed file now (POST archive/flush). If a pass is running, it rescans
        before it ends instead. With wait=False the pass runs in a background thread."""
        pending = self._pending()
        result = FlushResult(
            queued_files=len(pending),
            queued_bytes=sum(f.size for f in pending),
            requested_real_ns=self._clock_ns(),
            already_running=self._pass_lock.locked(),
        )
        if result.already_running:
            with self._state_lock:
                self._rescan_requested = True
        elif wait:
            self.run_once()
        else:
            threading.Thread(target=self.run_once, name="archive-flush", daemon=True).start()
        return result

    def status(self) -> ArchiveStatusSnapshot:
        complete = self.local.complete_files()
        pending = [f for f in complete if f.source not in self.ledger]
        entries = self.ledger.entries()
        with self._state_lock:
            return ArchiveStatusSnapshot(
                provider=self.provider.kind,
                url=self.provider.url,
                pending_files=len(pending),
                pending_bytes=sum(f.size for f in pending),
                # From the ledger, so the totals survive an agent restart. Objects adopted
                # after a crash count: the agent that crashed uploaded them.
                uploaded_files_total=len(entries),
                uploaded_bytes_total=sum(e.archived_bytes for e in entries),
                failed_uploads_total=self._failed_uploads_total,
                local_deleted_files_total=sum(
                    1 for e in entries if e.local_deleted_real_ns is not None
                ),
                disk_budget_bytes=self.disk_budget_bytes or None,
                disk_used_bytes=self.local.used_bytes(complete),
                flush_in_progress=self._pass_lock.locked(),
                last_upload_real_ns=max((e.uploaded_real_ns for e in entries), default=None),
                last_error=self._last_error,
            )

    # -- uploads -------------------------------------------------------------------------

    def _pending(self) -> list[LocalFile]:
        return [f for f in self.local.complete_files() if f.source not in self.ledger]

    def collect(self):
        """The prometheus_client collector protocol: what the archive refused."""
        yield metric_family(metrics_v1.ARCHIVE_FILES_REFUSED_TOTAL, value=self.local.refused_total)

    def refused(self) -> dict[str, str]:
        """Files of an archived kind refused as of the latest scan (source -> why): links,
        files that are not regular, or not this user's."""
        return dict(self.local.refused)

    def _remote_name(self, source: str) -> str:
        name = source + ".zst"
        return f"{self.prefix}/{name}" if self.prefix else name

    def _upload_pending(self, uploader: ZstdUploader, report: PassReport) -> bool:
        """Upload every pending file, oldest first; False when one exhausted its attempts
        (the archive is most likely down, so the rest would only wait out their backoffs)."""
        for local in self._pending():
            if not self._upload_with_retries(uploader, local, report):
                report.failed_files.append(local.source)
                return False
        return True

    def _upload_with_retries(
        self, uploader: ZstdUploader, local: LocalFile, report: PassReport
    ) -> bool:
        for attempt in range(1, self.retry.max_attempts + 1):
            try:
                entry = uploader.upload(local, self._remote_name(local.source))
                # If this write fails, the retry finds the committed object and adopts it.
                self.ledger.record(entry)
            except UntrustedFile as e:  # swapped for a link after the scan: never retried
                self.local.refuse(local.name, e.why)
                return True
            except DamagedFile as e:  # a compressed file that is no whole zstd frame
                self.local.refuse_damaged(local, e.why)
                return True
            except FileNotFoundError as e:
                if not local.path.exists():
                    return True  # the local file went away (deleted by hand): nothing to do
                self._note_failure(local, attempt, e)
            except Exception as e:  # any provider error is retried, then reported
                self._note_failure(local, attempt, e)
            else:
                with self._state_lock:
                    self._last_error = None  # the archive works again
                if entry.adopted:
                    report.adopted_files += 1
                else:
                    report.uploaded_files += 1
                    report.uploaded_bytes += entry.archived_bytes
                return True
            if attempt < self.retry.max_attempts:
                self._sleep(self.retry.delay_after(attempt))
        return False

    def _note_failure(self, local: LocalFile, attempt: int, error: Exception) -> None:
        message = self.provider.scrub(f"{type(error).__name__}: {error}")[:2048]
        log.warning("archive upload of %s failed (attempt %d): %s", local.source, attempt, message)
        with self._state_lock:
            self._failed_uploads_total += 1
            self._last_error = ArchiveErrorInfo(message, local.source, self._clock_ns(), attempt)

    # -- disk budget ---------------------------------------------------------------------

    def _apply_disk_budget(self, report: PassReport) -> None:
        complete = self.local.complete_files()
        used = self.local.used_bytes(complete)
        doomed = DiskBudget(self.disk_budget_bytes).files_to_delete(
            complete, used, lambda f: f.source in self.ledger
        )
        for local in doomed:
            try:
                # a user's file in a shared home is removed as that user (acting_as)
                with files_as(None if local.owner == -1 else local.owner):
                    for path in (local.path, *local.copies):
                        path.unlink(missing_ok=True)
            except OSError as e:
                log.warning("archive: cannot delete %s: %s", local.path, e)
                continue
            self.ledger.mark_local_deleted(local.source, self._clock_ns())
            used -= local.size + local.copies_bytes
            report.deleted_files += 1
            report.deleted_bytes += local.size + local.copies_bytes
        report.disk_used_bytes = used
