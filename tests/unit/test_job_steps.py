"""Reconciling nodes' step indices into the job's Steps through shared communicators' seq
spans (comminsight.agent.steps.job_steps): offsets found, and every disagreement named."""

from __future__ import annotations

from comminsight.agent.steps.job_steps import GpuKey, StepRecord, reconcile

TP_OPS, DP_OPS = 10, 3  # collectives per iteration on each communicator
STARTUP = 2  # collectives before the first Step on each communicator


def gpu(node: str, rank: int) -> GpuKey:
    return GpuKey(node, rank, 1000 + rank)


def records(comms: list[str], iterations, first_local: int = 0, shift: int = 0, spans=True):
    """A GPU's records of `iterations` numbered from first_local; `shift` moves every
    boundary that many ops later (a node that cut its Steps one op apart)."""
    out = {}
    for n, it in enumerate(iterations):
        per = {}
        for comm in comms:
            ops = TP_OPS if comm.startswith("a") else DP_OPS
            first = STARTUP + it * ops + shift
            per[comm] = (first, first + ops - 1)
        index = first_local + n
        out[index] = StepRecord(index, 1_000 * it, 1_000 * it + 900, per if spans else None)
    return out


# communicators: a... tensor-parallel inside a node, d... data-parallel across nodes
TP_A, TP_B, DP_0, DP_1 = "a" + "0" * 15, "a" + "1" * 15, "d" + "0" * 15, "d" + "1" * 15


def two_nodes(b_first_iteration: int = 5, **b_kwargs) -> dict:
    """Nodes A and B, two GPUs each: tp inside each node, dp between A's and B's GPU of the
    same local rank; B's Agent started late, at iteration b_first_iteration (its Step 0)."""
    its_a = range(20)
    its_b = range(b_first_iteration, 20)
    return {
        gpu("A", 0): records([TP_A, DP_0], its_a),
        gpu("A", 1): records([TP_A, DP_1], its_a),
        gpu("B", 2): records([TP_B, DP_0], its_b, **b_kwargs),
        gpu("B", 3): records([TP_B, DP_1], its_b, **b_kwargs),
    }


def nodes(result) -> dict[str, tuple[str, int | None]]:
    return {n.node: (n.state, n.offset) for n in result.nodes}


def kinds(result) -> list[str]:
    return [d.kind for d in result.disagreements]


def test_a_node_started_late_is_offset_so_each_job_step_holds_every_gpus_same_iteration():
    result = reconcile(two_nodes())
    assert nodes(result) == {"A": ("reference", 0), "B": ("linked", 5)}
    assert result.disagreements == []
    assert [s.index for s in result.steps] == list(range(20))
    for step in result.steps:
        gpus = {g.node for g, _ in step.records}
        assert gpus == ({"A"} if step.index < 5 else {"A", "B"})
        # every record of a job step is the same iteration (start times were made from it)
        assert {r.start_real_ns for _, r in step.records} == {1_000 * step.index}
        assert step.missing == []
    b = next(n for n in result.nodes if n.node == "B")
    assert b.linked_through in (DP_0, DP_1) and b.votes == 15


def test_the_node_that_saw_the_earliest_step_has_offset_zero_whichever_name_sorts_first():
    data = two_nodes()
    # now A's Agent is the late one: it saw iterations 3.. as its Steps 0..
    data[gpu("A", 0)] = records([TP_A, DP_0], range(3, 20))
    data[gpu("A", 1)] = records([TP_A, DP_1], range(3, 20))
    data[gpu("B", 2)] = records([TP_B, DP_0], range(20))
    data[gpu("B", 3)] = records([TP_B, DP_1], range(20))
    result = reconcile(data)
    assert nodes(result) == {"A": ("linked", 3), "B": ("reference", 0)}
    assert result.disagreements == []


def test_a_node_whose_boundaries_are_one_op_off_is_aligned_and_named_with_both_spans():
    result = reconcile(two_nodes(shift=1))
    assert nodes(result) == {"A": ("reference", 0), "B": ("linked", 5)}
    assert kinds(result) == ["boundary_mismatch", "boundary_mismatch"]
    d = result.disagreements[0]
    assert d.nodes == ["A", "B"] and d.comm_id in (DP_0, DP_1)
    b_claim, a_claim = d.spans[0], d.spans[1]
    assert b_claim.gpu.node == "B" and a_claim.gpu.node == "A"
    assert (b_claim.first_seq, b_claim.last_seq) == (a_claim.first_seq + 1, a_claim.last_seq + 1)
    assert d.job_step == a_claim.local_index == b_claim.local_index + 5
    assert "15 of 15 shared Step(s)" in d.description


