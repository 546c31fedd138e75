"""The Steps of one job, reconciled across nodes from the boundary candidates of their step
summaries (step-summary v1 comm_seqs), never from op streams.

Every rank of a job takes the same Steps, but each node's engine numbers them on its own: one
node's Step 7 may be another's Step 6. NCCL's collective seq of a communicator is the same on
all its members for the same collective, so two GPUs of one communicator are in the same
iteration where their coll spans on it coincide. For every communicator shared across nodes,
one GPU per node is matched against one GPU of the node with most Steps on it: each Step's
span midpoint is looked up among the other GPU's spans (containment, so a node that cut a Step
one op apart still lines up, and is then named), and the differences of their local indices
vote for the two nodes' relative offset. A maximum spanning tree of the votes gives each node
its offset (job step index = local index + offset; the node that saw the earliest Step has 0);
every vote the offsets contradict, every matched span that is not equal, and every GPU or
node that nothing links is a named disagreement.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

MAX_DISAGREEMENTS = 256
MAX_SPANS_SHOWN = 8
PIVOTS = 4  # nodes a node is matched against on a communicator before it is left unlinked
SEVERITY = (
    "offset_conflict",
    "unlinked",
    "silent_node",
    "node_numbering",
    "boundary_mismatch",
    "no_comm_seqs",
)


class GpuKey(NamedTuple):  # a tuple: hashed for every record of the window
    node: str
    global_rank: int
    pid: int | None


def gpu_order(g: GpuKey) -> tuple[str, int, int]:
    """GPUs by node, rank, pid (an unknown pid first: None does not compare with ints)."""
    return g.node, g.global_rank, g.pid if g.pid is not None else -1


@dataclass(frozen=True)
class StepRecord:
    """What reconciliation needs of one step summary; spans: coll comm_id -> (first seq, last
    seq), None when the summary had no comm_seqs."""

    index: int
    start_real_ns: int
    end_real_ns: int
    spans: dict[str, tuple[int, int]] | None


@dataclass(frozen=True)
class SpanClaim:
    gpu: GpuKey
    local_index: int
    first_seq: int
    last_seq: int


@dataclass
class Disagreement:
    kind: str
    description: str
    nodes: list[str]
    comm_id: str | None = None
    job_step: int | None = None
    spans: list[SpanClaim] = field(default_factory=list)


@dataclass
class NodeOffset:
    node: str
    state: str  # reference | linked | unlinked
    offset: int | None
    gpus: int
    first_local: int | None
    last_local: int | None
    linked_through: str | None = None
    votes: int = 0


@dataclass
class JobStepRow:
    index: int
    records: list[tuple[GpuKey, StepRecord]]  # by GpuKey
    missing: list[GpuKey]

    @property
    def start_real_ns(self) -> int:
        return min(r.start_real_ns for _, r in self.records)

    @property
    def end_real_ns(self) -> int:
        return max(r.end_real_ns for _, r in self.records)


@dataclass
class Reconciliation:
    nodes: list[NodeOffset]
    steps: list[JobStepRow]  # ascending job step index
    disagreements: list[Disagreement]
    disagreements_total: int


class _Spans:
    """One GPU's Steps on one communicator, by first seq (seqs grow with the Steps)."""

    __slots__ = ("gpu", "index", "first", "last")

    def __init__(self, gpu: GpuKey, rows: list[tuple[int, int, int]]) -> None:
        rows.sort(key=lambda r: r[1])
        self.gpu = gpu
        self.index = np.array([r[0] for r in rows], np.int64)
        self.first = np.array([r[1] for r in rows], np.int64)
        self.last = np.array([r[2] for r in rows], np.int64)

    def claim(self, k: int) -> SpanClaim:
        return SpanClaim(self.gpu, int(self.index[k]), int(self.first[k]), int(self.last[k]))


