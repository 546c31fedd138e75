"""Inject's stack handler: registered in a real process when it makes its first process group,
answering the signal with every thread's frames; left out when Inject or stacks are off or the
application holds the signal; bounded in frames, bytes, files and rate."""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import stat
import sys
import threading
from pathlib import Path

import jsonschema
import msgspec
import pytest
from stack_processes import (
    NO_INJECT,
    ROOT,
    ScriptProcess,
    line_of,
    stack_files,
    stacks_line,
    train_script,
)
from waiting import wait_until

from comminsight.agent.hangs.stack_format import describe
from comminsight.inject import settings, stack_dump, stack_signal, state
from comminsight.inject.metadata import MetadataFile
from comminsight_gen.models.python_stack_v1 import PythonStack

STACK_SCHEMA = json.loads((ROOT / "protocols/python-stack/v1/python-stack.schema.json").read_text())
META_SCHEMA = json.loads(
    (ROOT / "protocols/inject-metadata/v1/inject-metadata.schema.json").read_text()
)


def catches(pid: int, signum: int) -> bool:
    """Whether the kernel delivers signum to a handler in pid (SigCgt of /proc/<pid>/status),
    read from outside without sending anything."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    raise AssertionError("no SigCgt line")


def announced(home: Path, pid: int) -> dict:
    line = wait_until(lambda: stacks_line(home, pid), 60, "the stacks line")
    jsonschema.validate(line, META_SCHEMA)
    return line


# ---------------------------------------------------------------------------- a real process


def test_signal_writes_every_threads_frames(tmp_path):
    home = tmp_path / "home"
    script = train_script()
    with ScriptProcess(tmp_path, script, COMMINSIGHT_HOME=str(home)) as p:
        line = announced(home, p.pid)
        assert line["stacks"] == "available" and line["reason"] == ""
        assert line["stack_signal"] == signal.SIGUSR2 and line["stack_signal_name"] == "SIGUSR2"
        assert line["stack_dir"] == str(home / "metadata" / "stacks")
        assert line["start_ticks"] == stack_signal.start_ticks(p.pid)
        assert catches(p.pid, signal.SIGUSR2)
        os.kill(p.pid, signal.SIGUSR2)
        path = wait_until(lambda: stack_files(home, p.pid), 60, "a stack file")[0]
        assert p.proc.poll() is None  # the signal did not end it
    assert path.name == f"{p.pid}-0.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not [x for x in path.parent.iterdir() if x.name.startswith(".")]  # no temporary left
    document = json.loads(path.read_text())
    jsonschema.validate(document, STACK_SCHEMA)
    stack = msgspec.convert(document, PythonStack)
    assert (stack.pid, stack.rank, stack.seq, stack.signal) == (p.pid, 1, 0, signal.SIGUSR2)
    main = stack.threads[0]
    assert main.main and main.name == "MainThread"
    sleeping = main.frames[0]  # where the signal found it, not the handler
    assert (Path(sleeping.file).name, sleeping.line) == ("train.py", line_of(script, "SLEEP_LINE"))
    assert sleeping.function == "train_step"
    assert sleeping.code == "time.sleep(600)  # SLEEP_LINE"
    assert main.frames[1].function == "<module>"
    helper = next(t for t in stack.threads if t.name == "data-loader")
    assert not helper.main and helper.daemon
    loading = [f for f in helper.frames if f.function == "load_batches"]
    assert [f.line for f in loading] == [line_of(script, "HELPER_LINE")]
    assert describe(stack) == (
        f"rank 1 ({stack.host}, pid {p.pid}) at train.py:{line_of(script, 'SLEEP_LINE')} in "
        "train_step: time.sleep(600)  # SLEEP_LINE"
    )


def test_inject_disabled_takes_no_signal(tmp_path):
    home = tmp_path / "home"
    with ScriptProcess(
        tmp_path, train_script(), COMMINSIGHT_HOME=str(home), COMMINSIGHT_INJECT_DISABLE="1"
    ) as p:
        assert not catches(p.pid, signal.SIGUSR2)
        assert not (home / "metadata").exists()  # not even a metadata line


def test_stacks_turned_off_take_no_signal_and_say_so(tmp_path):
    home = tmp_path / "home"
    with ScriptProcess(
        tmp_path, train_script(), COMMINSIGHT_HOME=str(home), COMMINSIGHT_INJECT_STACKS="0"
    ) as p:
        line = announced(home, p.pid)
        assert not catches(p.pid, signal.SIGUSR2)
    assert line["stacks"] == "unavailable"
    assert line["reason"] == "Inject disabled stacks (COMMINSIGHT_INJECT_STACKS=0)"


def test_an_applications_own_handler_is_left_alone(tmp_path):
    home = tmp_path / "home"
    marker = tmp_path / "app-got-it"
    prelude = f"signal.signal(signal.SIGUSR2, lambda s, f: open({str(marker)!r}, 'a').write('x'))"
    with ScriptProcess(tmp_path, train_script(prelude), COMMINSIGHT_HOME=str(home)) as p:
        line = announced(home, p.pid)
        os.kill(p.pid, signal.SIGUSR2)  # still the application's
        wait_until(marker.exists, 60, "the application's handler")
    assert line["stacks"] == "unavailable"
    assert line["reason"].startswith("signal handler taken by the application: SIGUSR2 already")
    assert stack_files(home, p.pid) == []


def test_a_native_handler_is_left_alone(tmp_path):
    """faulthandler installs its handler in C, where Python's own table does not see it."""
    home = tmp_path / "home"
    dump = tmp_path / "faulthandler.txt"
    prelude = (
        f"import faulthandler; _f = open({str(dump)!r}, 'w'); "
        "faulthandler.register(signal.SIGUSR2, file=_f)"
    )
    with ScriptProcess(tmp_path, train_script(prelude), COMMINSIGHT_HOME=str(home)) as p:
        line = announced(home, p.pid)
        os.kill(p.pid, signal.SIGUSR2)
        wait_until(lambda: dump.exists() and "train_step" in dump.read_text(), 60, "its dump")
    assert line["stacks"] == "unavailable"
    assert (
        line["reason"]
        == "signal handler taken by the application: SIGUSR2 has a native (C) handler"
    )
    assert stack_files(home, p.pid) == []


