"""Inject's optimizer-step markers as the Semantic Engine reads them (semantic/step_markers):
the metadata files' `step` lines, the Profiler's stream names, and where a GPU's Steps begin
by its markers, on small hand-built op sequences."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hand_built_ops import MIB, gpu_ops

from comminsight.semantic.job_ops import P2P, GpuOps
from comminsight.semantic.local_cycle import SCALAR_BYTES
from comminsight.semantic.step_markers import (
    MAX_FILE_BYTES,
    MAX_LINE_BYTES,
    marker_step_starts,
    markers_dir,
    markers_disagree,
    past_update,
    process_of_stream,
    read_markers,
)


def line(kind: str = "step", pid: int = 7, mono_ns: int = 0, host: str = "h", **fields) -> str:
    record = {
        "schema": "comminsight.inject-metadata.v1",
        "kind": kind,
        "pid": pid,
        "host": host,
        "mono_ns": mono_ns,
        "real_ns": 1,
        **fields,
    }
    if kind == "step":
        record = {"rank": 0, "optimizer": "AdamW", "index": 0, **record}
    return json.dumps(record) + "\n"


def write(path, *lines: str) -> None:
    path.write_text("".join(lines))


# ---------------------------------------------------------------------------- read_markers


def test_markers_are_read_per_process_sorted_and_unique(tmp_path):
    write(
        tmp_path / "h.7.jsonl",
        line("process", inject_version="0.1.0", step_markers=True),
        line(mono_ns=30),
        line(mono_ns=10),
        line(mono_ns=20),
        line(mono_ns=20),  # a line written twice counts once
    )
    write(tmp_path / "h.8.jsonl", line(pid=8, mono_ns=5))
    write(tmp_path / "h.9.txt", line(pid=9, mono_ns=5))  # not Inject's file name
    markers, problems = read_markers(tmp_path)
    assert problems == []
    assert sorted(markers) == [("h", 7), ("h", 8)]
    assert markers[("h", 7)].tolist() == [10, 20, 30]
    assert markers[("h", 7)].dtype == np.int64


def test_a_missing_directory_is_no_problem(tmp_path):
    assert read_markers(tmp_path / "none") == ({}, [])
    assert markers_dir(tmp_path / "home" / "inspector_logs") == (
        tmp_path / "home" / "metadata" / "inject"
    )


def test_the_optimizer_class_that_stepped_most_often_marks_the_steps(tmp_path):
    write(
        tmp_path / "h.7.jsonl",
        line(mono_ns=1, optimizer="Discriminator"),
        line(mono_ns=2, optimizer="AdamW"),
        line(mono_ns=3, optimizer="AdamW"),
        line(mono_ns=4, optimizer="Discriminator"),
        line(mono_ns=5, optimizer="AdamW"),
    )
    write(  # a tie: the first name in order, so that every reader picks the same
        tmp_path / "h.8.jsonl",
        line(pid=8, mono_ns=1, optimizer="Zeta"),
        line(pid=8, mono_ns=2, optimizer="Alpha"),
    )
    markers, _ = read_markers(tmp_path)
    assert markers[("h", 7)].tolist() == [2, 3, 5]
    assert markers[("h", 8)].tolist() == [2]


def test_a_corrupted_line_is_named_and_the_others_count(tmp_path):
    write(
        tmp_path / "h.7.jsonl",
        line(mono_ns=1),
        '{"kind": "step", "pid": 7, "mono_ns": \n',  # cut by a crash, newline and all
        line(mono_ns=2),
        line(mono_ns="three"),  # the protocol's types are checked
        line(mono_ns=4),
    )
    markers, problems = read_markers(tmp_path)
    assert markers[("h", 7)].tolist() == [1, 2, 4]
    assert len(problems) == 2
    assert all(str(tmp_path / "h.7.jsonl") in p for p in problems)
    assert "line 2:" in problems[0] and "line 4:" in problems[1]


def test_a_line_without_its_newline_is_still_being_written(tmp_path):
    write(tmp_path / "h.7.jsonl", line(mono_ns=1), line(mono_ns=2).rstrip("\n"))
    markers, problems = read_markers(tmp_path)
    assert markers[("h", 7)].tolist() == [1] and problems == []


def test_a_line_too_long_does_not_count_and_the_others_do(tmp_path):
    huge = line(mono_ns=2, optimizer="A" * MAX_LINE_BYTES)
    write(tmp_path / "h.7.jsonl", line(mono_ns=1), huge, line(mono_ns=3))
    markers, _ = read_markers(tmp_path)
    assert markers[("h", 7)].tolist() == [1, 3]


def test_a_line_too_long_is_named(tmp_path):
    huge = line(mono_ns=2, optimizer="A" * MAX_LINE_BYTES)
    write(tmp_path / "h.7.jsonl", line(mono_ns=1), huge, line(mono_ns=3))
    _, problems = read_markers(tmp_path)
    assert any("line 2" in p for p in problems)


def test_a_fifo_and_a_symlink_are_named_and_never_block_or_followed(tmp_path):
    write(tmp_path / "h.7.jsonl", line(mono_ns=1), line(mono_ns=2))
    os.mkfifo(tmp_path / "h.8.jsonl")  # opened without a writer: must not block
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere.jsonl"
    write(elsewhere, line(pid=9, mono_ns=1))
    (tmp_path / "h.9.jsonl").symlink_to(elsewhere)
    markers, problems = read_markers(tmp_path)
    assert sorted(markers) == [("h", 7)]
    assert len(problems) == 2
    assert any("h.8.jsonl" in p and "not a regular file" in p for p in problems)
    assert any("h.9.jsonl" in p and "cannot open" in p for p in problems)


def test_lines_of_other_kinds_are_not_markers(tmp_path):
    write(
        tmp_path / "h.7.jsonl",
        line("process", inject_version="0.1.0", step_markers=True),
        line("group", api="new_process_group", comm_name="step:0", group_name="step"),
        line(mono_ns=5),
    )
    markers, problems = read_markers(tmp_path)
    assert markers[("h", 7)].tolist() == [5] and problems == []


# ---------------------------------------------------------------------------- process_of_stream


@pytest.mark.parametrize(
    "stream, expected",
    [
        ("ci-node1-1234-1700000000", ("node1", 1234)),
        ("ci-gpu-node-07-42-99", ("gpu-node-07", 42)),  # host names hold dashes
        ("nccl-inspector-node1-1234", None),  # NVIDIA Inspector's files
        ("xci-node1-1234-1", None),
        ("ci-node1-pid-1", None),
        ("ci--1234-1", None),
        ("ci-node1-1234", None),
    ],
)
def test_process_of_stream(stream, expected):
    assert process_of_stream(stream) == expected


# ---------------------------------------------------------------------------- where Steps begin


def after(g: GpuOps, op: int) -> int:
    """A marker between op `op` and the next one."""
    return int(g.issue[op]) + 500


def steps(template: list, count: int) -> list:
    return [op for _ in range(count) for op in template]


def test_a_sharded_optimizers_update_gathers_stay_in_the_step_before():
    # ZeRO-1/2, Megatron's distributed optimizer: gradients reduced, the inner optimizer
    # steps (the marker), then the wrapper all-gathers the updated parameters
    step = [("ReduceScatter", 0, 64 * MIB), ("ReduceScatter", 0, 64 * MIB)]
    step += [("AllGather", 0, 64 * MIB)]
    g = gpu_ops(steps(step, 5))
    markers = np.array([after(g, 3 * k + 1) for k in range(5)])
    assert marker_step_starts(g, markers, 0).tolist() == [0, 3, 6, 9, 12]
    assert past_update(g, 0, 2, 5) == 3  # past the gather that follows the marker


def test_a_small_gather_after_the_marker_begins_the_next_step():
    # a few integers per parameter tensor (DDP's rebuilt buckets) are no parameters' update
    step = [("Broadcast", 0, 1024), ("AllReduce", 0, 64 * MIB), ("AllReduce", 0, 64 * MIB)]
    g = gpu_ops(steps(step, 5))
    assert past_update(g, 0, 3, 6) == 3


def test_fsdp_gathers_through_a_step_begin_the_next_one():
    # FSDP / ZeRO-3: parameters gathered for the forward and the backward, gradients
    # reduce-scattered; the gathers right after the marker are the next forward's
    step = [("AllGather", 0, 8 * MIB), ("AllGather", 0, 8 * MIB)]
    step += [("AllGather", 0, 8 * MIB), ("ReduceScatter", 0, 16 * MIB)]
    g = gpu_ops(steps(step, 5))
    markers = np.array([after(g, 4 * k + 3) for k in range(5)])
    assert marker_step_starts(g, markers, 0).tolist() == [0, 4, 8, 12, 16]
    assert past_update(g, 0, 4, 8) == 4


def test_an_update_gather_on_a_communicator_that_gathers_elsewhere_begins_the_next_step():
    step = [("AllReduce", 0, 64 * MIB), ("AllGather", 0, 64 * MIB), ("AllReduce", 0, 64 * MIB)]
    g = gpu_ops(steps(step, 4))
    assert past_update(g, 0, 3, 6) == 3  # op 4 gathers on comm 0 in the next Step too


def test_scalar_bookkeeping_after_the_marker_stays_in_the_step_before():
    # the loop's loss averaged over the ranks, Megatron's update-successful flag: a few
    # scalars all-reduced once the optimizer returned
    step = [("AllReduce", 0, 64 * MIB), ("AllReduce", 0, 64 * MIB)]
    step += [("AllReduce", 1, 4), ("AllReduce", 0, SCALAR_BYTES)]
    g = gpu_ops(steps(step, 5))
    markers = np.array([after(g, 4 * k + 1) for k in range(5)])
    assert marker_step_starts(g, markers, 0).tolist() == [0, 4, 8, 12, 16]
    assert past_update(g, 0, 2, 6) == 4


def test_update_gathers_then_scalars_both_stay():
    step = [("ReduceScatter", 0, 64 * MIB), ("AllGather", 0, 64 * MIB), ("AllReduce", 1, 8)]
    g = gpu_ops(steps(step, 5))
    markers = np.array([after(g, 3 * k) for k in range(5)])
    assert marker_step_starts(g, markers, 0).tolist() == [0, 3, 6, 9, 12]


def test_a_large_all_reduce_after_the_marker_is_no_bookkeeping():
    step = [("AllReduce", 0, 64 * MIB), ("AllReduce", 0, SCALAR_BYTES + 1)]
    g = gpu_ops(steps(step, 4))
    assert past_update(g, 0, 1, 4) == 1


def test_fewer_than_three_markers_say_nothing():
    step = [("AllReduce", 0, 64 * MIB), ("AllReduce", 0, 64 * MIB)]
    g = gpu_ops(steps(step, 6))
    two = np.array([after(g, 1), after(g, 3)])
    assert marker_step_starts(g, two, 0) is None
    outside = np.array([1, 2, after(g, 1), int(g.issue[-1]) + 10])  # before the ops, after
    assert marker_step_starts(g, outside, 0) is None
    three = np.array([after(g, 1), after(g, 3), after(g, 5)])
    assert marker_step_starts(g, three, 0).tolist() == [0, 2, 4, 6]


def test_markers_between_the_same_two_ops_count_once():
    step = [("AllReduce", 0, 64 * MIB), ("AllReduce", 0, 64 * MIB)]
    g = gpu_ops(steps(step, 4))
    # two optimizers of one class stepping back to back: one Step boundary
    twice = np.array([after(g, 1), after(g, 1) + 1, after(g, 3), after(g, 5)])
    assert marker_step_starts(g, twice, 0).tolist() == [0, 2, 4, 6]


def test_no_host_clock_no_marker_steps():
    step = [("AllReduce", 0, 64 * MIB), ("AllReduce", 0, 64 * MIB)]
    g = gpu_ops(steps(step, 5), host_issue=False)  # NVIDIA Inspector's logs
    markers = np.array([after(g, 2 * k + 1) for k in range(5)])
    assert marker_step_starts(g, markers, 0) is None


def test_start_up_ops_before_the_first_step_are_left_out():
    startup = [("Broadcast", 0, 4 * MIB)] * 3 + [("AllReduce", 1, 4)]
    step = [("AllReduce", 0, 64 * MIB), ("AllReduce", 0, 64 * MIB)]
    g = gpu_ops(startup + steps(step, 5))
    markers = np.array([after(g, 4 + 2 * k + 1) for k in range(5)])
    assert marker_step_starts(g, markers, 4).tolist() == [4, 6, 8, 10, 12]
    # the first Step begins with the op the later ones begin with, past start-up ops that
    # precede it (a start-up the prefix missed)
    assert marker_step_starts(g, markers, 3).tolist() == [4, 6, 8, 10, 12]


def test_p2p_ops_are_no_gathers_nor_scalars():
    step = [("AllReduce", 0, 64 * MIB), ("Send", 2, 8), ("Recv", 2, 8)]
    g = gpu_ops(steps(step, 4))
    g.kind[1::3] = P2P
    g.kind[2::3] = P2P
    assert past_update(g, 0, 1, 3) == 1


def test_markers_agree_with_steps_that_hold_one_each_after_their_gradients():
    step = [("AllReduce", 0, 64 * MIB), ("AllReduce", 0, 64 * MIB), ("AllReduce", 0, 4)]
    g = gpu_ops(steps(step, 5))
    label = np.repeat(np.arange(5), 3)
    markers = np.array([after(g, 3 * k + 2) for k in range(5)])
    assert markers_disagree(g, label, markers) is None
    # a Step whose update was skipped has no marker: still agreeing
    assert markers_disagree(g, label, np.delete(markers, 1)) is None


def test_markers_disagree_with_steps_that_hold_two_or_end_too_soon():
    step = [("AllReduce", 0, 64 * MIB), ("AllReduce", 0, 64 * MIB), ("AllReduce", 0, 4)]
    g = gpu_ops(steps(step, 6))
    markers = np.array([after(g, 3 * k + 2) for k in range(6)])
    pairs = np.repeat(np.arange(3), 6)  # two iterations taken as one Step
    assert "2 Steps hold several optimizer steps" in markers_disagree(g, pairs, markers)
    early = np.repeat(np.arange(6), 3)
    shifted = np.array([after(g, 3 * k) for k in range(6)])  # before the last reduction
    assert "end their optimizer before" in markers_disagree(g, early, shifted)


def test_a_step_of_two_optimizers_and_one_marker_passed_over_a_skipped_update():
    step = [("AllReduce", 0, 64 * MIB), ("AllReduce", 0, 4)]
    g = gpu_ops(steps(step, 6))
    label = np.repeat(np.arange(3), 4)
    markers = np.array([after(g, 4 * k + 3) for k in range(3)])  # the first of each pair skipped
    assert "hold two optimizers and at most one marker" in markers_disagree(g, label, markers)


def test_a_file_too_large_to_be_injects_is_named_and_not_read(tmp_path):
    huge = tmp_path / "h.8.jsonl"
    with open(huge, "wb") as f:  # sparse: no disk is spent
        f.truncate(MAX_FILE_BYTES + 1)
    write(tmp_path / "h.7.jsonl", line(mono_ns=1))
    markers, problems = read_markers(tmp_path)
    assert markers[("h", 7)].tolist() == [1]
    assert any("h.8.jsonl" in p for p in problems)
