"""Step summaries as the Semantic Engine leaves them: `<home>/semantics/step/*.jsonl`.

The API's /steps reads them from disk rather than from the engine's memory, so it serves the
same records after an Agent restart and whatever the engine wrote before. `StepFiles` keeps an
index (where each line is, its step and rank), built by byte offset as files grow, each line
decoded once with the generated step-summary v1 model; a page decodes its own lines again. A
line that is not a valid summary is skipped, counted and logged once per file, and never hides
the others. Open files (`.jsonl.partial`) are read up to their last complete line. A file
that is not a regular one (a FIFO, a link) is refused, never opened for reading, and a line
longer than any summary passed over without being held.
`NewStepSummaries` follows the same files for what a slave forwards to its master.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

from comminsight.line_reader import LineCursor, follow_lines
from comminsight.refusals import Refusals
from comminsight.safe_open import UntrustedFile, open_regular
from comminsight.step_file_bounds import STEP_FILE_BYTES_MAX, STEP_LINE_BYTES_MAX
from comminsight.untrusted_json import NOT_JSON
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.models.step_summary_v1 import StepSummary

log = logging.getLogger(__name__)


@dataclass
class StepPageResult:
    items: list[StepSummary]
    total: int
    next_cursor: str | None


@dataclass
class _FileIndex:
    """Where each summary of one file is (its line) and what orders it, not the summary: a
    run writes Steps for days, and the API serves any page of them."""

    inode: int
    cursor: LineCursor = field(default_factory=LineCursor)  # past the last line indexed
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ranks: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    invalid_lines: int = 0
    # whose: the process and job of its first summary (a file is one process's)
    pid: int | None = None
    job_id: str | None = None


class StepFiles:
    """The step summaries under `<home>/semantics/step/`, indexed incrementally by byte offset
    (each line decoded once, when it is first indexed); a page decodes only its own lines."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._index: dict[Path, _FileIndex] = {}
        self._refused = Refusals("step summaries", log)

    @property
    def directory(self) -> Path:
        return Path(self.home) / home_names.SEMANTICS / home_names.STEP

    def files(self) -> list[Path]:
        return sorted(self.directory.glob("*.jsonl")) + sorted(
            self.directory.glob("*.jsonl.partial")
        )

    def invalid_lines(self) -> int:
        return sum(i.invalid_lines for i in self._index.values())

    def page(
        self,
        *,
        rank: int | None,
        since_step: int,
        cursor: str | None,
        limit: int,
        visible: Callable[[int | None, str | None], bool] | None = None,
    ) -> StepPageResult:
        """Summaries ordered by (step_index, global_rank), as /api/v1/steps pages them; only
        those of files whose (pid, job id) `visible` admits, when given (one user's own)."""
        indexed = self._refresh()
        if visible is not None:
            indexed = [(p, i) for p, i in indexed if visible(i.pid, i.job_id)]
        steps = np.concatenate([i.steps for _, i in indexed] or [np.zeros(0, np.int64)])
        ranks = np.concatenate([i.ranks for _, i in indexed] or [np.zeros(0, np.int64)])
        file_of = np.concatenate(
            [np.full(len(i.steps), n, np.int64) for n, (_, i) in enumerate(indexed)]
            or [np.zeros(0, np.int64)]
        )
        line_of = np.concatenate(
            [np.arange(len(i.steps)) for _, i in indexed] or [np.zeros(0, np.int64)]
        )
        keep = steps >= since_step
        if rank is not None:
            keep &= ranks == rank
        total = int(keep.sum())
        if cursor is not None:
            step, _, last_rank = cursor.partition(":")
            after_step, after_rank = int(step), int(last_rank)
            keep &= (steps > after_step) | ((steps == after_step) & (ranks > after_rank))
        chosen = np.flatnonzero(keep)
        chosen = chosen[np.lexsort((ranks[chosen], steps[chosen]))][: limit + 1]
        decoded = (self._decode(indexed[file_of[k]], int(line_of[k])) for k in chosen[:limit])
        # a file removed since the listing (the disk budget) leaves its lines out of the page
        items = [s for s in decoded if s is not None]
        more = len(chosen) > limit
        last = chosen[limit - 1] if more else None  # the page's last line, read or removed
        next_cursor = f"{steps[last]}:{ranks[last]}" if more else None
        return StepPageResult(items, total, next_cursor)

    def _refresh(self) -> list[tuple[Path, _FileIndex]]:
        out = []
        for path in self.files():
            index = self._update(path)
            if index is not None:
                out.append((path, index))
        for gone in self._index.keys() - {path for path, _ in out}:
            del self._index[gone]
        self._refused.keep_only(self.files())
        return out

    def _update(self, path: Path) -> _FileIndex | None:
        try:
            f = open_regular(path, STEP_FILE_BYTES_MAX)
        except FileNotFoundError:  # sealed (renamed) or deleted since the listing
            self._index.pop(path, None)
            return None
        except UntrustedFile as e:
            self._index.pop(path, None)
            self._refused.refused(path, e)
            return None
        except OSError as e:
            log.error("cannot read step summaries %s: %s", path, e)
            return self._index.get(path)
        self._refused.read(path)
        with f:
            st = os.fstat(f.fileno())
            index = self._index.get(path)
            if index is None or index.inode != st.st_ino or st.st_size < index.cursor.offset:
                index = self._index[path] = _FileIndex(st.st_ino)  # new, or rewritten
            if st.st_size == index.cursor.offset:
                return index
            steps, ranks, starts, lengths = [], [], [], []
            try:
                for line in follow_lines(f.fileno(), index.cursor, st.st_size, STEP_LINE_BYTES_MAX):
                    if line.data is not None and not line.data.strip():
                        continue
                    try:
                        if line.data is None:
                            raise ValueError(f"a line of {line.length} bytes")
                        s = _DECODER.decode(line.data)
                    except NOT_JSON as e:
                        index.invalid_lines += 1
                        if index.invalid_lines == 1:
                            log.error("%s: a line that is not a step-summary v1: %s", path, e)
                        continue
                    if index.pid is None and index.job_id is None:
                        index.pid = s.pid if isinstance(s.pid, int) else None
                        index.job_id = s.job_id if isinstance(s.job_id, str) else None
                    steps.append(s.step_index)
                    ranks.append(s.global_rank)
                    starts.append(line.offset)
                    lengths.append(line.length)
            except OSError as e:  # what was indexed before the error stands
                log.error("cannot read step summaries %s: %s", path, e)
        index.steps = np.concatenate((index.steps, np.array(steps, np.int64)))
        index.ranks = np.concatenate((index.ranks, np.array(ranks, np.int64)))
        index.starts = np.concatenate((index.starts, np.array(starts, np.int64)))
        index.lengths = np.concatenate((index.lengths, np.array(lengths, np.int64)))
        return index

    @staticmethod
    def _decode(entry: tuple[Path, _FileIndex], k: int) -> StepSummary | None:
        path, index = entry
        try:
            f = _open_indexed(path, index)
        except FileNotFoundError:
            return None
        with f:
            line = os.pread(f.fileno(), int(index.lengths[k]), int(index.starts[k]))
        return _DECODER.decode(line)


