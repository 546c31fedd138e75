"""Which CommInsight this is: its version, the git commit where the source tree has one, and
the versions of the protocols that decide whether two builds interoperate. `--version` says
it, and the Agent's `comminsight_build_info` metric carries it as labels."""

from __future__ import annotations

import functools
from pathlib import Path

import comminsight
from comminsight_gen.registry import PROTOCOLS

# label -> protocol id: the protocols whose version decides whether two builds interoperate
PROTOCOL_LABELS = (
    ("shm_abi", "shm"),
    ("fifo_event_abi", "fifo-event"),
    ("agent_master_api", "agent-master-api"),
    ("agent_master_slave", "agent-master-slave"),
    ("nccl_profiler_abis", "nccl-profiler"),
)
UNKNOWN = "unknown"


def _versions(protocol_id: str) -> str:
    versions = sorted(p.version for p in PROTOCOLS if p.id == protocol_id and p.status == "live")
    return ",".join(str(v) for v in versions) or UNKNOWN


def _git_dir(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        dot_git = folder / ".git"
        if dot_git.is_dir():
            return dot_git
        if dot_git.is_file():  # a worktree: "gitdir: <path>"
            text = dot_git.read_text(errors="replace").strip()
            if text.startswith("gitdir:"):
                return (folder / text.split(":", 1)[1].strip()).resolve()
    return None


def git_commit(start: Path | None = None) -> str:
    """The commit of the source tree this package runs from, read from its .git (no git
    process): an installed wheel has none, and says UNKNOWN."""
    start = start or Path(comminsight.__file__).resolve().parent
    try:
        git = _git_dir(start)
        if git is None:
            return UNKNOWN
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head if _is_sha(head) else UNKNOWN
        ref = head.split(":", 1)[1].strip()
        common = git
        if (git / "commondir").is_file():  # worktrees keep branch refs in the main .git
            common = (git / (git / "commondir").read_text().strip()).resolve()
        for base in (git, common):
            if (base / ref).is_file():
                sha = (base / ref).read_text().strip()
                return sha if _is_sha(sha) else UNKNOWN
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                sha, _, name = line.partition(" ")
                if name == ref and _is_sha(sha):
                    return sha
    except OSError:
        pass
    return UNKNOWN


def _is_sha(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)


@functools.cache
def build_labels() -> dict[str, str]:
    labels = {"version": comminsight.__version__, "git_commit": git_commit()}
    for label, protocol_id in PROTOCOL_LABELS:
        labels[label] = _versions(protocol_id)
    return labels
