"""The simulator's rank processes are forked from one parent that has imported their code
(sim.forks), started with what the ranks read as they start, unless their interpreter must
start on its own: a process run under a prefix, or one whose start-up runs code of its own (a
sitecustomize, as Inject is loaded in tests)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from comminsight.log_segments import segments_in
from comminsight.sim import SimConfig, forks, rank_process, run_simulation
from comminsight.sim.forks import ForkParent
from comminsight.sim.launcher import _forkable, _python_path, _startup_env


def test_a_forked_process_writes_to_its_log_and_reports_its_exit_status(tmp_path):
    parent = ForkParent({**os.environ, "PYTHONPATH": _python_path()})
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    usage = parent.start(["only-a-run-dir"], {"PATH": os.environ["PATH"]}, logs[0])
    broken = parent.start([str(tmp_path / "no-run"), "0"], dict(os.environ), logs[1])
    parent.close()
    assert usage.pid != broken.pid
    assert usage.wait(timeout=60) == 2
    assert broken.wait(timeout=60) == 1
    assert "usage: python -m comminsight.sim.rank_process" in logs[0].read_text()
    assert "config.json" in logs[1].read_text()  # its traceback, in its own log
    assert usage.poll() == 2


def test_the_umask_is_read_without_being_changed():
    old = os.umask(0o027)
    try:
        assert forks.current_umask() == 0o027
        assert os.umask(0o027) == 0o027  # still what it was
    finally:
        os.umask(old)


def test_ranks_are_forked_unless_their_start_up_runs_code_of_its_own(tmp_path):
    env = {"PYTHONPATH": _python_path()}
    assert _forkable(env)
    hooked = tmp_path / "hooks"
    hooked.mkdir()
    (hooked / "sitecustomize.py").write_text("")
    assert not _forkable({"PYTHONPATH": os.pathsep.join([str(hooked), *sys.path])})


def test_a_start_up_variable_of_the_ranks_is_their_fork_parent_s(plugin, tmp_path):
    """What a process reads only as it starts (here the dynamic loader's LD_BIND_NOW; under
    a sanitizer, its runtime's LD_PRELOAD) is in the environment the parent started with."""
    config = SimConfig(
        plugin=str(plugin),
        home=str(tmp_path),
        workload="ddp",
        ranks=2,
        steps=1,
        time_scale=0.02,
        env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"), ("LD_BIND_NOW", "1")),
    )
    assert _startup_env(config) == {"LD_BIND_NOW": "1", "PYTHONPATH": _python_path()}
    result = run_simulation(config)
    assert not result.errors and result.exit_codes == [0, 0]
    parent = ForkParent._shared
    assert parent is not None and parent._startup["LD_BIND_NOW"] == "1"
    assert parent._proc.args == [sys.executable, "-m", "comminsight.sim.forks"]


def test_a_forked_job_runs_every_rank_with_its_own_environment(plugin, tmp_path):
    config = SimConfig(
        plugin=str(plugin),
        home=str(tmp_path),
        workload="ddp",
        ranks=4,
        nodes=2,
        steps=3,
        time_scale=0.02,
        node_homes=(str(tmp_path / "n0"), str(tmp_path / "n1")),
        env=(("COMMINSIGHT_AGENT_AUTOSTART", "0"),),
    )
    result = run_simulation(config)
    assert not result.errors and result.exit_codes == [0, 0, 0, 0]
    # each node's ranks logged under their own node's home (COMMINSIGHT_HOME per process)
    for node in ("n0", "n1"):
        assert len(segments_in(tmp_path / node / "inspector_logs")) == 2, node


def test_a_fork_parent_that_starts_nothing_is_killed_and_named(tmp_path, monkeypatch):
    # an interpreter that never answers (a parent stuck before its first fork)
    stuck = tmp_path / "stuck-python"
    stuck.write_text("#!/bin/sh\nexec sleep 600\n")
    stuck.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(stuck))
    monkeypatch.setattr(forks, "START_DEADLINE_S", 1.0)
    parent = ForkParent(dict(os.environ))
    with pytest.raises(RuntimeError, match=r"fork parent \(pid \d+\) started no rank process"):
        parent.start(["run"], {}, tmp_path / "a.log")
    assert parent._proc.wait(timeout=60) == -9


