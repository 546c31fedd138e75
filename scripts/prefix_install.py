#!/usr/bin/env python3
"""`make install` and `make uninstall`: CommInsight under a prefix, and a manifest of it.

The Agent gets an environment of its own (<prefix>/lib/comminsight/venv, built from the exact
pins of requirements/runtime.txt), reached through two small wrappers in <prefix>/bin: its ~35
distributions never enter the training environment, where a different numpy, protobuf or
grpcio may already be pinned. The training environment is given only Inject, a wheel with no
dependencies, and only when asked (--training-python).

Everything written is listed in <prefix>/share/comminsight/install-manifest.json, so that
uninstall removes exactly that: the files and the venv install made, the directories it
created (when empty), and Inject from the training environment it went into. What the Agent
writes at run time (a home under the prefix is the default) is not in the manifest and stays.
A configuration file that was edited after install is kept. Standard library only: it runs
before any environment of ours exists.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

MANIFEST = Path("share/comminsight/install-manifest.json")
VENV = Path("lib/comminsight/venv")
SHARE = Path("share/comminsight")
DOC = Path("share/doc/comminsight")
SYSTEMD_UNIT = Path("lib/systemd/system/comminsight-agent.service")
# The unit in deploy/systemd names this prefix and home; the installed copy names the real one.
UNIT_DEFAULT_PREFIX = "/opt/comminsight"
INJECT_DISTRIBUTION = "comminsight-inject"
PIP = ("-m", "pip", "--disable-pip-version-check")


class InstallError(Exception):
    pass


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(cmd: list[str]) -> None:
    print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    done = subprocess.run(cmd)
    if done.returncode != 0:
        raise InstallError(f"{cmd[0]} exited with {done.returncode}")


class Installation:
    """What one install wrote, recorded as it is written (paths relative to the prefix)."""

    def __init__(self, prefix: Path):
        self.prefix = prefix
        self.files: list[dict] = []
        self.trees: list[str] = []
        self.dirs: list[str] = []
        self.training_python: str | None = None

    def _rel(self, path: Path) -> str:
        return str(path.relative_to(self.prefix))

    def ensure_dir(self, rel: Path) -> Path:
        """Create rel and any missing parent (the prefix included), recording each one created."""
        path = self.prefix / rel
        missing = []
        probe = path
        while not probe.exists():
            missing.append(probe)
            if probe == self.prefix or probe.parent == probe:
                break
            probe = probe.parent
        for d in reversed(missing):
            if d == self.prefix:  # its missing parents are not ours to remove later
                d.mkdir(mode=0o755, parents=True)
                self.dirs.append(".")
            else:
                d.mkdir(mode=0o755)
                self.dirs.append(self._rel(d))
        return path

    def put(self, data: bytes, rel: Path, mode: int, keep_if_changed: bool = False) -> None:
        self.ensure_dir(rel.parent)
        dest = self.prefix / rel
        tmp = dest.with_name(f".{dest.name}.installing")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)  # not the umask's view of it
        # a new inode: a training process that has the old plugin mapped keeps it intact
        os.replace(tmp, dest)
        entry = {"path": self._rel(dest), "sha256": hashlib.sha256(data).hexdigest()}
        if keep_if_changed:
            entry["keep_if_changed"] = True
        self.files.append(entry)

    def write_manifest(self) -> None:
        body = {
            "manifest_version": 1,
            "prefix": str(self.prefix),
            "files": self.files,
            "trees": self.trees,
            "dirs": self.dirs,
            "training_python": self.training_python,
        }
        self.ensure_dir(MANIFEST.parent)
        path = self.prefix / MANIFEST
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(body, indent=1) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)


def _wrapper(target: Path, what: str) -> bytes:
    return (
        "#!/bin/sh\n"
        f"# CommInsight {what}, from its own environment (written by `make install`).\n"
        f'exec {shlex.quote(str(target))} "$@"\n'
    ).encode()


def install(args: argparse.Namespace) -> None:
    os.umask(0o022)  # the Profiler starts the agent only from files others cannot write
    prefix = Path(args.prefix).absolute()
    repo = Path(args.repo).absolute()
    if (prefix / MANIFEST).exists():
        print(f"replacing the installation recorded in {prefix / MANIFEST}")
        uninstall_prefix(prefix)
    if (prefix / VENV).exists():
        raise InstallError(
            f"{prefix / VENV} exists and no install manifest claims it; move it away"
        )
    inst = Installation(prefix)
    try:
        _install_into(inst, args, repo)
    finally:
        if inst.files or inst.trees or inst.dirs or inst.training_python:
            inst.write_manifest()  # even a failed install can be uninstalled


def _install_packages(vpy: str, args: argparse.Namespace) -> None:
    """The pinned requirements, then the wheel with no dependency resolution, into vpy's venv:
    with uv where one is given (the same pins; a third of pip's CPU, bytecode compiled in
    parallel), else with pip, and with pip too where uv fails (an index only pip is
    configured for: uv reads no pip configuration but PIP_FIND_LINKS)."""
    if args.uv:
        uv = [args.uv, "pip"]
        where = ["--python", vpy, "--compile-bytecode"]
        links = [a for d in os.environ.get("PIP_FIND_LINKS", "").split() for a in ("-f", d)]
        try:
            _run([*uv, "install", "--quiet", *where, *links, "-r", args.requirements])
            _run([*uv, "install", "--quiet", *where, "--no-deps", "--reinstall", args.wheel])
            _run([*uv, "check", "--python", vpy])
            return
        except InstallError as e:
            print(f"uv could not install the Agent's venv ({e}): pip installs it", flush=True)
    _run([vpy, *PIP, "install", "--quiet", "-r", args.requirements])
    _run([vpy, *PIP, "install", "--quiet", "--no-deps", "--force-reinstall", args.wheel])
    _run([vpy, *PIP, "check"])


def _install_into(inst: Installation, args: argparse.Namespace, repo: Path) -> None:
    prefix = inst.prefix
    # the Agent's own environment: exact pins, then the wheel with no dependency resolution
    inst.ensure_dir(VENV.parent)
    inst.trees.append(str(VENV))
    _run([args.python, "-m", "venv", str(prefix / VENV)])
    vpy = str(prefix / VENV / "bin" / "python")
    _install_packages(vpy, args)

    inst.put(
        _wrapper(prefix / VENV / "bin/comminsight-agent", "Agent"),
        Path("bin/comminsight-agent"),
        0o755,
    )
    inst.put(_wrapper(prefix / VENV / "bin/comminsight", "CLI"), Path("bin/comminsight"), 0o755)

    plugin = Path(args.plugin)
    inst.put(plugin.read_bytes(), Path("lib") / plugin.name, 0o755)
    for header in sorted((repo / "generated/c/include/comminsight").glob("*.h")):
        inst.put(header.read_bytes(), Path("include/comminsight") / header.name, 0o644)
    inject = Path(args.inject_wheel)
    inst.put(inject.read_bytes(), SHARE / inject.name, 0o644)
    if not (prefix / "etc/comminsight.conf").exists():
        conf = (repo / "config/comminsight.conf").read_bytes()
        inst.put(conf, Path("etc/comminsight.conf"), 0o644, keep_if_changed=True)
    unit = (repo / "deploy/systemd/comminsight-agent.service").read_text()
    inst.put(unit.replace(UNIT_DEFAULT_PREFIX, str(prefix)).encode(), SYSTEMD_UNIT, 0o644)
    for name in ("LICENSE", "NOTICE"):
        inst.put((repo / name).read_bytes(), DOC / name, 0o644)

    if args.training_python:
        # Inject alone: no dependencies, whatever the training environment already holds
        inst.training_python = args.training_python
        wheel = str(prefix / SHARE / inject.name)
        _run(
            [
                args.training_python,
                *PIP,
                "install",
                "--quiet",
                "--no-deps",
                "--force-reinstall",
                wheel,
            ]
        )
    print(
        f"installed under {prefix}: {prefix / 'bin/comminsight-agent'} "
        f"(manifest {prefix / MANIFEST})"
    )


def _inside(prefix: Path, rel: str) -> Path:
    path = (prefix / rel).absolute()
    if rel.startswith("/") or ".." in Path(rel).parts or not path.is_relative_to(prefix):
        raise InstallError(f"the manifest names {rel!r}, outside {prefix}: refusing it")
    return path


def uninstall_prefix(prefix: Path) -> None:
    manifest = prefix / MANIFEST
    if not manifest.exists():
        raise InstallError(f"no install manifest at {manifest}: nothing of ours to remove")
    body = json.loads(manifest.read_text())
    if body.get("manifest_version") != 1:
        raise InstallError(f"{manifest}: unknown manifest version {body.get('manifest_version')!r}")
    # every path checked before anything is removed: a forged manifest removes nothing
    for rel in [*body["trees"], *(e["path"] for e in body["files"]), *body["dirs"]]:
        if rel != ".":
            _inside(prefix, rel)
    tp = body.get("training_python")
    if tp:
        if Path(tp).exists():
            _run([tp, *PIP, "uninstall", "--yes", "--quiet", INJECT_DISTRIBUTION])
        else:
            print(f"{tp} is gone: Inject went with it", file=sys.stderr)
    for tree in body["trees"]:
        shutil.rmtree(_inside(prefix, tree), ignore_errors=True)
    for entry in body["files"]:
        path = _inside(prefix, entry["path"])
        if not path.exists() and not path.is_symlink():
            continue
        if entry.get("keep_if_changed") and path.is_file() and _sha256(path) != entry["sha256"]:
            print(f"kept {path}: changed since install", file=sys.stderr)
            continue
        path.unlink()
    manifest.unlink()
    # deepest first; a directory that now holds anything not ours (a home, an edited
    # config) stays
    for rel in sorted(body["dirs"], key=lambda r: len(Path(r).parts), reverse=True):
        path = prefix if rel == "." else _inside(prefix, rel)
        try:
            path.rmdir()
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("install", help="install under a prefix and write its manifest")
    p.add_argument("--prefix", required=True)
    p.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
    p.add_argument("--python", required=True, help="interpreter for the Agent's venv")
    p.add_argument("--requirements", required=True, help="exact pins of the Agent's venv")
    p.add_argument("--wheel", required=True, help="the comminsight wheel")
    p.add_argument("--inject-wheel", required=True)
    p.add_argument("--plugin", required=True, help="libnccl-profiler-comminsight.so")
    p.add_argument("--uv", help="uv to install the Agent's venv with (else pip)")
    p.add_argument(
        "--training-python", default="", help="also install Inject (only) into this interpreter"
    )
    u = sub.add_parser("uninstall", help="remove what the manifest lists")
    u.add_argument("--prefix", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            install(args)
        else:
            uninstall_prefix(Path(args.prefix).absolute())
            print(f"uninstalled CommInsight from {Path(args.prefix).absolute()}")
    except (InstallError, OSError) as e:
        print(f"{args.command}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
