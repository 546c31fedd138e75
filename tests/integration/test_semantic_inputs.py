"""Bad input to the offline Semantic Engine: every problem is named with its file (and line),
and everything else is still processed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import forked_python
import pytest
from log_files import decompress_all
from profiler_builds import builds

from comminsight.semantic.offline import recover_steps
from comminsight.semantic.templates import load_templates
from comminsight.sim import SimConfig, run_simulation
from comminsight.sim.truth import read_ground_truth

STEPS = 10  # + 1 warm-up
ROOT = Path(__file__).resolve().parents[2]


# Bytes of an op line in each form of the writer: a collective line's marker, a key whose
# value the engine does not use, and the key of the function name; and a segment size that
# holds fewer ops than a Step (so that one segment lost costs at most the two Steps it spans).
FORMS = {
    "compact": {"op": b'"kind":"c",', "unused": b'"t":', "func": b'"f":', "segment": 6144},
    "inspector": {
        "op": b'"kind":"coll"',
        "unused": b'"coll_exec_time_us":',
        "func": b'"coll":',
        "segment": 16384,
    },
}
FORM = FORMS["compact"]  # the form of the run a test is given: set by sim_logs


@pytest.fixture(scope="module", params=sorted(FORMS))
def sim_logs(tmp_path_factory, request):
    """A 2-rank DDP run whose logs are cut into many small segments, in each log format."""
    global FORM
    FORM = FORMS[request.param]
    home = tmp_path_factory.mktemp("semantic-inputs")
    config = SimConfig(
        plugin=str(builds()["plain"].path),
        home=str(home),
        workload="ddp",
        ranks=2,
        steps=STEPS,
        time_scale=0.02,
        env=(
            ("COMMINSIGHT_AGENT_AUTOSTART", "0"),
            ("COMMINSIGHT_PROFILER_LOG_SEGMENT_BYTES", str(FORM["segment"])),
            ("COMMINSIGHT_PROFILER_LOG_FORMAT", request.param),
        ),
    )
    sim = run_simulation(config)
    assert not sim.errors
    return home / "inspector_logs", read_ground_truth(sim.run_dir)


@pytest.fixture
def logs(sim_logs, tmp_path):
    src, truths = sim_logs
    dst = tmp_path / "inspector_logs"
    shutil.copytree(src, dst)
    decompress_all(dst)  # the damage below is done to segments as the writer seals them
    return dst, truths


def rank0_segments(logs_dir):
    rank0 = sorted(p for p in logs_dir.glob("*.jsonl") if "-000000.jsonl" in p.name)[0]
    stream = rank0.name.removesuffix("-000000.jsonl")
    return sorted(logs_dir.glob(f"{stream}-*.jsonl"))


def op_lines(path) -> list[int]:
    lines = path.read_bytes().split(b"\n")
    return [i for i, line in enumerate(lines) if FORM["op"] in line]


def steps_cli(*args) -> subprocess.CompletedProcess:
    """`comminsight steps ARGS...` in a process of its own, no COMMINSIGHT_ setting inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMINSIGHT_")}
    return forked_python.run(
        [sys.executable, "-m", "comminsight.cli", "steps", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def steps_of(result, rank: int):
    return next(g for g in result.gpus if g.gpu.global_rank == rank).summaries


def test_clean_logs_have_no_problems(logs):
    logs_dir, truths = logs
    assert len(rank0_segments(logs_dir)) >= 4
    result = recover_steps(logs_dir)
    assert result.problems == []
    assert [len(g.summaries) for g in result.gpus] == [STEPS + 1] * 2


def test_a_garbage_line_is_named_and_skipped(logs):
    logs_dir, _ = logs
    segment = rank0_segments(logs_dir)[1]
    lines = segment.read_bytes().split(b"\n")
    victim = op_lines(segment)[2]
    lines[victim] = b'{"header": {"id": "0x1", "rank": 0, "n_ranks": 2}, "ci": not json'
    segment.write_bytes(b"\n".join(lines))
    result = recover_steps(logs_dir)
    named = [p for p in result.problems if f"{segment}:{victim + 1}:" in p]
    assert named and "not an inspector-log line" in named[0]
    assert any(f"{segment}:" in p and "seal does not match" in p for p in result.problems)
    assert len(steps_of(result, 1)) == STEPS + 1  # the other rank is untouched
    assert len(steps_of(result, 0)) == STEPS + 1  # one op fewer, every step still there


def test_a_wrong_checksum_is_named_and_its_ops_still_read(logs, sim_logs):
    logs_dir, _ = logs
    segment = rank0_segments(logs_dir)[2]
    data = segment.read_bytes()
    i = data.index(FORM["unused"]) + len(FORM["unused"])
    digit = data[i : i + 1]
    segment.write_bytes(data[:i] + (b"7" if digit != b"7" else b"8") + data[i + 1 :])
    result = recover_steps(logs_dir)
    assert [p for p in result.problems if str(segment) in p and "crc32" in p]
    assert result.ops == recover_steps(sim_logs[0]).ops  # nothing dropped
    assert len(steps_of(result, 0)) == STEPS + 1


def test_a_truncated_segment_is_named(logs):
    logs_dir, _ = logs
    segment = rank0_segments(logs_dir)[1]
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) // 2])  # cut in the middle of a line, seal gone
    result = recover_steps(logs_dir)
    assert [p for p in result.problems if str(segment) in p and "truncated line" in p]
    assert len(steps_of(result, 1)) == STEPS + 1


def test_a_missing_segment_is_named_and_the_later_steps_recovered(logs):
    logs_dir, truths = logs
    segments = rank0_segments(logs_dir)
    gone = segments[2]
    gone.unlink()
    result = recover_steps(logs_dir)
    assert [p for p in result.problems if str(gone) in p and "missing" in p]
    steps = steps_of(result, 0)
    lost = [s for s in steps if any(a.kind.value == "records_lost" for a in s.anomalies)]
    assert lost, "the step spanning the hole says records were lost"
    last_truth = truths[0].ops[truths[0].records["step"][-1]["last_op"]]
    assert steps[-1].last_op.seq == last_truth["seq"]  # the steps after the hole are intact


def test_an_invalid_template_is_named_and_the_others_load(tmp_path, logs):
    bad = tmp_path / "templates"
    bad.mkdir()
    (bad / "broken.yaml").write_text("kind: template\nschema_version: 1\nname: Broken Name\n")
    (bad / "unknown_state.yaml").write_text(
        (ROOT / "comminsight" / "semantic" / "templates" / "moe.yaml")
        .read_text()
        .replace("name: moe", "name: moe2")
        .replace("to_state: sync, step: none", "to_state: nowhere, step: none")
    )
    templates = load_templates(str(bad))
    assert {t.name for t in templates.templates} == {"ddp", "fsdp", "moe", "tp_dp", "tp_pp_dp"}
    problems = "\n".join(templates.problems)
    assert f"{bad / 'broken.yaml'}: not a semantic-engine v1 template" in problems
    assert f"{bad / 'unknown_state.yaml'}: fsm.transitions[" in problems
    assert "'nowhere' is not a state" in problems
    result = recover_steps(logs[0], str(bad))
    assert len(steps_of(result, 0)) == STEPS + 1
    assert any("broken.yaml" in p for p in result.problems)


def test_the_cli_names_problems_and_still_writes_summaries(logs, tmp_path):
    logs_dir, _ = logs
    segment = rank0_segments(logs_dir)[1]
    lines = segment.read_bytes().split(b"\n")
    lines[op_lines(segment)[0]] = b"garbage"
    segment.write_bytes(b"\n".join(lines))
    out = tmp_path / "out"
    run = steps_cli(logs_dir, "--out", out, "--format", "json")
    assert run.returncode == 0, run.stderr
    assert f"{segment}:" in run.stderr and "not an inspector-log line" in run.stderr
    records = json.loads(run.stdout)["items"]
    assert {r["global_rank"] for r in records} == {0, 1}
    assert sum(len(p.read_text().splitlines()) for p in out.glob("*.jsonl")) == len(records)
    empty = steps_cli(tmp_path / "none")
    assert empty.returncode == 1 and "not a directory" in empty.stderr
    # segments none of whose lines is an op line: no "0 Steps" answer, an error naming why
    junk = tmp_path / "junk" / "inspector_logs"
    junk.mkdir(parents=True)
    (junk / "ci-vm-7-1000-000000.jsonl").write_bytes(b"garbage\n")
    unread = steps_cli(junk)
    assert unread.returncode == 1, unread.stdout
    assert f"no op could be read from {junk} (1 process;" in unread.stderr
    assert "ci-vm-7-1000-000000.jsonl:1: not an inspector-log line" in unread.stderr


@pytest.mark.parametrize(
    ("name", "plain"), [("All-Reduce", "AllReduce"), ("Ünïcode", "ncode"), ("9", "Unknown")]
)
def test_an_op_name_a_summary_cannot_carry_is_named_and_its_op_kept(logs, tmp_path, name, plain):
    """A stand-in's (or a damaged log's) function name outside ASCII letters and digits: the
    summaries written must still be readable (the CLI reads back what it wrote), the op kept
    under the nearest plain name, its line named."""
    logs_dir, _ = logs
    segment = rank0_segments(logs_dir)[1]
    lines = segment.read_bytes().split(b"\n")
    victim = op_lines(segment)[1]
    func = FORM["func"]
    lines[victim] = lines[victim].replace(func + b'"AllReduce"', func + f'"{name}"'.encode())
    segment.write_bytes(b"\n".join(lines))
    out = tmp_path / "out"
    run = steps_cli(logs_dir, "--out", out)
    assert run.returncode == 0, run.stderr
    assert f"{segment}:{victim + 1}: op name {name!r} read as {plain!r}" in run.stderr
    funcs = [
        op["func"]
        for path in out.glob("*.jsonl")
        for summary in map(json.loads, path.read_text().splitlines())
        for op in (summary["first_op"], summary["last_op"], summary["slowest_op"])
        if op
    ]
    assert name not in funcs or name == plain
    result = recover_steps(logs_dir)
    assert len(steps_of(result, 0)) == STEPS + 1  # the renamed op still in its Step


def test_a_users_template_is_used_without_code_changes(tmp_path, logs):
    """A template file dropped into a directory: a DDP variant named for the user's job, of
    higher priority than the built-in one it copies, wins the tie."""
    mine = tmp_path / "my-templates"
    mine.mkdir()
    (mine / "my_ddp.yaml").write_text(
        (ROOT / "comminsight" / "semantic" / "templates" / "ddp.yaml")
        .read_text()
        .replace("name: ddp", "name: my-ddp")
        .replace("priority: 100", "priority: 500")
    )
    result = recover_steps(logs[0], str(mine))
    assert result.problems == []
    # the job cut places the boundaries; the user's template names the roles
    assert {g.method for g in result.gpus} == {"job"}
    assert {s.recovery.template_name for g in result.gpus for s in g.summaries} == {"my-ddp"}
    assert all(s.recovery.template_name == "my-ddp" for g in result.gpus for s in g.summaries)


def _boundaries(result, rank: int) -> dict[int, tuple]:
    return {
        s.step_index: ((s.first_op.func, s.first_op.seq), (s.last_op.func, s.last_op.seq))
        for s in steps_of(result, rank)
    }


def _damage_garbage_line(segment):
    lines = segment.read_bytes().split(b"\n")
    lines[op_lines(segment)[1]] = b'{"not": "an op'
    segment.write_bytes(b"\n".join(lines))


def _damage_cut(segment):
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) // 2])