def test_the_signal_is_configurable(tmp_path):
    home = tmp_path / "home"
    with ScriptProcess(
        tmp_path,
        train_script(),
        COMMINSIGHT_HOME=str(home),
        COMMINSIGHT_INJECT_STACK_SIGNAL="SIGRTMIN+3",
    ) as p:
        line = announced(home, p.pid)
        assert not catches(p.pid, signal.SIGUSR2)
        os.kill(p.pid, signal.SIGRTMIN + 3)
        wait_until(lambda: stack_files(home, p.pid), 60, "a stack file")
    assert (line["stack_signal"], line["stack_signal_name"]) == (signal.SIGRTMIN + 3, "SIGRTMIN+3")


def test_a_process_without_inject_catches_only_its_own(tmp_path):
    """The control for the Agent's tests: the no-Inject script records what it receives."""
    marker = tmp_path / "marker"
    with ScriptProcess(tmp_path, NO_INJECT, args=[marker]) as p:
        assert catches(p.pid, signal.SIGUSR2)
        os.kill(p.pid, signal.SIGUSR2)
        wait_until(marker.exists, 60, "the marker")


# ---------------------------------------------------------------------------- settings


@pytest.mark.parametrize("raw", ["SIGTERM", "USR2", "SIGRTMIN+100", "SIGRTMIN+x", ""])
def test_a_bad_signal_name_is_named(raw):
    with pytest.raises(settings.SettingsError, match=r"COMMINSIGHT_INJECT_STACK_SIGNAL=.*environ"):
        settings.load({"COMMINSIGHT_INJECT_STACK_SIGNAL": raw, "COMMINSIGHT_HOME": "/nonexistent"})


def test_a_bad_signal_name_in_a_process_turns_inject_off_with_one_line(tmp_path):
    home = tmp_path / "home"
    p = ScriptProcess(
        tmp_path, train_script(), COMMINSIGHT_HOME=str(home), COMMINSIGHT_INJECT_STACK_SIGNAL="HUP"
    )
    with p:
        assert not catches(p.pid, signal.SIGUSR2)
    err = p.stop()
    assert err.count("comminsight-inject: disabled") == 1
    assert "COMMINSIGHT_INJECT_STACK_SIGNAL='HUP' (environment)" in err


def test_signal_past_sigrtmax_is_unavailable_not_an_error(tmp_path):
    sink = MetadataFile(tmp_path, {}, pid=7, host="h")
    conf = settings.Settings(
        home=tmp_path, disable=False, step_markers=False, stack_signal="SIGRTMIN+99"
    )
    stack_signal.StackAnnouncer(conf, sink).check()
    line = json.loads(sink.path.read_text().splitlines()[-1])
    assert line["stacks"] == "unavailable" and "past SIGRTMAX" in line["reason"]
    assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL


# ---------------------------------------------------------------------------- in this process


@pytest.fixture
def restore_sigusr2():
    state.reset_for_tests()
    yield
    signal.signal(signal.SIGUSR2, signal.SIG_DFL)
    state.reset_for_tests()