def test_one_parent_serves_every_run_each_from_the_launcher_s_directory_then(tmp_path, monkeypatch):
    base = {**os.environ, "PYTHONPATH": _python_path()}
    parent = ForkParent.shared(base)
    assert ForkParent.shared(dict(base)) is parent  # later runs of this process: the same
    env = {"PATH": os.environ["PATH"]}
    (tmp_path / "cwd0" / "run-here").mkdir(parents=True)
    (tmp_path / "cwd0" / "run-here" / "config.json").write_text("{not json")
    (tmp_path / "cwd1").mkdir()
    children = []
    for k in (0, 1):
        monkeypatch.chdir(tmp_path / f"cwd{k}")
        children.append(parent.start(["run-here", "0"], env, tmp_path / f"{k}.log"))
    assert [c.wait(timeout=60) for c in children] == [1, 1]
    assert "JSONDecodeError" in (tmp_path / "0.log").read_text()  # its config, in cwd0
    assert "FileNotFoundError" in (tmp_path / "1.log").read_text()  # none in cwd1
    assert not parent.gone


def test_starts_from_many_threads_each_get_their_own_child(tmp_path):
    parent = ForkParent.shared({**os.environ, "PYTHONPATH": _python_path()})
    env = {"PATH": os.environ["PATH"]}
    got: dict[int, forks.ForkedProcess] = {}

    def start(k: int) -> None:
        # usage errors (status 2) for even k, a missing run directory (1) for odd k
        argv = ["only-a-run-dir"] if k % 2 == 0 else [str(tmp_path / f"none{k}"), "0"]
        got[k] = parent.start(argv, env, tmp_path / f"t{k}.log")

    threads = [threading.Thread(target=start, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({c.pid for c in got.values()}) == 12
    assert {k: c.wait(timeout=60) for k, c in got.items()} == {k: 2 - k % 2 for k in range(12)}
    for k in range(1, 12, 2):
        assert f"none{k}" in (tmp_path / f"t{k}.log").read_text()


def test_a_plan_is_prebuilt_once_per_config_and_never_for_one_that_fails(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    config = SimConfig(plugin="p.so", home=str(tmp_path), workload="ddp", ranks=2, steps=1)
    (run / "config.json").write_text(config.to_json())
    monkeypatch.setattr(rank_process.Board, "attach", staticmethod(lambda *a: None))
    rank_process.prebuild_plan(str(run))
    prebuilt = rank_process._PREBUILT[config.to_json()]
    assert rank_process.RankRunner(run, 0).plan is prebuilt
    assert rank_process.RankRunner(run, 1, process=object()).plan is not prebuilt
    (run / "config.json").write_text("{broken")
    rank_process.prebuild_plan(str(run))  # no exception: the ranks report it
    assert rank_process._PREBUILT == {}
    rank_process.prebuild_plan(str(tmp_path / "missing"))


def test_a_launcher_whose_start_up_variables_changed_gets_a_new_parent(monkeypatch):
    base = {**os.environ, "PYTHONPATH": _python_path()}
    parent = ForkParent.shared(base)
    assert ForkParent.shared({**base, "COMMINSIGHT_X": "1"}) is parent  # read at run time
    other = ForkParent.shared({**base, "MALLOC_ARENA_MAX": "2"})  # read as a process starts
    assert other is not parent
    assert parent._proc.wait(timeout=60) == 0  # the old one ended: it had no child left
    assert ForkParent.shared({**base, "MALLOC_ARENA_MAX": "2"}) is other
