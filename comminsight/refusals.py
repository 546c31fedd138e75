"""Files a follower keeps refusing (a FIFO or a link where a data file belongs): each is
logged once, when it is first refused or refused for another reason, not on every pass that
meets it again."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from comminsight.safe_open import UntrustedFile


class Refusals:
    def __init__(self, what: str, log: logging.Logger) -> None:
        self.what = what  # what the files hold, for the log line ("step summaries")
        self.log = log
        self._why: dict[str, str] = {}  # by path

    def refused(self, path: Path, err: UntrustedFile) -> None:
        if self._why.get(str(path)) != err.why:
            self._why[str(path)] = err.why
            self.log.error("%s %s not read: %s", self.what, path, err.why)

    def read(self, path: Path) -> None:
        """The file was read (again): a later refusal is news."""
        self._why.pop(str(path), None)

    def keep_only(self, paths: Iterable[Path]) -> None:
        """Forget the files no longer there, so that what is kept stays bounded."""
        present = {str(p) for p in paths}
        for gone in self._why.keys() - present:
            del self._why[gone]
