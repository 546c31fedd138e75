"""The durable record of what has been archived: one small JSON file per archived local file.

An entry exists only once its object is committed and verified in the archive, so after a
restart the Archiver uploads exactly what has no entry. Each entry is written atomically
(write a temporary file, fsync, rename, fsync the directory): a crash leaves either the old
state or the new one, never a torn entry. Entries live under
`<home>/metadata/archive-ledger/`, mirroring the file's path relative to home.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import msgspec

from comminsight.durable_files import write_atomically
from comminsight.safe_open import read_regular
from comminsight.untrusted_json import NOT_JSON

log = logging.getLogger(__name__)
_SUFFIX = ".json"
ENTRY_BYTES_MAX = 1 << 20  # an entry is a few hundred bytes; a bigger file is not one


@dataclass(frozen=True)
class LedgerEntry:
    # path relative to home, e.g. inspector_logs/ci-host-1-2-000000.jsonl: a segment's
    # uncompressed name, also when its `.jsonl.zst` was archived
    source: str
    remote: str  # object name in the archive
    source_bytes: int  # of the uncompressed content
    source_sha256: str
    archived_bytes: int  # compressed size, checked against the archive after the commit
    archived_sha256: str
    zstd_level: int  # 0: a file sent as its writer compressed it (a `.jsonl.zst` segment)
    uploaded_real_ns: int
    adopted: bool = False  # found already complete in the archive after a crash; not re-sent
    local_deleted_real_ns: int | None = None  # set when the disk budget removed the local file


class ArchiveLedger:
    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self._entries: dict[str, LedgerEntry] = {}
        self._load()

    def _entry_path(self, source: str) -> Path:
        return self.directory / (source + _SUFFIX)

    def _load(self) -> None:
        if not self.directory.is_dir():
            return
        for path in self.directory.rglob("*" + _SUFFIX):
            try:
                entry = msgspec.json.decode(read_regular(path, ENTRY_BYTES_MAX), type=LedgerEntry)
            except (OSError, *NOT_JSON) as e:
                # Cannot happen through atomic writes; if it does, the file is re-checked
                # against the archive (and adopted, not re-sent, when it is already there).
                log.warning("ignoring unreadable archive ledger entry %s: %s", path, e)
                continue
            self._entries[entry.source] = entry

    def get(self, source: str) -> LedgerEntry | None:
        return self._entries.get(source)

    def __contains__(self, source: str) -> bool:
        return source in self._entries

    def entries(self) -> list[LedgerEntry]:
        return list(self._entries.values())

    def record(self, entry: LedgerEntry) -> None:
        write_atomically(self._entry_path(entry.source), msgspec.json.encode(asdict(entry)))
        self._entries[entry.source] = entry

    def mark_local_deleted(self, source: str, at_real_ns: int) -> None:
        self.record(replace(self._entries[source], local_deleted_real_ns=at_real_ns))
