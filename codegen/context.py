"""Where generators write: a staging tree that replaces generated/ only if everything succeeds."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from codegen.errors import SchemaError
from codegen.tool_worker import TOOL as WORKER_TOOL
from codegen.tool_worker import ToolWorker


@dataclass
class Context:
    root: Path  # repository root; generators read sources relative to it
    stage: Path  # mirror of the repository root holding only generated/
    written: list[str] = field(default_factory=list)  # repo-relative paths, in write order
    worker: ToolWorker | None = None  # runs datamodel-codegen where given, else a process each

    def write(self, rel: str, text: str) -> None:
        target = self.stage / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        self.written.append(rel)

    def collect(self, rel_dir: str) -> list[str]:
        """Record every file an external tool wrote under rel_dir (sorted: output is stable)."""
        base = self.stage / rel_dir
        files = sorted(str(p.relative_to(self.stage)) for p in base.rglob("*") if p.is_file())
        self.written.extend(files)
        return files

    def run_tool(self, source: str, args: list[str]) -> None:
        """Run `python -m <tool>` from the repo root; a failure names the protocol source."""
        if self.worker is not None and args[0] == WORKER_TOOL:
            status, output = self.worker.run(args[1:])
        else:
            proc = subprocess.run(
                [sys.executable, "-m", *args], cwd=self.root, capture_output=True, text=True
            )
            status, output = proc.returncode, proc.stderr or proc.stdout
        if status != 0:
            detail = output.strip().splitlines()
            raise SchemaError(source, "", f"{args[0]} failed: " + "\n  ".join(detail[-15:]))
