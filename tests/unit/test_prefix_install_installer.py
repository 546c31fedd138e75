"""scripts/prefix_install.py picks its installer: uv where one is given (pip's configured
find-links passed on), pip where none is, and pip again where uv fails."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "prefix_install.py"


@pytest.fixture
def installer(monkeypatch):
    spec = importlib.util.spec_from_file_location("prefix_install", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ran: list[list[str]] = []
    failing: set[str] = set()

    def run(cmd):
        ran.append(cmd)
        if cmd[0] in failing:
            raise module.InstallError(f"{cmd[0]} exited with 2")

    monkeypatch.setattr(module, "_run", run)
    return module, ran, failing


def _args(uv: str | None) -> argparse.Namespace:
    return argparse.Namespace(uv=uv, requirements="runtime.txt", wheel="comminsight.whl")


def test_uv_installs_the_pins_and_the_wheel_with_pip_s_find_links(installer, monkeypatch):
    module, ran, _ = installer
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels /srv/more")
    module._install_packages("/p/venv/bin/python", _args("/dev/uv"))
    assert [c[:3] for c in ran] == [["/dev/uv", "pip", "install"]] * 2 + [
        ["/dev/uv", "pip", "check"]
    ]
    pins, wheel, _ = ran
    assert pins[-2:] == ["-r", "runtime.txt"] and "--python" in pins
    assert pins[pins.index("--python") + 1] == "/p/venv/bin/python"
    first = pins.index("-f")
    assert pins[first : first + 4] == ["-f", "/opt/wheels", "-f", "/srv/more"]
    assert "--no-deps" in wheel and wheel[-1] == "comminsight.whl"


def test_without_uv_pip_installs(installer):
    module, ran, _ = installer
    module._install_packages("/p/venv/bin/python", _args(None))
    assert all(c[:3] == ["/p/venv/bin/python", "-m", "pip"] for c in ran) and len(ran) == 3


def test_where_uv_fails_pip_installs_everything(installer, capsys):
    module, ran, failing = installer
    failing.add("/dev/uv")
    module._install_packages("/p/venv/bin/python", _args("/dev/uv"))
    assert ran[0][0] == "/dev/uv"
    assert [c[0] for c in ran[1:]] == ["/p/venv/bin/python"] * 3
    assert ran[1][-2:] == ["-r", "runtime.txt"] and ran[-1][-1] == "check"
    assert "uv could not install the Agent's venv" in capsys.readouterr().out