@dataclass
class _Match:
    """a's Steps matched into b's on one communicator: the matched Steps (ka[i] of a's in
    kb[i] of b's) and the votes of their index differences (a index - b index)."""

    a: _Spans
    b: _Spans
    comm: str
    ka: np.ndarray
    kb: np.ndarray
    votes: Counter

    def best(self) -> tuple[int, int]:
        delta, n = min(self.votes.items(), key=lambda kv: (-kv[1], abs(kv[0]), kv[0]))
        return delta, n

    def pairs(self, delta: int, unequal: bool) -> list[tuple[int, int]]:
        """The matched Steps `delta` apart (only those whose spans differ, with unequal)."""
        a, b, ka, kb = self.a, self.b, self.ka, self.kb
        keep = (a.index[ka] - b.index[kb]) == delta
        if unequal:
            keep &= (a.first[ka] != b.first[kb]) | (a.last[ka] != b.last[kb])
        return list(zip(ka[keep].tolist(), kb[keep].tolist(), strict=True))

    def shown(self, pairs: list[tuple[int, int]]) -> list[SpanClaim]:
        out = []
        for x, y in pairs[: MAX_SPANS_SHOWN // 2]:
            out += [self.a.claim(x), self.b.claim(y)]
        return out


def _match(a: _Spans, b: _Spans, comm: str) -> _Match:
    mid = (a.first + a.last) // 2
    k = np.searchsorted(b.first, mid, side="right") - 1
    inside = (k >= 0) & (mid <= b.last[np.maximum(k, 0)])
    ka = np.flatnonzero(inside)
    kb = k[inside]
    votes = Counter((a.index[ka] - b.index[kb]).tolist())
    return _Match(a, b, comm, ka, kb, votes)


def _gpu_spans(gpus: dict[GpuKey, dict[int, StepRecord]]) -> dict[str, list[_Spans]]:
    members: dict[str, list[_Spans]] = defaultdict(list)
    for gpu in sorted(gpus, key=gpu_order):
        rows: dict[str, list] = defaultdict(list)
        for r in gpus[gpu].values():
            if r.spans:
                for comm, (first, last) in r.spans.items():
                    rows[comm].append((r.index, first, last))
        for comm, rs in rows.items():
            members[comm].append(_Spans(gpu, rs))
    return dict(sorted(members.items()))


def _name(gpu: GpuKey) -> str:
    pid = f" pid {gpu.pid}" if gpu.pid is not None else ""
    return f"{gpu.node} rank {gpu.global_rank}{pid}"


def _span_text(c: SpanClaim) -> str:
    return f"{_name(c.gpu)} local step {c.local_index} [{c.first_seq}, {c.last_seq}]"


class _Finder:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x


def reconcile(
    gpus: dict[GpuKey, dict[int, StepRecord]], expected_nodes: frozenset[str] = frozenset()
) -> Reconciliation:
    """The job's Steps from each GPU's recent step records (local index -> record);
    `expected_nodes` are nodes known to run the job (a master's slaves), named when silent."""
    found: list[Disagreement] = []
    by_node: dict[str, list[GpuKey]] = defaultdict(list)
    for gpu in sorted(gpus, key=gpu_order):
        by_node[gpu.node].append(gpu)
    _name_unspanned(gpus, by_node, found)
    cross: list[_Match] = []
    for comm, members in _gpu_spans(gpus).items():
        per_node: dict[str, list[_Spans]] = defaultdict(list)
        for s in members:
            per_node[s.gpu.node].append(s)
        reps = {}
        for node, spans in sorted(per_node.items()):
            rep = max(spans, key=lambda s: (len(s.index), -s.gpu.global_rank))
            reps[node] = rep
            for other in spans:
                if other is not rep:
                    _check_same_node(_match(other, rep, comm), found)
        # each node against the one with the longest record on the communicator, or, where
        # their windows do not overlap, the next few
        nodes = sorted(reps, key=lambda n: (-len(reps[n].index), n))
        for node in nodes[1:]:
            for other in nodes[:PIVOTS]:
                if other == node:
                    break
                m = _match(reps[node], reps[other], comm)
                if m.votes:
                    cross.append(m)
                    break
    offsets, linked_by = _offsets(by_node, cross, found)
    for m in cross:
        _check_boundaries(m, offsets, found)
    nodes = _node_rows(gpus, by_node, offsets, linked_by, found)
    for node in sorted(expected_nodes - set(by_node)):
        nodes.append(NodeOffset(node, "silent", None, 0, None, None))
        found.append(
            Disagreement(
                "silent_node",
                f"node {node} runs processes of the job but none of its Steps is in the window: "
                "its engine has cut none yet, or its step summaries do not arrive",
                [node],
            )
        )
    nodes.sort(key=lambda n: n.node)
    steps = _job_steps(gpus, offsets)
    found.sort(key=lambda d: (SEVERITY.index(d.kind), d.nodes, d.comm_id or "", d.job_step or 0))
    return Reconciliation(nodes, steps, found[:MAX_DISAGREEMENTS], len(found))


def _name_unspanned(gpus, by_node, found: list[Disagreement]) -> None:
    for node, members in sorted(by_node.items()):
        bare = [g for g in members if all(r.spans is None for r in gpus[g].values())]
        if bare:
            found.append(
                Disagreement(
                    "no_comm_seqs",
                    f"{len(bare)} GPU(s) of node {node} wrote step summaries without comm_seqs "
                    f"(an engine that predates them): {', '.join(_name(g) for g in bare[:8])}; "
                    "they are placed by their node's offset when another of its GPUs links it",
                    [node],
                )
            )


def _check_same_node(m: _Match, found: list[Disagreement]) -> None:
    """GPUs of one node number their Steps alike: any vote for another delta than 0 says
    they do not."""
    wrong = {d: n for d, n in m.votes.items() if d != 0}
    if not wrong:
        return
    delta = max(wrong, key=lambda d: (wrong[d], -abs(d)))
    node = m.a.gpu.node
    shown = m.shown(m.pairs(delta, unequal=False))
    found.append(
        Disagreement(
            "node_numbering",
            f"on node {node}, {_name(m.a.gpu)} and {_name(m.b.gpu)} number the same iteration "
            f"differently on communicator {m.comm}: {wrong[delta]} Step(s) {delta:+d} apart, "
            f"e.g. {_span_text(shown[0])} is {_span_text(shown[1])}",
            [node],
            m.comm,
            None,
            shown,
        )
    )


def _offsets(by_node, cross: list[_Match], found: list[Disagreement]):
    """Each linked node's offset against its component's earliest node; the reference
    component is the one with most GPUs."""
    edges = []  # (votes, a node, b node, delta: offset[a] - offset[b], match)
    for m in cross:
        delta, votes = m.best()
        # a index + off[a] = b index + off[b]  =>  off[a] - off[b] = -(a index - b index)
        edges.append((votes, m.a.gpu.node, m.b.gpu.node, -delta, m))
        dissent = {d: n for d, n in m.votes.items() if d != delta}
        if dissent:
            _offset_conflict(m, delta, votes, dissent, found)
    edges.sort(key=lambda e: (-e[0], e[1], e[2]))
    finder = _Finder()
    tree: dict[str, list[tuple[str, int, _Match, int]]] = defaultdict(list)
    rest = []
    for votes, a, b, d, m in edges:
        ra, rb = finder.find(a), finder.find(b)
        if ra == rb:
            rest.append((a, b, d, m))
            continue
        finder.parent[ra] = rb
        tree[a].append((b, -d, m, votes))
        tree[b].append((a, d, m, votes))
    relative: dict[str, int] = {}
    linked_by: dict[str, tuple[str, int]] = {}
    components: list[list[str]] = []
    for root in sorted(by_node):
        if root in relative:
            continue
        relative[root] = 0
        queue, members = [root], [root]
        while queue:
            x = queue.pop()
            for y, dxy, m, votes in tree.get(x, ()):
                # off[y] - off[x] = dxy
                if y not in relative:
                    relative[y] = relative[x] + dxy
                    linked_by[y] = (m.comm, votes)
                    queue.append(y)
                    members.append(y)
        components.append(members)
    for a, b, d, m in rest:
        if relative[a] - relative[b] != d:
            found.append(
                Disagreement(
                    "offset_conflict",
                    f"no offset reconciles nodes {a} and {b}: communicator {m.comm} aligns them "
                    f"{d:+d} Steps apart, the other communicators {relative[a] - relative[b]:+d}",
                    sorted({a, b}),
                    m.comm,
                )
            )
    if not components:
        return {}, {}
    reference = max(components, key=lambda c: (sum(len(by_node[n]) for n in c), -len(c)))
    low = min(relative[n] for n in reference)
    offsets = {n: relative[n] - low for n in reference}
    return offsets, {n: linked_by[n] for n in reference if n in linked_by}


def _offset_conflict(m: _Match, delta, votes, dissent, found) -> None:
    other, n = max(dissent.items(), key=lambda kv: (kv[1], -abs(kv[0])))
    shown = m.shown(m.pairs(delta, unequal=False)[:1] + m.pairs(other, unequal=False)[:1])
    found.append(
        Disagreement(
            "offset_conflict",
            f"no single offset reconciles {_name(m.a.gpu)} and {_name(m.b.gpu)} on communicator "
            f"{m.comm}: {votes} Step(s) line up {-delta:+d} apart, {n} at {-other:+d}"
            + (f" and {len(dissent) - 1} more offsets" if len(dissent) > 1 else ""),
            sorted({m.a.gpu.node, m.b.gpu.node}),
            m.comm,
            None,
            shown,
        )
    )


def _check_boundaries(m: _Match, offsets: dict[str, int], found: list[Disagreement]) -> None:
    a_node, b_node = m.a.gpu.node, m.b.gpu.node
    if a_node not in offsets or b_node not in offsets:
        return
    expected = offsets[b_node] - offsets[a_node]  # a index - b index of one iteration
    pairs = m.pairs(expected, unequal=True)
    if not pairs:
        return
    shown = m.shown(pairs)
    job_step = shown[0].local_index + offsets[a_node]
    found.append(
        Disagreement(
            "boundary_mismatch",
            f"nodes {a_node} and {b_node} cut {len(pairs)} of {m.votes[expected]} shared Step(s) "
            f"at different ops on communicator {m.comm}; at job step {job_step}: "
            f"{_span_text(shown[0])} vs {_span_text(shown[1])}",
            sorted({a_node, b_node}),
            m.comm,
            job_step,
            shown,
        )
    )


def _node_rows(gpus, by_node, offsets, linked_by, found) -> list[NodeOffset]:
    rows = []
    reference = min((n for n, o in offsets.items() if o == 0), default=None)
    for node, members in sorted(by_node.items()):
        indices = [i for g in members for i in gpus[g]]
        offset = offsets.get(node)
        comm, votes = linked_by.get(node, (None, 0))
        if offset is None:
            state = "unlinked"
        elif node == reference:
            state = "reference"
        else:
            state = "linked"
        rows.append(
            NodeOffset(
                node,
                state,
                offset,
                len(members),
                min(indices, default=None),
                max(indices, default=None),
                comm,
                votes,
            )
        )
        if offset is None:
            found.append(
                Disagreement(
                    "unlinked",
                    f"node {node} shares no coinciding communicator span with node {reference}'s "
                    f"part of the job: no offset places its {len(indices)} Step record(s)",
                    [node],
                )
            )
    return rows


def _job_steps(gpus, offsets: dict[str, int]) -> list[JobStepRow]:
    steps: dict[int, JobStepRow] = {}
    placed = [
        (gpu, offsets[gpu.node]) for gpu in sorted(gpus, key=gpu_order) if gpu.node in offsets
    ]
    for gpu, offset in placed:
        for index, record in sorted(gpus[gpu].items()):
            j = index + offset
            row = steps.get(j)
            if row is None:
                row = steps[j] = JobStepRow(j, [], [])
            row.records.append((gpu, record))
    for gpu, offset in placed:  # a Step the job took, inside this GPU's run, not reported
        records = gpus[gpu]
        if records:
            for index in range(min(records), max(records) + 1):
                row = steps.get(index + offset)
                if index not in records and row is not None:
                    row.missing.append(gpu)
    return [steps[j] for j in sorted(steps)]
