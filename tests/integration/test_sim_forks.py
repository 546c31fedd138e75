"""The simulator's rank processes are forked from one parent that has imported their code
(sim.forks), unless their interpreter must start on its own: a process run under a prefix,
or one whose start-up runs code of its own (a sitecustomize, as Inject is loaded in tests)."""

from __future__ import annotations

import os
import sys

from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.forks import ForkParent
from comminsight.sim.launcher import _forkable, _python_path


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


def test_ranks_are_forked_only_where_their_start_up_is_the_parent_s(tmp_path):
    plain = SimConfig(plugin="p.so", home=str(tmp_path))
    env = {"PYTHONPATH": _python_path()}
    assert _forkable(plain, env)
    hooked = tmp_path / "hooks"
    hooked.mkdir()
    (hooked / "sitecustomize.py").write_text("")
    assert not _forkable(plain, {"PYTHONPATH": os.pathsep.join([str(hooked), *sys.path])})
    for startup in ("PYTHONHASHSEED", "LD_PRELOAD", "ASAN_OPTIONS", "MALLOC_ARENA_MAX"):
        set_at_start = SimConfig(plugin="p.so", home=str(tmp_path), env=((startup, "1"),))
        assert not _forkable(set_at_start, env), startup
    assert _forkable(
        SimConfig(plugin="p.so", home=str(tmp_path), env=(("COMMINSIGHT_X", "1"),)), env
    )


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
        assert len(list((tmp_path / node / "inspector_logs").glob("ci-*.jsonl"))) == 2, node
