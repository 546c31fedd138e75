"""Step summaries as the Semantic Engine leaves them: `<home>/semantics/step/*.jsonl`.

The API's /steps reads them from disk rather than from the engine's memory, so it serves the
same records after an Agent restart and whatever the engine wrote before. Each file is decoded
once per (size, mtime) with the generated step-summary v1 model; a line that is not a valid
summary is skipped, counted and logged once per file version, and never hides the others.
Open files (`.jsonl.partial`) are read up to their last complete line.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from comminsight_gen.models.step_summary_v1 import StepSummary

log = logging.getLogger(__name__)


@dataclass
class _FileCache:
    version: tuple[int, int]
    summaries: list[StepSummary]
    invalid_lines: int


@dataclass
class StepPageResult:
    items: list[StepSummary]
    total: int
    next_cursor: str | None


@dataclass
class StepFiles:
    home: Path
    _cache: dict[Path, _FileCache] = field(default_factory=dict)

    @property
    def directory(self) -> Path:
        return Path(self.home) / "semantics" / "step"

    def invalid_lines(self) -> int:
        return sum(c.invalid_lines for c in self._cache.values())

    def all(self) -> list[StepSummary]:
        files = sorted(self.directory.glob("*.jsonl")) + sorted(
            self.directory.glob("*.jsonl.partial")
        )
        seen = set()
        out: list[StepSummary] = []
        for path in files:
            seen.add(path)
            out.extend(self._read(path))
        for gone in set(self._cache) - seen:
            del self._cache[gone]
        return out

    def _read(self, path: Path) -> list[StepSummary]:
        try:
            st = path.stat()
        except FileNotFoundError:  # sealed (renamed) or deleted since the listing
            return []
        version = (st.st_size, st.st_mtime_ns)
        cached = self._cache.get(path)
        if cached is not None and cached.version == version:
            return cached.summaries
        try:
            data = path.read_bytes()
        except OSError as e:
            log.error("cannot read step summaries %s: %s", path, e)
            return []
        decoder = msgspec.json.Decoder(StepSummary)
        summaries, invalid = [], 0
        lines = data.split(b"\n")
        if path.name.endswith(".partial"):
            lines = lines[:-1]  # the last line may still be being written
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                summaries.append(decoder.decode(line))
            except msgspec.DecodeError as e:
                invalid += 1
                if invalid == 1:
                    log.error("%s line %d is not a step-summary v1: %s", path, number, e)
        self._cache[path] = _FileCache(version, summaries, invalid)
        return summaries

    def page(
        self, *, rank: int | None, since_step: int, cursor: str | None, limit: int
    ) -> StepPageResult:
        """Summaries ordered by (step_index, global_rank), as /api/v1/steps pages them."""
        matched = [
            s
            for s in self.all()
            if s.step_index >= since_step and (rank is None or s.global_rank == rank)
        ]
        matched.sort(key=lambda s: (s.step_index, s.global_rank))
        total = len(matched)
        if cursor is not None:
            step, _, last_rank = cursor.partition(":")
            after = (int(step), int(last_rank))
            matched = [s for s in matched if (s.step_index, s.global_rank) > after]
        page = matched[:limit]
        more = len(matched) > limit
        next_cursor = f"{page[-1].step_index}:{page[-1].global_rank}" if more else None
        return StepPageResult(page, total, next_cursor)


READ_CHUNK = 8 << 20  # bytes read per file per call at most: a call stays short


@dataclass
class _Position:
    inode: int
    offset: int  # the byte after the last complete line read


class NewStepSummaries:
    """The summaries appended to the step files since the last call, each decoded once and
    kept by no one here: what a slave forwards to its master every report, for as long as
    training runs. A file is followed by byte offset through its sealing (the open
    `.jsonl.partial` renamed to `.jsonl`, the same inode); a new file, or one that shrank (a
    resumed engine rewrote it), is read from its start again, so a reader must skip Steps it
    has already seen (by GPU and step index)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.invalid_lines = 0
        self._at: dict[str, _Position] = {}  # by stream (the file's name without .partial)

    def read(self) -> list[StepSummary]:
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        out: list[StepSummary] = []
        streams = set()
        for name in names:
            if not name.endswith((".jsonl", ".jsonl.partial")):
                continue
            stream = name.removesuffix(".partial")
            streams.add(stream)
            out.extend(self._read_new(self.directory / name, stream))
        for gone in self._at.keys() - streams:
            del self._at[gone]
        return out

    def _read_new(self, path: Path, stream: str) -> list[StepSummary]:
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                at = self._at.get(stream)
                if at is None or at.inode != st.st_ino or st.st_size < at.offset:
                    at = self._at[stream] = _Position(st.st_ino, 0)
                if st.st_size == at.offset:
                    return []
                f.seek(at.offset)
                data = f.read(min(st.st_size - at.offset, READ_CHUNK))
        except FileNotFoundError:  # sealed (renamed) between the listing and the open
            return []
        except OSError as e:
            log.error("cannot read step summaries %s: %s", path, e)
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []  # no complete line yet
        at.offset += end + 1
        decoder = _DECODER
        out = []
        for line in data[:end].split(b"\n"):
            if not line.strip():
                continue
            try:
                out.append(decoder.decode(line))
            except (msgspec.DecodeError, UnicodeDecodeError) as e:
                self.invalid_lines += 1
                log.error("%s: a line that is not a step-summary v1: %s", path, e)
        return out


_DECODER = msgspec.json.Decoder(StepSummary)
