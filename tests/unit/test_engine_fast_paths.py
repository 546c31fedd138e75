"""The Semantic Engine's fast paths against the plain definitions they replace.

Ops already in issue order skip the reorder window's heap; a job cut's decisions, each Step's
seq spans and the summaries' records are made over whole columns. Each must give exactly what
the plain rule gives: the same ops released in the same order, the same decision bits, the
same spans, the same anomalies in the same order.
"""

from __future__ import annotations

import gc
import statistics
from types import SimpleNamespace

import msgspec
import numpy as np
import pytest

from comminsight.semantic import native, shm_input
from comminsight.semantic.engine import GpuEngine
from comminsight.semantic.job_cut import STARTUP, TAIL
from comminsight.semantic.offline import _collector_paused
from comminsight.semantic.op_batch import (
    FUNCS,
    INT_COLUMNS,
    Comm,
    CommTable,
    OpBatch,
    SegmentTable,
)
from comminsight.semantic.step_builder import (
    CommSpans,
    GpuIdentity,
    SlowestOps,
    StepOps,
    StepTable,
    comm_spans,
    step_spans,
)
from comminsight.semantic.step_summary import (
    BANDWIDTH_LOW_FACTOR,
    MAX_COMM_SEQS,
    History,
    _Anomalies,
    comm_seq_records,
    comm_seq_spans,
    durations_of,
)
from comminsight.semantic.templates import TemplateSet
from comminsight_gen.abi import shm_v1

# ---- the reorder window ----------------------------------------------------------------------


def batch_of(issue: list[int]) -> OpBatch:
    cols = {c: np.zeros(len(issue), np.int64) for c in INT_COLUMNS}
    cols["busbw"] = np.zeros(len(issue))
    cols["issue"] = np.array(issue, np.int64)
    return OpBatch(cols, CommTable(), SegmentTable())


def released_by_engine(batches: list[list[int]], window: int) -> list[list[int]]:
    """The arrival numbers of the ops each feed releases, in order, then those drain does."""
    engine = GpuEngine(GpuIdentity("h", 0), TemplateSet([], []))
    engine.window = window
    out: list[list[int]] = []

    def take(batch, final=False):
        out[-1].extend(batch["arrival"].tolist())
        return []

    engine._take = take
    for issue in batches:
        out.append([])
        engine.feed(batch_of(issue))
    out.append([])
    engine.drain()
    return out


def released_by_heap(batches: list[list[int]], window: int) -> list[list[int]]:
    """The same through native.reorder for every batch (the window's rule itself)."""
    held_issue = np.zeros(0, np.int64)
    held_arrival = np.zeros(0, np.int64)
    arrivals, out = 0, []
    for issue in batches:
        issue = np.concatenate([held_issue, np.array(issue, np.int64)])
        arrival = np.concatenate(
            [held_arrival, np.arange(arrivals, arrivals + len(issue) - len(held_issue))]
        )
        arrivals += len(issue) - len(held_issue)
        released, keep = native.reorder(issue, arrival, len(held_issue), window)
        out.append(arrival[released].tolist())
        held_issue, held_arrival = issue[keep], arrival[keep]
    order = np.lexsort((held_arrival, held_issue))
    return out + [held_arrival[order].tolist()]


def split(values: list[int], sizes: list[int]) -> list[list[int]]:
    out, i = [], 0
    for size in sizes:
        out.append(values[i : i + size])
        i += size
    return out + ([values[i:]] if i < len(values) else [])


@pytest.mark.parametrize(
    "sizes",
    [[1000], [1] * 40, [3, 5, 7, 2], [255, 1, 1, 300], [256, 256], [257, 10, 500]],
    ids=["one", "singles", "fewer-than-the-window", "around-the-window", "window", "mixed"],
)
def test_ops_in_issue_order_are_released_as_the_window_releases_them(sizes):
    rng = np.random.default_rng(len(sizes))
    issue = np.cumsum(rng.integers(0, 3, 1000)).tolist()  # in order, with ties
    batches = split(issue, sizes)
    assert released_by_engine(batches, 256) == released_by_heap(batches, 256)


