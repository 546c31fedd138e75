"""Builds that never hand out half a file, and generation that leaves what did not change alone.

Every artifact the Makefile writes under build/ and dist/ goes to a temporary name beside its
target and is renamed into place; `make generate` writes a generated file only when its bytes
differ and `make verify-generated` writes nothing, so neither makes the Profiler stale. The
builds here go to a temporary DIST/BUILD (the Makefile takes both on the command line), never
over the dist/ that other tests load. The module compiles the Profiler at most once (not at
all where this checkout's build is current: seeded_builds); the rebuilds a reader watches,
and the failing one, run a stand-in compiler through the Makefile's own recipe.
"""

from __future__ import annotations

import os
import shlex
import shutil
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from codegen_in_process import codegen as codegen_main
from codegen_in_process import remembered_safe_load
from seeded_builds import HEADERS, seed
from seeded_builds import PLUGIN as SEED_PLUGIN

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "libnccl-profiler-comminsight.so"
SHM = "protocols/shm/v1/shm.abi.yaml"
# the venv exists when these run; never let a test's make rebuild it under the running tests
KEEP_VENV = ("-o", ".venv/.installed")
# a nested make: none of an outer make's flags, variables or jobserver
MAKE_ENV = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}


def make(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["make", "--no-print-directory", *KEEP_VENV, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=MAKE_ENV,
    )
    if check:
        assert proc.returncode == 0, f"make {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def mtimes(root: Path) -> dict[str, int]:
    """mtime of every file under root/generated (Python's caches aside) and of README.md."""
    files = [p for p in (root / "generated").rglob("*") if p.is_file()]
    files = [p for p in files if "__pycache__" not in p.parts]
    if (root / "README.md").exists():
        files.append(root / "README.md")
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in files}


def elf_problem(data: bytes) -> str | None:
    """Why data is not a whole 64-bit little-endian ELF file (None: it is)."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return f"no ELF64 header ({len(data)} bytes)"
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    if phoff + phentsize * phnum > len(data) or shoff + shentsize * shnum > len(data):
        return f"file too short for its headers ({len(data)} bytes, section table at {shoff})"
    for i in range(phnum):
        _type, _flags, offset, _va, _pa, filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize
        )
        if offset + filesz > len(data):
            return f"segment {i} ends at {offset + filesz}, past the end ({len(data)} bytes)"
    for i in range(shnum):
        _name, stype, _fl, _addr, offset, size = struct.unpack_from(
            "<IIQQQQ", data, shoff + i * shentsize
        )
        if stype != 8 and offset + size > len(data):  # 8: SHT_NOBITS (.bss) has no bytes
            return f"section {i} ends at {offset + size}, past the end ({len(data)} bytes)"
    return None


@pytest.fixture(scope="module")
def built_plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Profiler as `make build-profiler` builds it now, in a DIST of this module's."""
    dist = tmp_path_factory.mktemp("built") / "dist"
    seed(dist, None, SEED_PLUGIN)
    make(f"DIST={dist}", "build-profiler")
    assert elf_problem((dist / PLUGIN).read_bytes()) is None
    return dist / PLUGIN


def dist_holding(plugin: Path, dist: Path) -> Path:
    """dist with a copy of the built plugin (as a build into it would have left it)."""
    dist.mkdir(parents=True)
    shutil.copy2(plugin, dist / PLUGIN)
    return dist / PLUGIN


# ---- make verify-generated and make generate keep mtimes: nothing rebuilds on their account


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard: codegen's verify alone is ~20 s of CPU
def test_verify_generated_leaves_generated_files_and_the_build_up_to_date(tmp_path: Path) -> None:
    dist, build = tmp_path / "dist", tmp_path / "build"
    where = (f"DIST={dist}", f"BUILD={build}")
    seed(dist, build, SEED_PLUGIN, HEADERS)
    make(*where, "build-profiler", "headers")
    before = mtimes(ROOT)
    assert any(p.endswith(".h") for p in before)
    proc = make("verify-generated", check=False)
    # (its verdict is make test's business: a tree being edited, or not committed, fails it;
    # make exits 2 for any failed recipe)
    assert proc.returncode in (0, 2), proc.stdout + proc.stderr
    assert "verify-generated: generated" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert mtimes(ROOT) == before
    # question mode: exit 0 only when nothing would be remade
    q = make("-q", *where, "build-profiler", "headers", check=False)
    assert q.returncode == 0, "verify-generated made the Profiler or the headers out of date"
    assert sorted(p.name for p in dist.iterdir()) == [PLUGIN]


@pytest.fixture(scope="module")
def _parse_each_schema_text_once():
    """The small repositories all hold the same shm schema: parsed once (codegen_in_process)."""
    with remembered_safe_load():
        yield


