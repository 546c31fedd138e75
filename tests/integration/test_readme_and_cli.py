"""README tables match their sources; the console scripts behave."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from comminsight_gen.config_v1 import KEYS

ROOT = Path(__file__).resolve().parents[2]


README = (ROOT / "README.md").read_text()


def section(name: str) -> str:
    m = re.search(
        rf"<!-- BEGIN generated:{name} -->(.*?)<!-- END generated:{name} -->", README, re.S
    )
    assert m, f"README has no generated:{name} section"
    return m.group(1)


def test_readme_shows_the_two_commands():
    assert "make demo" in README and "make test" in README


def test_readme_protocol_table_matches_registry():
    rows = [r for r in section("protocols").splitlines() if r.startswith("| `")]
    table = [tuple(c.strip().strip("`") for c in r.strip("|").split("|")[:4]) for r in rows]
    registry = yaml.safe_load((ROOT / "protocols/registry.yaml").read_text())["protocols"]
    assert table == [(p["id"], f"v{p['version']}", p["kind"], p["status"]) for p in registry]
    for p in registry:
        assert p["source"] in section("protocols")
        for out in p["outputs"]:
            assert (ROOT / out).exists(), f"registry lists {out} but it does not exist"


def test_readme_config_table_lists_every_key_with_its_default():
    text = section("config")
    for key in KEYS:
        row = next(r for r in text.splitlines() if r.startswith(f"| `{key.name}` |"))
        default = ("1" if key.default else "0") if key.type == "boolean" else str(key.default)
        assert f"`{default}`" in row, key.name


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def test_make_help_lists_every_target_of_the_makefile():
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.M))
    out = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    listed = {line.split()[0] for line in out.stdout.splitlines() if line.strip()}
    assert targets - listed == set(), "targets without a `## target: what it does` line"


def test_config_command_reports_a_bad_value(tmp_path):
    proc = run(
        "comminsight.cli",
        "config",
        env={"COMMINSIGHT_HOME": str(tmp_path), "COMMINSIGHT_AGENT_MODE": "boss"},
    )
    assert proc.returncode == 2
    assert "COMMINSIGHT_AGENT_MODE" in proc.stderr and proc.stdout == ""


def test_config_command_hides_the_token(tmp_path):
    proc = run(
        "comminsight.cli",
        "config",
        env={"COMMINSIGHT_HOME": str(tmp_path), "COMMINSIGHT_AGENT_TOKEN": "hunter2"},
    )
    assert proc.returncode == 0 and "hunter2" not in proc.stdout
