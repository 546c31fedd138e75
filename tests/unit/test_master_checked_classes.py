"""A master checks a relay's classes once while they stay the same: a relay sends every class
at every report, and most are what they were. What a check found is reused for the same
runs, communicator size and representative, never for others (a class whose runs changed is
checked again, a bad one is refused every time it comes), and what is kept stays bounded."""

from __future__ import annotations

import re

from comminsight.agent.master.job_view import CheckedClasses
from comminsight.agent.state.rank_runs import RankRuns
from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


def rank_class(runs: list[int], nranks: int = 64, rep: int = 0) -> pb.RankClass:
    rc = pb.RankClass(node_name="node-1", rank_runs=runs)
    rc.member.nranks = nranks
    rc.member.comm_rank = rep
    return rc


def test_the_same_class_is_parsed_once_and_a_changed_one_again():
    checked = CheckedClasses()
    first = checked.runs_of(rank_class([1, 10, 20, 5]))
    again = checked.runs_of(rank_class([1, 10, 20, 5]))
    assert first is again and first == RankRuns((1, 20), (11, 25))
    assert checked.runs_of(rank_class([1, 11, 20, 5])) == RankRuns((1, 20), (12, 25))
    # the same runs under another size or representative are another check
    assert isinstance(checked.runs_of(rank_class([1, 10, 20, 5], nranks=22)), str)
    assert isinstance(checked.runs_of(rank_class([1, 10, 20, 5], rep=5)), str)


def test_a_bad_class_is_refused_each_time_it_comes():
    checked = CheckedClasses()
    for _ in range(3):
        why = checked.runs_of(rank_class([10, 5, 12, 1]))  # overlapping runs
        assert isinstance(why, str) and "not after" in why


def test_names_are_matched_once_and_a_bad_one_never_kept():
    checked = CheckedClasses()
    assert checked.name_ok("node-7", NAME) and "node-7" in checked.names
    assert not checked.name_ok("-bad name", NAME) and "-bad name" not in checked.names


def test_what_is_kept_is_bounded_by_the_full_states_seen():
    checked = CheckedClasses()
    for start in range(CheckedClasses.MIN_KEPT + 10):
        checked.runs_of(rank_class([start + 1, 1], nranks=1 << 20))
        checked.name_ok(f"node-{start}", NAME)
    checked.bound(classes=100)
    assert not checked.runs and not checked.names
    checked.runs_of(rank_class([1, 1]))
    checked.bound(classes=100)
    assert len(checked.runs) == 1  # within the bound: kept