def codegen(root: Path, command: str) -> subprocess.CompletedProcess[str]:
    """`python -m codegen COMMAND --root ROOT`, in this process (make's own run of it, in its
    own process, is test_verify_generated_leaves_generated_files_and_the_build_up_to_date's)."""
    return codegen_main(command, "--root", str(root))


@pytest.fixture
def small_repo(tmp_path: Path, _parse_each_schema_text_once) -> Path:
    """A repository of one protocol (shm v1), generated once."""
    root = tmp_path / "repo"
    (root / "protocols/shm/v1").mkdir(parents=True)
    shutil.copy(ROOT / SHM, root / SHM)
    entry = {
        "id": "shm",
        "version": 1,
        "kind": "c-abi",
        "status": "live",
        "producer": "profiler",
        "consumers": ["agent"],
        "description": "test",
        "source": SHM,
        "outputs": [
            "generated/c/include/comminsight/shm_v1.h",
            "generated/c/contract/shm_v1_layout.c",
            "generated/python/comminsight_gen/abi/shm_v1.py",
        ],
    }
    (root / "protocols/registry.yaml").write_text(
        yaml.safe_dump({"registry_version": 1, "protocols": [entry]})
    )
    proc = codegen(root, "generate")
    assert proc.returncode == 0, proc.stderr
    return root


def files_and_mtimes(root: Path) -> dict[Path, tuple[bytes, int]]:
    files = [p for p in (root / "generated").rglob("*") if p.is_file()]
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}


def test_generate_rewrites_only_what_changed_and_removes_only_what_is_stale(
    small_repo: Path,
) -> None:
    root = small_repo
    header = "generated/c/include/comminsight/shm_v1.h"
    cache = root / "generated/python/comminsight_gen/__pycache__/x.cpython-311.pyc"
    cache.parent.mkdir()
    cache.write_bytes(b"cache")
    first = mtimes(root)
    proc = codegen(root, "generate")
    assert proc.returncode == 0, proc.stderr
    assert "codegen: wrote" not in proc.stdout
    assert mtimes(root) == first  # nothing differed: nothing written

    # a file edited by hand, a stale file and a stale package of the tree
    (root / header).write_text((root / header).read_text() + "/* edited */\n")
    (root / "generated/c/include/comminsight/old_v0.h").write_text("/* stale */\n")
    stale_pkg = root / "generated/python/comminsight_gen/gone"
    (stale_pkg / "__pycache__").mkdir(parents=True)
    (stale_pkg / "__init__.py").write_text("")
    (stale_pkg / "__pycache__/__init__.cpython-311.pyc").write_bytes(b"cache")
    edited = files_and_mtimes(root)

    # verify names each, and writes nothing
    proc = codegen(root, "verify")
    assert proc.returncode == 1
    assert f"differs:   {header}" in proc.stderr
    assert "stale:     generated/c/include/comminsight/old_v0.h" in proc.stderr
    assert "stale:     generated/python/comminsight_gen/gone/__init__.py" in proc.stderr
    assert "make generate" in proc.stderr
    assert files_and_mtimes(root) == edited

    proc = codegen(root, "generate")
    assert proc.returncode == 0, proc.stderr
    assert f"codegen: wrote {header}" in proc.stdout.splitlines()
    after = mtimes(root)
    assert after.pop(header) != first[header]
    assert after == {k: v for k, v in first.items() if k != header}  # the rest untouched
    assert not (root / "generated/c/include/comminsight/old_v0.h").exists()
    assert not stale_pkg.exists()
    assert cache.read_bytes() == b"cache"  # a cache beside live modules is no output: kept
    assert not list((root / "generated").rglob("*.tmp.*"))
    proc = codegen(root, "verify")
    assert proc.returncode == 0, proc.stderr
    assert "not a git checkout" in proc.stdout


def test_verify_fails_on_generated_files_not_committed(small_repo: Path) -> None:
    root = small_repo
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "protocols"], check=True)
    subprocess.run([*git, "commit", "-qm", "sources only"], check=True)
    proc = codegen(root, "verify")
    assert proc.returncode == 1
    assert "matches protocols/ and codegen/, but is not committed" in proc.stderr
    assert "?? generated/c/include/comminsight/shm_v1.h" in proc.stderr
    subprocess.run([*git, "add", "generated"], check=True)
    subprocess.run([*git, "commit", "-qm", "generated"], check=True)
    proc = codegen(root, "verify")
    assert proc.returncode == 0, proc.stderr


# ---- the plugin is replaced whole