def test_a_node_whose_numbering_skips_midway_cannot_be_reconciled_by_one_offset():
    data = two_nodes()
    for g in (gpu("B", 2), gpu("B", 3)):
        kept = data[g]
        # B missed a boundary at its Step 7: from there on it numbers one less
        data[g] = {
            (i if i < 7 else i - 1): StepRecord(i if i < 7 else i - 1, r.start_real_ns,
                                                r.end_real_ns, r.spans)
            for i, r in kept.items() if i != 7
        }  # fmt: skip
    result = reconcile(data)
    assert "offset_conflict" in kinds(result)
    d = next(d for d in result.disagreements if d.kind == "offset_conflict")
    assert d.nodes == ["A", "B"] and "+5" in d.description and "+6" in d.description
    assert len(d.spans) == 4


def test_gpus_of_one_node_that_number_an_iteration_differently_are_named():
    data = two_nodes()
    data[gpu("A", 1)] = records([TP_A, DP_1], range(20), first_local=1)
    result = reconcile(data)
    assert "node_numbering" in kinds(result)
    d = next(d for d in result.disagreements if d.kind == "node_numbering")
    assert d.nodes == ["A"] and d.comm_id == TP_A


def test_a_node_that_shares_no_communicator_is_unlinked_and_a_silent_member_changes_nothing():
    data = two_nodes()
    # node C runs its own communicator only (a stray job's process, or the link is missing)
    data[gpu("C", 4)] = records(["d" + "2" * 15], range(20))
    result = reconcile(data)
    assert nodes(result) == {"A": ("reference", 0), "B": ("linked", 5), "C": ("unlinked", None)}
    assert kinds(result) == ["unlinked"]
    assert "node C" in result.disagreements[0].description
    assert all(g.node != "C" for s in result.steps for g, _ in s.records)


def test_summaries_without_comm_seqs_are_named_and_placed_by_their_nodes_offset():
    data = two_nodes()
    data[gpu("B", 3)] = records([TP_B, DP_1], range(5, 20), spans=False)
    result = reconcile(data)
    assert nodes(result) == {"A": ("reference", 0), "B": ("linked", 5)}
    assert kinds(result) == ["no_comm_seqs"]
    assert "B rank 3" in result.disagreements[0].description
    step = result.steps[10]
    assert {(g.node, g.global_rank, i.index) for g, i in step.records} >= {("B", 3, 5)}


def test_a_node_with_only_old_summaries_is_unlinked_and_named_twice():
    data = two_nodes()
    for g in (gpu("B", 2), gpu("B", 3)):
        data[g] = records([TP_B], range(5, 20), spans=False)
    result = reconcile(data)
    assert nodes(result)["B"] == ("unlinked", None)
    assert sorted(kinds(result)) == ["no_comm_seqs", "unlinked"]


def test_a_step_a_gpu_did_not_report_is_listed_as_missing_in_that_job_step():
    data = two_nodes()
    del data[gpu("B", 2)][4]  # its local Step 4: job step 9
    result = reconcile(data)
    assert nodes(result)["B"] == ("linked", 5)
    assert [s.missing for s in result.steps if s.missing] == [[gpu("B", 2)]]
    assert result.steps[9].missing == [gpu("B", 2)]


def test_three_nodes_linked_through_different_communicators_chain_their_offsets():
    data = two_nodes()
    # node C shares dp_1 with B only through a third dp group: B3 and C4 on "e..."
    dp_bc = "e" + "0" * 15
    data[gpu("B", 3)] = records([TP_B, DP_1, dp_bc], range(5, 20))
    data[gpu("C", 4)] = records([dp_bc], range(8, 20))
    result = reconcile(data)
    assert nodes(result) == {"A": ("reference", 0), "B": ("linked", 5), "C": ("linked", 8)}
    assert result.disagreements == []


def test_empty_input_gives_an_empty_answer():
    result = reconcile({})
    assert result.nodes == [] and result.steps == [] and result.disagreements == []


def test_a_node_known_to_run_the_job_without_a_step_in_the_window_is_named_silent():
    result = reconcile(two_nodes(), expected_nodes=frozenset({"A", "B", "C"}))
    assert nodes(result) == {"A": ("reference", 0), "B": ("linked", 5), "C": ("silent", None)}
    assert kinds(result) == ["silent_node"]
    assert result.disagreements[0].nodes == ["C"]


def test_a_gpu_without_a_pid_sorts_beside_one_with_a_pid():
    data = two_nodes()
    data[GpuKey("A", 0, None)] = data[gpu("A", 0)]
    result = reconcile(data)
    assert nodes(result) == {"A": ("reference", 0), "B": ("linked", 5)}
    assert result.steps[0].records[0][0] == GpuKey("A", 0, None)
