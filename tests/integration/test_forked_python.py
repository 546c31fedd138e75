"""forked_python: a process forked from the prepared parent is the process a new interpreter
would be, as far as its code can tell, and a start-up a fork cannot reproduce gets a new
interpreter."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys

import forked_python
import pytest

# What a process sees of itself: everything `python PROBE` or `python -m MODULE` sets up
PROBE = r"""
import ctypes, json, os, random, resource, sys
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
umask = os.umask(0)
print(json.dumps({
    "argv": sys.argv,
    "path0": sys.path[0],
    "pythonpath": [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p in sys.path],
    "cwd": os.getcwd(),
    "env": os.environ.get("PROBE_VALUE"),
    "c_env": (libc.getenv(b"PROBE_VALUE") or b"").decode(),
    "comminsight_env": sorted(k for k in os.environ if k.startswith("COMMINSIGHT_")),
    "umask": umask,
    "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    "stdin": sys.stdin.read(),
    "name": __name__,
    "random": random.random(),
}))
print("to stderr", file=sys.stderr)
code = os.environ.get("PROBE_EXIT")
if code == "raise":
    raise RuntimeError("probe failed")
if code == "signal":
    os.kill(os.getpid(), 9)
sys.exit(int(code or 0))
"""


@pytest.fixture
def probe(tmp_path):
    script = tmp_path / "pkg" / "probe.py"
    script.parent.mkdir()
    script.write_text(PROBE)
    (script.parent / "__init__.py").write_text("")
    return script


def env(**extra) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    return {**base, "PROBE_VALUE": "föö", "COMMINSIGHT_HOME": "/nowhere", **extra}


def both(argv, **kw):
    """(the forked process's result, a new interpreter's)"""
    forked = forked_python.run(argv, capture_output=True, text=True, timeout=60, **kw)
    real = subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)
    return forked, real


def view(result) -> dict:
    seen = json.loads(result.stdout.splitlines()[0])
    seen.pop("random")
    return seen


def test_a_script_sees_what_a_new_interpreter_sees(probe, tmp_path):
    forked, real = both(
        [sys.executable, str(probe), "a", "b c"],
        env=env(PYTHONPATH=str(tmp_path)),
        cwd=tmp_path,
        input="typed in",
    )
    assert view(forked) == view(real)
    assert view(forked)["stdin"] == "typed in" and view(forked)["c_env"] == "föö"
    assert view(forked)["path0"] == str(probe.parent)
    assert forked.stderr == real.stderr == "to stderr\n"
    assert forked.returncode == real.returncode == 0


def test_a_module_sees_what_python_dash_m_sees(probe, tmp_path):
    forked, real = both([sys.executable, "-m", "pkg.probe", "--flag"], env=env(), cwd=tmp_path)
    assert view(forked) == view(real)
    assert forked.stderr == real.stderr == "to stderr\n"
    assert view(forked)["argv"] == [str(probe), "--flag"] and view(forked)["name"] == "__main__"
    # a module the parent has imported runs as `-m` runs it, not imported: no runpy warning
    forked, real = both([sys.executable, "-m", "comminsight.agent.main", "--version"], env=env())
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        real.returncode,
        real.stdout,
        real.stderr,
    )


@pytest.mark.parametrize(
    "how, status", [("3", 3), ("raise", 1), ("signal", -signal.SIGKILL)], ids=str
)
def test_its_exit_status_is_the_interpreters(probe, how, status):
    forked, real = both([sys.executable, str(probe)], env=env(PROBE_EXIT=how))
    assert forked.returncode == real.returncode == status
    if how == "raise":
        assert forked.stderr.endswith("RuntimeError: probe failed\n"), forked.stderr


def test_umask_and_limits_are_its_own(probe):
    old = os.umask(0o027)
    try:
        forked = forked_python.run(
            [sys.executable, str(probe)], env=env(), capture_output=True, text=True, timeout=60
        )
    finally:
        os.umask(old)
    assert view(forked)["umask"] == 0o027
    proc = forked_python.popen(
        [sys.executable, str(probe)],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        rlimits={resource.RLIMIT_NOFILE: (100, resource.getrlimit(resource.RLIMIT_NOFILE)[1])},
    )
    out, err = proc.communicate(timeout=60)
    assert isinstance(proc, forked_python.ForkedPopen)
    assert err is None and out.endswith(b"to stderr\n")  # stderr went where stdout did
    assert json.loads(out.splitlines()[0])["nofile"] == 100


def test_limits_the_caller_set_after_its_parent_started_are_the_childs(probe):
    forked_python.run([sys.executable, str(probe)], env=env(), capture_output=True, timeout=60)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (200, hard))
    try:
        forked = forked_python.run(
            [sys.executable, str(probe)], env=env(), capture_output=True, text=True, timeout=60
        )
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert view(forked)["nofile"] == 200


def test_children_do_not_share_random_state(probe):
    draws = {
        view_random
        for view_random in (
            json.loads(
                forked_python.run(
                    [sys.executable, str(probe)], env=env(), capture_output=True, timeout=60
                ).stdout.splitlines()[0]
            )["random"]
            for _ in range(3)
        )
    }
    assert len(draws) == 3


def test_a_signal_reaches_the_process_and_its_status_comes_back(tmp_path):
    script = tmp_path / "wait.py"
    script.write_text("import sys\nprint('up', flush=True)\nsys.stdin.read()\n")
    proc = forked_python.popen(
        [sys.executable, str(script)], env=env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdout.readline() == b"up\n"
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.1)
    proc.terminate()
    assert proc.wait(60) == -signal.SIGTERM


def test_a_start_up_other_than_the_callers_gets_a_new_interpreter(tmp_path):
    """LD_BIND_NOW (read by the dynamic loader as a process starts) is not this process's:
    the child is a new interpreter, whose process began with it; without it, a fork."""
    script = tmp_path / "environ.py"
    script.write_text(
        "print(b'LD_BIND_NOW=1' in open('/proc/self/environ', 'rb').read().split(b'\\0'))"
    )
    for extra, kind, began_with in (
        ({}, forked_python.ForkedPopen, False),
        ({"LD_BIND_NOW": "1"}, subprocess.Popen, True),
    ):
        proc = forked_python.popen(
            [sys.executable, str(script)], env=env(**extra), stdout=subprocess.PIPE, text=True
        )
        out, _ = proc.communicate(timeout=60)
        assert type(proc) is kind
        assert out == f"{began_with}\n"


def test_what_a_fork_cannot_be_gets_a_new_interpreter(probe, monkeypatch, tmp_path):
    for argv in ([sys.executable, "-c", "print(1)"], ["/bin/echo", "x"]):
        proc = forked_python.popen(argv, env=env(), stdout=subprocess.DEVNULL)
        assert type(proc) is subprocess.Popen
        assert proc.wait(60) == 0
    hooked = tmp_path / "hooks"  # a sitecustomize runs as an interpreter starts: not in a fork
    hooked.mkdir()
    (hooked / "sitecustomize.py").write_text("print('customized')\n")
    proc = forked_python.popen(
        [sys.executable, str(probe)], env=env(PYTHONPATH=str(hooked)), stdout=subprocess.PIPE
    )
    assert type(proc) is subprocess.Popen
    assert proc.communicate(timeout=60)[0].startswith(b"customized\n")
    with pytest.raises(FileNotFoundError):  # as Popen says it
        forked_python.popen([sys.executable, str(probe)], env=env(), cwd=tmp_path / "nowhere")
    monkeypatch.setenv(forked_python.SWITCH, "0")
    proc = forked_python.popen([sys.executable, str(probe)], env=env(), stdout=subprocess.DEVNULL)
    assert type(proc) is subprocess.Popen
    assert proc.wait(60) == 0
