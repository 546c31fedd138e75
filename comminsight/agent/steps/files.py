"""Step summaries as the Semantic Engine leaves them: `<home>/semantics/step/*.jsonl`.

The API's /steps reads them from disk rather than from the engine's memory, so it serves the
same records after an Agent restart and whatever the engine wrote before. `StepFiles` keeps an
index (where each line is, its step and rank), built by byte offset as files grow, each line
decoded once with the generated step-summary v1 model; a page decodes its own lines again. A
line that is not a valid summary is skipped, counted and logged once per file, and never hides
the others. Open files (`.jsonl.partial`) are read up to their last complete line.
`NewStepSummaries` follows the same files for what a slave forwards to its master.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np

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
    offset: int = 0  # the byte after the last complete line indexed
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ranks: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    invalid_lines: int = 0


class StepFiles:
    """The step summaries under `<home>/semantics/step/`, indexed incrementally by byte offset
    (each line decoded once, when it is first indexed); a page decodes only its own lines."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._index: dict[Path, _FileIndex] = {}

    @property
    def directory(self) -> Path:
        return Path(self.home) / "semantics" / "step"

    def files(self) -> list[Path]:
        return sorted(self.directory.glob("*.jsonl")) + sorted(
            self.directory.glob("*.jsonl.partial")
        )

    def invalid_lines(self) -> int:
        return sum(i.invalid_lines for i in self._index.values())

    def page(
        self, *, rank: int | None, since_step: int, cursor: str | None, limit: int
    ) -> StepPageResult:
        """Summaries ordered by (step_index, global_rank), as /api/v1/steps pages them."""
        indexed = self._refresh()
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
        items = [self._decode(indexed[file_of[k]], int(line_of[k])) for k in chosen[:limit]]
        more = len(chosen) > limit
        next_cursor = f"{items[-1].step_index}:{items[-1].global_rank}" if more else None
        return StepPageResult(items, total, next_cursor)

    def _refresh(self) -> list[tuple[Path, _FileIndex]]:
        out = []
        for path in self.files():
            index = self._update(path)
            if index is not None:
                out.append((path, index))
        for gone in self._index.keys() - {path for path, _ in out}:
            del self._index[gone]
        return out

    def _update(self, path: Path) -> _FileIndex | None:
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                index = self._index.get(path)
                if index is None or index.inode != st.st_ino or st.st_size < index.offset:
                    index = self._index[path] = _FileIndex(st.st_ino)  # new, or rewritten
                if st.st_size == index.offset:
                    return index
                f.seek(index.offset)
                data = f.read(st.st_size - index.offset)
        except FileNotFoundError:  # sealed (renamed) or deleted since the listing
            self._index.pop(path, None)
            return None
        except OSError as e:
            log.error("cannot read step summaries %s: %s", path, e)
            return self._index.get(path)
        end = data.rfind(b"\n")
        if end < 0:
            return index  # the last line may still be being written
        steps, ranks, starts, lengths = [], [], [], []
        at = index.offset
        for line in data[: end + 1].split(b"\n")[:-1]:
            if line.strip():
                try:
                    s = _DECODER.decode(line)
                except (msgspec.DecodeError, UnicodeDecodeError) as e:
                    index.invalid_lines += 1
                    if index.invalid_lines == 1:
                        log.error("%s: a line that is not a step-summary v1: %s", path, e)
                else:
                    steps.append(s.step_index)
                    ranks.append(s.global_rank)
                    starts.append(at)
                    lengths.append(len(line))
            at += len(line) + 1
        index.offset = at
        index.steps = np.concatenate((index.steps, np.array(steps, np.int64)))
        index.ranks = np.concatenate((index.ranks, np.array(ranks, np.int64)))
        index.starts = np.concatenate((index.starts, np.array(starts, np.int64)))
        index.lengths = np.concatenate((index.lengths, np.array(lengths, np.int64)))
        return index

    @staticmethod
    def _decode(entry: tuple[Path, _FileIndex], k: int) -> StepSummary:
        path, index = entry
        with open(path, "rb") as f:
            line = os.pread(f.fileno(), int(index.lengths[k]), int(index.starts[k]))
        return _DECODER.decode(line)


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
        out = []
        for line in data[:end].split(b"\n"):
            if not line.strip():
                continue
            try:
                out.append(_DECODER.decode(line))
            except (msgspec.DecodeError, UnicodeDecodeError) as e:
                self.invalid_lines += 1
                log.error("%s: a line that is not a step-summary v1: %s", path, e)
        return out


_DECODER = msgspec.json.Decoder(StepSummary)
