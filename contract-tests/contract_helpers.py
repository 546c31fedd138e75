"""Helpers shared by the contract tests: the repo, the registry, and a C compiler."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
INCLUDE = ROOT / "generated" / "c" / "include"
CSTRICT = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"]


def registry() -> list[dict]:
    return yaml.safe_load((ROOT / "protocols" / "registry.yaml").read_text())["protocols"]


def protocols_of_kind(kind: str) -> list[dict]:
    return [p for p in registry() if p["kind"] == kind]


def stem(p: dict) -> str:
    return f"{p['id'].replace('-', '_')}_v{p['version']}"


class Compiler:
    def __init__(self, out: Path) -> None:
        self.cc = os.environ.get("CC", "gcc")
        self.out = out

    def build(self, name: str, sources: list[Path], extra: list[str] | None = None) -> Path:
        exe = self.out / name
        cmd = [
            self.cc,
            *CSTRICT,
            f"-I{INCLUDE}",
            *(extra or []),
            *map(str, sources),
            "-o",
            str(exe),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
        return exe