def _damage_empty(segment):
    segment.write_bytes(b"")


def _damage_duplicate(segment):
    # the same records again under the next index: a copy an operator made by hand
    stream, index = segment.name.rsplit("-", 1)
    later = sorted(segment.parent.glob(f"{stream}-*.jsonl"))[-1]
    last = int(later.name.rsplit("-", 1)[1].removesuffix(".jsonl"))
    (segment.parent / f"{stream}-{last + 1:06d}.jsonl").write_bytes(segment.read_bytes())


def _damage_nested_line(segment):
    # nested too deep for any JSON decoder: RecursionError, not ValueError
    lines = segment.read_bytes().split(b"\n")
    lines[op_lines(segment)[1]] = b"[" * 100_000
    segment.write_bytes(b"\n".join(lines))


def _damage_fifo(segment):
    # a FIFO where a segment belongs: opening it to read would block for ever
    segment.unlink()
    os.mkfifo(segment, 0o600)


def _damage_symlink(segment):
    # a link to a readable file outside the log directory: not followed
    outside = segment.parent.parent / f"outside-{segment.name}"
    outside.write_bytes(segment.read_bytes())
    segment.unlink()
    segment.symlink_to(outside)


def _damage_sparse(segment):
    # 64 GiB of holes after the segment's lines: no segment is that big, none is read whole
    with open(segment, "r+b") as f:
        f.truncate(64 << 30)


@pytest.mark.parametrize(
    "damage",
    [
        _damage_garbage_line,
        _damage_cut,
        _damage_empty,
        _damage_duplicate,
        _damage_nested_line,
        _damage_fifo,
        _damage_symlink,
        _damage_sparse,
    ],
    ids=[
        "garbage_line",
        "cut_segment",
        "empty_segment",
        "duplicated_segment",
        "nested_line",
        "fifo_segment",
        "symlinked_segment",
        "sparse_segment",
    ],
)
def test_damaged_input_costs_at_most_the_steps_it_touches(logs, damage):
    """One rank's segment damaged: every rank still reports the Steps of the intact run,
    except at most the Steps whose ops the damage took; the damage is named."""
    logs_dir, truths = logs
    intact = recover_steps(logs_dir)
    segment = rank0_segments(logs_dir)[2]
    damage(segment)
    result = recover_steps(logs_dir)
    assert any(segment.name.rsplit("-", 1)[0] in p for p in result.problems), result.problems
    for rank in (0, 1):
        before, after = _boundaries(intact, rank), _boundaries(result, rank)
        assert abs(len(after) - len(before)) <= 1
        changed = [k for k in before if after.get(k) != before[k]]
        assert len(changed) <= 2, (rank, changed, before, after)