def test_in_order_batches_after_reordered_ones_release_as_the_window_does():
    rng = np.random.default_rng(7)
    issue = np.cumsum(rng.integers(0, 5, 2000))
    shuffled = issue.copy()
    for i in range(0, 600, 10):  # ops that completed out of order: the heap's work
        rng.shuffle(shuffled[i : i + 10])
    batches = split(shuffled.tolist(), [100, 300, 50, 400, 7, 600])
    assert released_by_engine(batches, 64) == released_by_heap(batches, 64)


def test_a_batch_issued_before_an_op_still_held_goes_through_the_window():
    batches = [[10, 20, 30, 40], [15, 16, 50], [60, 60, 5], [70]]
    assert released_by_engine(batches, 2) == released_by_heap(batches, 2)


def test_more_ops_held_than_the_window_release_one_per_op_that_arrives():
    engine = GpuEngine(GpuIdentity("h", 0), TemplateSet([], []))
    engine.window = 8
    released: list[int] = []
    engine._take = lambda b, final=False: released.extend(b["arrival"].tolist()) or []
    engine.feed(batch_of(list(range(8))))
    engine.window = 4  # fewer than it holds: the window rule still releases one per arrival
    engine.feed(batch_of([8, 9]))
    assert released == [0, 1]
    assert sorted(engine.held["arrival"].tolist()) == list(range(2, 10))


# ---- a job cut's decisions -------------------------------------------------------------------


def cut_decide_by_definition(step: np.ndarray, last_step: int):
    in_step = (step >= 0) & (step != TAIL)
    before = np.maximum.accumulate(np.concatenate([[last_step], np.where(in_step, step, -1)]))
    begin = in_step & (step > before[:-1])
    dec = np.where(in_step, native.IN_STEP, 0) | np.where(begin, native.B_BEGIN, 0)
    latest = int(before[-1]) if len(step) else last_step
    return dec.astype(np.uint8), step[begin].tolist(), latest


@pytest.mark.parametrize("last_step", [-1, 0, 5, 40])
def test_cut_decisions_begin_a_step_only_past_every_step_before(last_step):
    rng = np.random.default_rng(last_step + 2)
    step = np.sort(rng.integers(0, 30, 500))
    step[rng.integers(0, 500, 40)] = STARTUP
    step[rng.integers(0, 500, 20)] = TAIL
    step[rng.integers(0, 500, 30)] = rng.integers(0, 30, 30)  # reordered across boundaries
    dec, begun, latest = native.cut_decide(step, TAIL, last_step)
    want_dec, want_begun, want_latest = cut_decide_by_definition(step, last_step)
    assert dec.tolist() == want_dec.tolist()
    assert begun == want_begun
    assert latest == want_latest


def test_cut_decisions_of_no_op_leave_the_latest_step():
    dec, begun, latest = native.cut_decide(np.zeros(0, np.int64), TAIL, 7)
    assert (len(dec), begun, latest) == (0, [], 7)


# ---- seq spans -------------------------------------------------------------------------------


def span_batch(n: int, comms: int, rng) -> OpBatch:
    table = CommTable()
    for i in range(comms):
        table.index(Comm(f"{(comms - i) * 7919:016x}", None, 2, 1, 0))  # ids out of order
    cols = {
        "seq": rng.integers(-2, 10**6, n),
        "comm": rng.integers(0, comms, n),
        "kind": rng.integers(0, 2, n),
    }
    return OpBatch(cols, table, SegmentTable(), n)


def test_a_step_whose_ops_are_not_one_stretch_is_refused_by_name():
    rng = np.random.default_rng(3)
    batch = span_batch(6, 2, rng)
    with pytest.raises(ValueError, match="step_of goes back"):
        comm_spans(np.array([0, 0, 1, 1, 0, 1]), batch, 2)


class SpanTable:
    """What comm_seq_records reads of a StepTable."""

    def __init__(self, spans: CommSpans, k: int, spans_of: dict) -> None:
        self.spans, self.spans_of, self.k = spans, spans_of, k

    def __len__(self) -> int:
        return self.k


