"""A temporary DIST/BUILD for a test's `make DIST=... BUILD=...`, started from this checkout's
own build outputs where it has them.

Tests build into directories of their own, never over the dist/ and build/ that other tests
load. Building every artifact there from nothing costs a compile of the Profiler (link-time
optimized), wheels and more, when this checkout's are usually current (`make test` builds them
first). `seed` copies those it asks for, mtimes kept: make then remakes in the temporary
directories exactly what is out of date against the sources - the same decisions it takes in
the checkout - and builds what the checkout lacks (a fresh clone). Nothing under dist/ or
build/ is written.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "dist/libnccl-profiler-comminsight.so"
HEADERS = "build/headers/*.o"
ENGINE = "build/engine/libciengine.so"
WHEEL = "dist/comminsight-*-py3-none-linux_*.whl"
INJECT_WHEEL = "dist/comminsight_inject-*-py3-none-any.whl"


def _copy(src: Path, dest: Path) -> None:
    # the bytes and the mtime of one file (the checkout's are replaced by rename, never
    # rewritten in place: what is open here stays the file whose mtime is taken)
    with open(src, "rb") as f:
        data = f.read()
        st = os.fstat(f.fileno())
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    dest.chmod(st.st_mode & 0o7777)
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))


def seed(dist: Path, build: Path | None, *patterns: str) -> None:
    """Copy what matches each pattern (one of this module's: dist/... or build/...) into dist
    or build; dist is created even where there is nothing to copy."""
    dist.mkdir(parents=True, exist_ok=True)
    for pattern in patterns:
        top = pattern.split("/", 1)[0]
        dest_root = {"dist": dist, "build": build}[top]
        if dest_root is None:
            raise ValueError(f"{pattern}: no BUILD given to seed")
        for src in (ROOT / top).glob(pattern.split("/", 1)[1]):
            if src.is_file():
                _copy(src, dest_root / src.relative_to(ROOT / top))