def _open_indexed(path: Path, index: _FileIndex):
    """The file an index was built from. The engine seals an open file by renaming
    `.jsonl.partial` to `.jsonl` (the same inode, the same bytes) at any moment, also between
    a page's listing and its reads: the sealed name is the same file when its inode says so."""
    try:
        return open_regular(path, STEP_FILE_BYTES_MAX)
    except FileNotFoundError:
        if path.name.endswith(".partial"):
            f = open_regular(
                path.with_name(path.name.removesuffix(".partial")), STEP_FILE_BYTES_MAX
            )
            if os.fstat(f.fileno()).st_ino == index.inode:
                return f
            f.close()
        raise


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
        self._refused = Refusals("step summaries", log)

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
        self._refused.keep_only(self.directory / name for name in names)
        return out

    def _read_new(self, path: Path, stream: str) -> list[StepSummary]:
        try:
            with open_regular(path, STEP_FILE_BYTES_MAX) as f:
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
        except UntrustedFile as e:
            self._refused.refused(path, e)
            return []
        except OSError as e:
            log.error("cannot read step summaries %s: %s", path, e)
            return []
        self._refused.read(path)
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) == READ_CHUNK:  # a line longer than a chunk is no step summary
                self.invalid_lines += 1
                at.offset += len(data)
            return []  # else no complete line yet
        at.offset += end + 1
        out = []
        for line in data[:end].split(b"\n"):
            if not line.strip():
                continue
            try:
                out.append(_DECODER.decode(line))
            except NOT_JSON as e:
                self.invalid_lines += 1
                log.error("%s: a line that is not a step-summary v1: %s", path, e)
        return out


_DECODER = msgspec.json.Decoder(StepSummary)