@pytest.mark.parametrize("comms", [3, 80])  # 80 communicators: more spans than a record keeps
def test_span_records_are_the_spans_in_record_order_and_at_most_the_records_limit(comms):
    rng = np.random.default_rng(comms)
    batch = span_batch(4000, comms, rng)
    step_of = np.sort(rng.integers(-1, 12, 4000))
    spans = comm_spans(step_of, batch, 12)
    dicts = step_spans(SimpleNamespace(step_of=step_of), batch, 12)
    # Step 3 continues an open Step's spans; Step 5 one restored without them
    known = {3: {("p2p", "00000000000000ff"): [4, 9, 2]}, 5: None}
    got = comm_seq_records(SpanTable(spans, 10, known))  # the first 10 Steps closed
    want = [comm_seq_spans(known[j] if j in known else dicts[j]) for j in range(10)]
    assert got == [msgspec.UNSET if w is None else w for w in want]
    assert got[5] is msgspec.UNSET
    assert max(len(r) for r in got if r is not msgspec.UNSET) <= MAX_COMM_SEQS
    if comms == 80:
        assert any(len(d) > MAX_COMM_SEQS for d in dicts)


# ---- anomalies -------------------------------------------------------------------------------


def table(k: int, roles: list[str], rng, lost=None, unexpected=None) -> StepTable:
    r = len(roles)
    role_time = rng.integers(1, 1000, (k, r))
    ops = StepOps(["coll"] * k, ["00000000000000aa"] * k, list(range(k)), ["AllReduce"] * k,
                  [None] * k)  # fmt: skip
    slow_roles = [roles[j % r] for j in range(k)]
    durations = rng.integers(100, 200, k)
    durations[-3:] *= 50  # three slow ops at the end
    none = native.NONE
    start = np.arange(k) * 10_000
    length = rng.integers(1000, 1200, k)
    length[-2:] *= 10  # two slow Steps
    return StepTable(
        roles,
        list(range(k)),
        np.arange(k) < 2,
        ops,
        ops,
        SlowestOps(ops, [None] * k, slow_roles, durations.tolist(), [1] * k, [1.0] * k),
        np.full(k, none),
        start,
        np.full(k, none),
        start + length,
        np.full(k, 5),
        np.zeros(k, np.int64),
        np.zeros(k, np.int64) if unexpected is None else unexpected,
        np.zeros(k, np.int64) if lost is None else lost,
        np.zeros(k, np.int64),
        np.full(k, 100),
        np.zeros(k),
        np.full(k, none),
        np.ones((k, r), np.int64),
        role_time,
        np.ones((k, r), np.int64),
        np.column_stack([durations] * r),
        role_time * rng.uniform(1, 2, (k, r)) * np.where(np.arange(k) >= k - 4, 0.01, 1)[:, None],
        None,
        {},
    )


def anomalies_by_definition(a: _Anomalies, t: StepTable, j: int, max_unexpected: int):
    """(kind, description) of Step j's anomalies, each kind worded as the record says."""
    found = []
    if a.step_slow[j]:
        median = float(a.step_med[j])
        found.append(("step_slow", f"step took {int(a.durations[j]) / median:.1f}x the median "
                      f"of the last {int(a.step_n[j])} steps"))  # fmt: skip
    if a.op_slow[j]:
        s = t.slowest
        found.append(("op_slow", f"{s.op.func[j]} #{s.op.seq[j]} took "
                      f"{s.duration_ns[j] / float(a.op_med[j]):.1f}x the median slowest "
                      f"{s.role[j]} op of recent steps"))  # fmt: skip
    for r in np.flatnonzero(a.bw_low[j]).tolist():
        found.append(("bandwidth_low", f"{t.names[r]} bus bandwidth {float(a.bw[j, r]):.1f} "
                      f"GB/s is below {BANDWIDTH_LOW_FACTOR:g}x its median "
                      f"{float(a.bw_med[j, r]):.1f} GB/s"))  # fmt: skip
    if t.lost[j]:
        found.append(("records_lost", f"{t.lost[j]} op records were lost inside the step; "
                      "its totals are low"))  # fmt: skip
    if t.unexpected[j] > max_unexpected:
        found.append(("unexpected_ops", f"{t.unexpected[j]} ops the pattern did not expect"))
    return sorted(found)


