"""What the offline CLI writes (`steps LOGS`: step summaries and the engine's checkpoint;
`trace LOGS -o FILE`; `sim`'s run files under its home) goes where the home's trust walk
allows, as the Agent's own files do: run as root over logs another user controls, a symbolic
link that user planted on the way is not followed and a directory that user owns is refused
by name; nothing is written there. Reading such logs stays allowed, and the output written
where it is safe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_in_process import run_cli
from profiler_builds import builds

from comminsight.sim import SimConfig, run_simulation

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
NOBODY = 65534


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    return run_cli(args, env)


@pytest.fixture(scope="module")
def sim_logs(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("offline-writes")
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(home),
        workload="ddp",
        ranks=2,
        steps=3,
        time_scale=0.02,
        env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"),),
    )
    assert not run_simulation(config).errors
    return home / "inspector_logs"


def job_dir(sim_logs: Path, where: Path) -> Path:
    """`where`/inspector_logs, a copy of the simulated run's logs."""
    where.mkdir(mode=0o700)
    shutil.copytree(sim_logs, where / "inspector_logs")
    return where / "inspector_logs"


def chown_tree(path: Path, uid: int) -> None:
    for directory, _, files in os.walk(path):
        os.chown(directory, uid, uid)
        for name in files:
            os.chown(os.path.join(directory, name), uid, uid)


def root_only_dir(tmp_path: Path) -> Path:
    target = tmp_path / "root-only"
    target.mkdir(mode=0o700)
    return target


def planted_link(link: Path, target: Path) -> None:
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)


def everything_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def refused(out: subprocess.CompletedProcess, *says: str) -> None:
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stdout == "", out.stdout
    assert "Traceback" not in out.stderr, out.stderr
    for text in says:
        assert text in out.stderr, out.stderr


def test_steps_and_trace_still_write_where_the_walk_allows(sim_logs, tmp_path):
    logs = job_dir(sim_logs, tmp_path / "job")
    out = cli("steps", str(logs), "--format", "json")
    assert out.returncode == 0, out.stderr
    written = tmp_path / "job" / "semantics" / "step" / "offline"
    assert sorted(p.name for p in written.iterdir() if p.suffix == ".jsonl")  # one per GPU
    assert (written / "engine.checkpoint.json").is_file()
    for level in (written, written.parent, written.parent.parent):
        assert level.stat().st_mode & 0o777 == 0o700
    assert json.loads(out.stdout)["total"] > 0
    trace = tmp_path / "traces" / "new" / "trace.json"
    out = cli("trace", str(logs), "-o", str(trace), "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(trace.read_text())


@ROOT_ONLY
def test_the_default_output_beside_logs_another_user_controls_is_refused(sim_logs, tmp_path):
    """The case as found: logs in a directory of uid 65534 with `semantics -> a root-only
    directory`; root's `steps LOGS` wrote its summaries and checkpoint through the link."""
    target = root_only_dir(tmp_path)
    job = tmp_path / "job"
    logs = job_dir(sim_logs, job)
    planted_link(job / "semantics", target)
    chown_tree(job, NOBODY)
    out = cli("steps", str(logs))
    refused(out, "refusing to write the step summaries", f"{job} (a parent of", f"uid {NOBODY}")
    assert "--out" in out.stderr
    assert everything_under(target) == []
    # their logs are still read, the summaries written where root chooses
    mine = tmp_path / "mine"
    out = cli("steps", str(logs), "--out", str(mine), "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["total"] > 0 and list(mine.glob("*.jsonl"))
    assert everything_under(target) == []


@ROOT_ONLY
def test_a_link_another_user_planted_on_the_output_path_is_not_followed(sim_logs, tmp_path):
    target = root_only_dir(tmp_path)
    job = tmp_path / "job"
    logs = job_dir(sim_logs, job)
    planted_link(job / "semantics", target)  # in root's own directory, made by another user
    link = job / "semantics"
    out = cli("steps", str(logs))
    refused(out, f"{link} (on the way to", f"symbolic link owned by uid {NOBODY}")
    out = cli("steps", str(logs), "--out", str(link / "step"))
    refused(out, f"symbolic link owned by uid {NOBODY}", "not followed")
    out = cli("steps", str(logs), "--out", str(link))
    refused(out, f"{link}: is a symbolic link owned by uid {NOBODY}")
    out = cli("trace", str(logs), "-o", str(link / "trace.json"))
    refused(out, "refusing to write the trace", f"symbolic link owned by uid {NOBODY}")
    assert everything_under(target) == []


@ROOT_ONLY
def test_a_directory_another_user_owns_is_refused_by_name(sim_logs, tmp_path):
    logs = job_dir(sim_logs, tmp_path / "job")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)
    out = cli("steps", str(logs), "--out", str(theirs))
    refused(out, f"{theirs}: is owned by uid {NOBODY}")
    out = cli("steps", str(logs), "--out", str(theirs / "deeper" / "out"))
    refused(out, f"{theirs} (a parent of {theirs / 'deeper' / 'out'}) is owned by uid {NOBODY}")
    out = cli("trace", str(logs), "-o", str(theirs / "trace.json"))
    refused(out, f"{theirs} (a parent of {theirs / 'trace.json'}) is owned by uid {NOBODY}")
    assert everything_under(theirs) == []


@ROOT_ONLY
def test_a_sim_run_dir_through_another_users_link_is_refused(tmp_path):
    target = root_only_dir(tmp_path)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    planted_link(home / "sim", target)
    plugin = str(builds()["plain"].path)
    common = ("--plugin", plugin, "--ranks", "2", "--steps", "1")
    common += ("--env", "COMMINSIGHT_AGENT_AUTOSTART=0")
    out = cli("sim", "--home", str(home), *common)
    refused(out, "refusing to write the run's files", f"{home / 'sim'}: is a symbolic link")
    out = cli("sim", "--home", str(home), "--out", str(home / "sim" / "run"), *common)
    refused(out, f"symbolic link owned by uid {NOBODY}")
    assert everything_under(target) == []