SLOW_CC = """
# writes the plugin to its -o in small pieces, a few ms apart: a recipe that let its target be
# written in place would show a reader that file half written, nearly every time
import sys, time
args = sys.argv[1:]
out = args[args.index("-o") + 1] if "-o" in args else "/dev/null"
if out != "/dev/null":  # (the Makefile's probe for -flto writes there)
    data = open(sys.argv[0].removesuffix(".py") + ".so", "rb").read()
    with open(out, "wb") as f:
        for i in range(0, len(data), 16384):
            f.write(data[i : i + 16384])
            f.flush()
            time.sleep(0.005)
"""


def slow_cc(tmp_path: Path, plugin: Path) -> Path:
    """A compiler (for make's CC=) that writes a copy of plugin slowly (SLOW_CC)."""
    shutil.copy2(plugin, tmp_path / "slow-cc.so")
    (tmp_path / "slow-cc.py").write_text(SLOW_CC)
    cc = tmp_path / "slow-cc"
    cc.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$0.py" "$@"\n')
    cc.chmod(0o755)
    return cc


def test_a_reader_never_sees_the_plugin_half_written(tmp_path: Path, built_plugin: Path) -> None:
    """Read the plugin's path in a loop while make rebuilds it (twice, -B): every read is a
    whole ELF file, the old one or the new one; no temporary is left beside it. The compiler
    the rebuilds run writes the real plugin slowly (SLOW_CC): the recipe is the Makefile's, and
    the time its output spends half written is long, not the microseconds of a linker's write."""
    dist = tmp_path / "dist"
    plugin = dist_holding(built_plugin, dist)
    cc = slow_cc(tmp_path, built_plugin)
    stop = threading.Event()
    reads: list[int] = []
    problems: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                data = plugin.read_bytes()
            except OSError as e:  # the path must never be missing either
                problems.append(f"{type(e).__name__}: {e}")
                continue
            reads.append(len(data))
            problem = elf_problem(data)
            if problem:
                problems.append(problem)
            time.sleep(0.002)  # leave the compiler the CPU (not a timing assertion)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        for _ in range(2):
            inode = plugin.stat().st_ino
            make("-B", f"DIST={dist}", f"CC={cc}", "build-profiler")
            assert plugin.stat().st_ino != inode, "make did not replace the plugin"
    finally:
        stop.set()
        thread.join()
    assert problems == [], f"{len(problems)} of {len(reads)} reads: {problems[:5]}"
    assert reads, "the reader never ran"
    assert sorted(p.name for p in dist.iterdir()) == [PLUGIN]
    assert plugin.read_bytes() == built_plugin.read_bytes()


FAILING_CC = """#!/bin/sh
# writes part of its output, then fails (as a compiler killed or out of space would)
out=
while [ $# -gt 0 ]; do
  if [ "$1" = -o ]; then out=$2; shift; fi
  shift
done
if [ -n "$out" ]; then printf '\\177ELF half' > "$out"; fi
exit 1
"""


def test_a_failed_build_keeps_the_old_artifact_and_leaves_no_temporary(
    tmp_path: Path, built_plugin: Path
) -> None:
    dist, build = tmp_path / "dist", tmp_path / "build"
    plugin = dist_holding(built_plugin, dist)
    good = plugin.read_bytes()
    cc = tmp_path / "failing-cc"
    cc.write_text(FAILING_CC)
    cc.chmod(0o755)
    proc = make("-B", f"DIST={dist}", f"BUILD={build}", f"CC={cc}", "build-profiler", check=False)
    assert proc.returncode != 0
    assert plugin.read_bytes() == good
    assert sorted(p.name for p in dist.iterdir()) == [PLUGIN]
    # an artifact that did not exist yet: none appears, nor a temporary
    proc = make(f"BUILD={build}", f"CC={cc}", "build-engine", "headers", "-k", check=False)
    assert proc.returncode != 0
    assert [p for p in build.rglob("*") if p.is_file()] == []


def test_every_artifact_rule_writes_beside_its_target_and_renames() -> None:
    """The Makefile's rules for build/ and dist/ outputs (a dry run, nothing built)."""
    out = subprocess.run(
        ["make", "--no-print-directory", *KEEP_VENV, "-n", "-B", "DIST=/d", "BUILD=/b", "build"]
        + ["build-profiler-sanitizers"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=MAKE_ENV,
        check=True,
    ).stdout
    targets = [
        f"/d/{PLUGIN}",
        f"/b/asan/{PLUGIN}",
        f"/b/tsan/{PLUGIN}",
        "/b/engine/libciengine.so",
        "/b/headers/shm_v1.o",
        "/d/comminsight-",  # the wheel
        "/d/comminsight_inject-",  # Inject's wheel
    ]
    for target in targets:
        lines = [line for line in out.splitlines() if f'tmp="{target}' in line]
        assert lines, f"no temporary beside {target} in:\n{out}"
    assert "-w /d" not in out and "-w $(DIST)" not in out  # pip never writes into dist/ itself