def test_a_handler_replaced_later_is_announced_unavailable(tmp_path, restore_sigusr2):
    sink = MetadataFile(tmp_path, {}, pid=7, host="h")
    conf = settings.load({"COMMINSIGHT_HOME": str(tmp_path)})
    announcer = stack_signal.StackAnnouncer(conf, sink)
    announcer.check()
    announcer.check()  # still Inject's: nothing new
    signal.signal(signal.SIGUSR2, lambda s, f: None)
    announcer.check()
    lines = [json.loads(x) for x in sink.path.read_text().splitlines()]
    stacks = [x for x in lines if x["kind"] == "stacks"]
    assert [x["stacks"] for x in stacks] == ["available", "unavailable"]
    assert stacks[1]["reason"] == (
        "signal handler taken by the application: it replaced Inject's SIGUSR2 handler"
    )


def recurse(depth: int, ready: threading.Event, stop: threading.Event) -> None:
    if depth:
        recurse(depth - 1, ready, stop)
    else:
        ready.set()
        stop.wait()


@pytest.fixture
def deep_thread():
    ready, stop = threading.Event(), threading.Event()
    t = threading.Thread(target=recurse, args=(120, ready, stop), name="deep", daemon=True)
    t.start()
    assert ready.wait(60)
    yield t
    stop.set()
    t.join(60)


def test_frames_per_thread_are_bounded_and_counted(tmp_path, deep_thread):
    dumper = stack_dump.StackDumper(tmp_path, "h", signal.SIGUSR2)
    document = dumper.document(sys._getframe())
    jsonschema.validate(document, STACK_SCHEMA)
    deep = next(t for t in document["threads"] if t["name"] == "deep")
    assert len(deep["frames"]) == stack_dump.MAX_FRAMES
    assert deep["frames_omitted"] > 70  # 121 recursions and threading's own frames
    assert deep["frames"][0]["function"].endswith("Condition.wait")  # innermost first
    assert document["truncated"] is False


def test_bytes_are_bounded_and_the_cut_is_counted(tmp_path, deep_thread):
    dumper = stack_dump.StackDumper(tmp_path, "h", signal.SIGUSR2, max_bytes=8 * 1024)
    path = dumper.dump(sys._getframe())
    assert path.stat().st_size <= 8 * 1024
    document = json.loads(path.read_text())
    jsonschema.validate(document, STACK_SCHEMA)
    assert document["truncated"] is True
    kept = sum(len(t["frames"]) for t in document["threads"])
    dropped = sum(t["frames_omitted"] for t in document["threads"]) + document["threads_omitted"]
    assert kept > 0 and dropped > 0


def test_signals_closer_than_the_floor_are_skipped(tmp_path):
    now = [100.0]
    dumper = stack_dump.StackDumper(tmp_path, "h", signal.SIGUSR2, clock=lambda: now[0])
    dumper.handler(signal.SIGUSR2, sys._getframe())
    now[0] += stack_dump.MIN_INTERVAL_S / 2
    dumper.handler(signal.SIGUSR2, sys._getframe())
    assert (dumper.seq, dumper.skipped) == (1, 1)
    now[0] += stack_dump.MIN_INTERVAL_S
    dumper.handler(signal.SIGUSR2, sys._getframe())
    assert (dumper.seq, dumper.skipped) == (2, 1)


def test_only_the_latest_files_are_kept(tmp_path):
    dumper = stack_dump.StackDumper(tmp_path, "h", signal.SIGUSR2, min_interval_s=0)
    for _ in range(stack_dump.KEEP_FILES + 3):
        dumper.handler(signal.SIGUSR2, sys._getframe())
    names = sorted(p.name for p in stack_dump.stack_dir(tmp_path).iterdir())
    pid = os.getpid()
    assert names == sorted(f"{pid}-{s}.json" for s in range(3, stack_dump.KEEP_FILES + 3))


def test_a_failing_dump_never_raises_and_says_so_once(tmp_path, capsys):
    (tmp_path / "metadata").write_text("a file where the directory belongs")
    dumper = stack_dump.StackDumper(tmp_path, "h", signal.SIGUSR2, min_interval_s=0)
    dumper.handler(signal.SIGUSR2, sys._getframe())
    dumper.handler(signal.SIGUSR2, sys._getframe())
    err = capsys.readouterr().err
    assert err.count("comminsight-inject: cannot write Python stacks to") == 1
    assert str(tmp_path / "metadata" / "stacks") in err


def test_native_handler_check_sees_faulthandler(restore_sigusr2):
    assert stack_signal.kernel_handler_installed(signal.SIGUSR2) is False
    faulthandler.register(signal.SIGUSR2, file=sys.__stderr__)
    try:
        assert stack_signal.kernel_handler_installed(signal.SIGUSR2) is True
    finally:
        faulthandler.unregister(signal.SIGUSR2)
