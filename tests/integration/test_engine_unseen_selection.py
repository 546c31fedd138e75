"""Which ended processes an Agent recovers from their logs as it starts: those that ran
since Agents began to follow the home and that no checkpoint names, none of them twice."""

from __future__ import annotations

from home_files import write_segment

from comminsight.agent.steps.semantic_hook import SemanticEngineHook
from comminsight.semantic.templates import load_templates

TEMPLATES = load_templates()
START = 1795985227154207755  # the start_real_ns home_files' segments give their process


def hook(home) -> SemanticEngineHook:
    return SemanticEngineHook(home, TEMPLATES, checkpoint_s=3600, node_name="vm")


def followed_home(tmp_path):
    """A home an Agent followed (its start checkpoint written), then logs of processes."""
    home = tmp_path / "home"
    first = hook(home)
    first._save_checkpoint()
    first.stop()
    for pid in (11, 12, 13):
        write_segment(home, 0, pid=pid, sealed=False)
    return home


def recovered(home, shm_files=frozenset()) -> tuple[int, list[str]]:
    second = hook(home)
    second.checkpoint.watching_since = 0  # the segments' times, not the file system's clock, decide
    try:
        second._seal_ended_before(frozenset(shm_files))
        names = sorted(p.name for p in second.out_dir.glob("live-*"))
        return second.unseen_from_logs, names
    finally:
        second.stop()


def test_ended_processes_no_checkpoint_named_are_recovered_once_each(tmp_path):
    home = followed_home(tmp_path)
    count, names = recovered(home)
    assert count == 3
    assert names == [f"live-vm-{pid}-{START}.jsonl" for pid in (11, 12, 13)]
    assert recovered(home) == (0, names)  # sealed now: not read again


def test_a_running_process_and_a_sealed_one_are_left_alone(tmp_path):
    home = followed_home(tmp_path)
    step_dir = home / "semantics" / "step"
    (step_dir / f"live-vm-12-{START}.dev1.jsonl").write_bytes(b"")  # one GPU of it sealed
    count, names = recovered(home, {"ci-vm-11-5.shm"})  # pid 11 still runs
    assert count == 1
    assert f"live-vm-13-{START}.jsonl" in names and f"live-vm-11-{START}.jsonl" not in names


def test_a_home_no_agent_followed_before_is_not_searched(tmp_path):
    home = tmp_path / "home"
    write_segment(home, 0, pid=11, sealed=False)
    fresh = hook(home)
    try:
        fresh._seal_ended_before(frozenset())
        assert fresh.unseen_from_logs == 0
    finally:
        fresh.stop()
