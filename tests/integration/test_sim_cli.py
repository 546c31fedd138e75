"""`comminsight sim`: runs the simulation from the command line and prints its summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import forked_python
from sim_recording import build_recording_plugin, load_calls

ROOT = Path(__file__).resolve().parents[2]


def sim(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return forked_python.run(
        [sys.executable, "-m", "comminsight.cli", "sim", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
        timeout=300,
    )


def test_sim_command_runs_a_workload_and_prints_json(tmp_path):
    plugin = build_recording_plugin(tmp_path)
    calls = tmp_path / "calls"
    calls.mkdir()
    proc = sim(
        "--plugin",
        str(plugin),
        "--workload",
        "fsdp",
        "--ranks",
        "3",
        "--steps",
        "1",
        "--model-params",
        "10M",
        "--layers",
        "2",
        "--time-scale",
        "0.01",
        "--seed",
        "7",
        "--home",
        str(tmp_path / "home"),
        "--env",
        f"RECORDING_PLUGIN_DIR={calls}",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    summary = json.loads(proc.stdout)
    assert summary["status"] == "completed" and summary["plugin_name"] == "recording"
    assert summary["ops"]["planned"] == summary["ops"]["completed"] > 0
    run_dir = Path(summary["run_dir"])
    assert run_dir.parent == tmp_path / "home" / "sim"
    assert oct(run_dir.stat().st_mode & 0o777) == "0o700"
    for name in ("rank-00000.jsonl", "board.bin", "config.json"):
        assert oct((run_dir / name).stat().st_mode & 0o777) == "0o600", name
    assert oct(run_dir.parent.stat().st_mode & 0o777) == "0o700"
    assert sorted(load_calls(calls)) == [0, 1, 2]


def test_sim_command_renders_text_and_reports_a_hang(tmp_path):
    plugin = build_recording_plugin(tmp_path)
    proc = sim(
        "--plugin",
        str(plugin),
        "--ranks",
        "2",
        "--steps",
        "1",
        "--model-params",
        "10M",
        "--time-scale",
        "0.01",
        "--home",
        str(tmp_path),
        "--out",
        str(tmp_path / "truth"),
        "--fault",
        "skip:rank=0,op=2",
        "--hang-hold",
        "0.3",
        env={"RECORDING_PLUGIN_DIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "aborted" in proc.stdout and "skip:rank=0,op=2" in proc.stdout
    assert str(tmp_path / "truth") in proc.stdout.replace("\n", "")


def test_sim_command_refuses_bad_options(tmp_path):
    def refused(*args: str) -> str:
        proc = sim(*args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert proc.stdout == ""  # the error on stderr, and nothing else
        return proc.stderr

    home = ("--home", str(tmp_path))
    assert "kind must be one of" in refused("--plugin", "x.so", *home, "--fault", "explode:rank=0")
    assert "does not exist" in refused("--plugin", str(tmp_path / "missing.so"), *home)
    assert "tp*pp must divide ranks" in refused("--workload", "tp-pp-dp", "--ranks", "6", *home)
    assert "not KEY=VALUE" in refused("--plugin", "x.so", *home, "--env", "NOEQUALS")


def test_sim_reports_progress_and_draws_it_only_on_a_terminal(tmp_path):
    import io

    from rich.console import Console

    from comminsight.cli.command_line import build_parser
    from comminsight.cli.simulate import cmd_sim
    from comminsight.sim import SimConfig, run_simulation

    plugin = build_recording_plugin(tmp_path)
    seen = []
    config = SimConfig(
        plugin=str(plugin),
        home=str(tmp_path / "home"),
        ranks=2,
        steps=1,
        model_params=10_000_000,
        time_scale=0.01,
        env=(("RECORDING_PLUGIN_DIR", str(tmp_path)),),
    )
    result = run_simulation(config, on_progress=seen.append)
    assert not result.errors
    assert seen, "no progress while the ranks ran"
    planned = seen[0].arrivals_planned
    assert planned > 0 and all(p.ranks == 2 and 0 <= p.arrivals <= planned for p in seen)
    assert all(0 <= p.ranks_finished <= 2 and p.aborting is None for p in seen)
    assert [p.arrivals for p in seen] == sorted(p.arrivals for p in seen)

    argv = ["sim", "--plugin", str(plugin), "--ranks", "2", "--steps", "1"]
    argv += ["--model-params", "10M", "--time-scale", "0.01", "--home", str(tmp_path / "h")]
    argv += ["--env", f"RECORDING_PLUGIN_DIR={tmp_path}"]
    for terminal in (True, False):
        text = io.StringIO()
        console = Console(file=text, force_terminal=terminal, width=100)
        assert cmd_sim(build_parser().parse_args(argv), console) == 0
        assert ("op arrivals" in text.getvalue()) is terminal
        assert "ground truth:" in text.getvalue()