def test_every_kind_of_anomaly_is_worded_and_ordered_as_its_step_by_step_definition():
    rng = np.random.default_rng(11)
    k = 40
    lost = np.zeros(k, np.int64)
    lost[[5, 30]] = [3, 1]
    unexpected = np.zeros(k, np.int64)
    unexpected[[7, 30, 39]] = [1, 4, 9]
    # roles whose names sort unlike their columns: a Step's roles come in description order
    t = table(k, ["zeta", "alpha", "mid"], rng, lost, unexpected)
    history = History()
    for w in (history.step_duration_ns, history.bandwidths("zeta"), history.op_times("mid")):
        w.extend([1000.0] * 10)
    a = _Anomalies(t, durations_of(t), history)
    got = a.lists(t, 2)
    kinds = set()
    for j in range(k):
        want = anomalies_by_definition(a, t, j, 2)
        assert [(x.kind.value, x.description) for x in got[j]] == want, j
        kinds.update(kind for kind, _ in want)
    assert kinds == {"step_slow", "op_slow", "bandwidth_low", "records_lost", "unexpected_ops"}
    assert any(sum(x.kind.value == "bandwidth_low" for x in got[j]) > 1 for j in range(k))
    assert all(got[j] is not got[j + 1] for j in range(k - 1))  # each Step its own list


# ---- history medians -------------------------------------------------------------------------


@pytest.mark.parametrize("prior", [0, 3, 50])
def test_history_medians_are_statistics_median_of_the_window_before_each_step(prior):
    rng = np.random.default_rng(prior)
    k, width = 300, 50
    window = rng.integers(0, 1000, prior).astype(float).tolist()
    asked = rng.random(k) < 0.7
    learns = rng.random(k) < 0.8
    values = rng.integers(0, 1000, k).astype(float)
    med, size = native.history_medians(np.array(window), width, asked, learns, values, 5)
    held = list(window)
    for j in range(k):
        assert size[j] == len(held)
        if asked[j] and len(held) >= 5:
            assert med[j] == statistics.median(held), j
        else:
            assert np.isnan(med[j])
        if learns[j]:
            held = (held + [values[j]])[-width:]


def test_a_history_window_larger_than_the_medians_take_is_refused_by_name():
    with pytest.raises(ValueError, match="a window of 5000 values"):
        native.history_medians(np.zeros(3), 5000, np.ones(2, bool), np.ones(2, bool),
                               np.zeros(2), 5)  # fmt: skip


# ---- the collector paused for a run ----------------------------------------------------------


def test_a_run_leaves_the_collector_on_and_what_it_made_in_the_oldest_generation():
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with _collector_paused():
        assert not gc.isenabled()
        made = [[i] for i in range(100)]
    assert gc.isenabled() and gc.get_freeze_count() == 0
    old = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(m) in old for m in made)


def test_a_run_leaves_objects_someone_froze_frozen_and_a_paused_collector_paused():
    frozen = [[i] for i in range(3)]  # lists: objects the collector tracks (and freezes)
    gc.freeze()
    try:
        with _collector_paused():
            pass
        # not unfrozen by the run (that empties the permanent generation); an exact count
        # would fail whenever a frozen object elsewhere in the process is freed meanwhile
        assert gc.get_freeze_count() >= len(frozen)
        assert gc.isenabled()
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        with _collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert frozen


@pytest.mark.parametrize("n", [1, 7, 200])
def test_small_live_batches_get_the_functions_and_communicators_the_numpy_path_gives(
    n, monkeypatch
):
    rng = np.random.default_rng(n)
    records = np.zeros(n, shm_v1.OP_SLOT_DTYPE)
    # ids past 2**63 too: their order as signed numbers decides the table's
    records["comm_id"] = rng.choice(
        np.array([3, 1 << 63 | 5, 0xFFFFFFFFFFFFFFF0, 77], np.uint64), n
    )
    records["nranks"] = rng.choice([2, 8], n)
    records["rank"] = rng.choice([0, 1], n)
    funcs = [shm_v1.Func.ALL_REDUCE, shm_v1.Func.SEND, shm_v1.Func.RECV, shm_v1.Func.BROADCAST]
    records["func"] = rng.choice([int(f) for f in funcs], n)
    comms = {3: shm_input.CommInfo("dp", 1), 77: shm_input.CommInfo(None, 2)}

    def run(small_batch: int):
        monkeypatch.setattr(shm_input, "SMALL_BATCH", small_batch)
        table = CommTable()
        indices = shm_input._comm_indices(records, comms, table)
        return indices.tolist(), list(table.comms), shm_input._func_codes(records["func"]).tolist()

    fast, plain = run(1 << 20), run(0)
    assert fast == plain
    assert [FUNCS[c] for c in fast[2]] == [
        shm_v1.FUNC_LABELS[shm_v1.Func(f)] for f in records["func"]
    ]
