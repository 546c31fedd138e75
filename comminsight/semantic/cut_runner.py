"""Step boundaries a job cut decided (job_cut), placed by one GPU's engine.

Offline (CutRunner) the cut labelled every op of the input before the engine places any.
Live (LiveCutRunner) the node's cut (live_cut) labels a prefix of the ops the engine holds
each time it settles Steps, and hands the labels with them.

The job cut labels each op of the GPU with its Step; the engine streams the same ops again
(batch by batch, resumable from a checkpoint) and needs, per op, the decision bits its
placement takes. An op is found by its key (job_ops.op_keys) with a binary search over the
GPU's labelled keys. A Step begins at the first op labelled with a Step later than any
before it; an op labelled with an earlier Step (reordered across a boundary by more than
the cut saw) stays in the Step that is open, so no Step is begun twice.
"""

from __future__ import annotations

import numpy as np

from comminsight.semantic import native
from comminsight.semantic.job_cut import STARTUP, TAIL, JobCut, RankCut
from comminsight.semantic.job_ops import op_keys
from comminsight.semantic.op_batch import FUNCS, OpBatch
from comminsight.semantic.recovery import Labels, func_role
from comminsight.semantic.step_summary import recovery_of
from comminsight.semantic.templates import CompiledTemplate
from comminsight_gen.models.step_summary_v1 import Recovery

MAX_REASONS = 32


class CutLabels(Labels):
    def __init__(self, role: np.ndarray, step: np.ndarray) -> None:
        super().__init__(role, np.full(len(role), -1, np.int32))
        self.step = step


class CutRunner:
    method = "job"

    def __init__(
        self,
        rank: RankCut,
        job: JobCut,
        comm_code,
        last_step: int = -1,
        template: CompiledTemplate | None = None,
        by_arrival: bool = False,
    ) -> None:
        """`comm_code(comm_id)` is the job's code of a communicator id (job_ops.CommIds);
        `template`, when one fits the GPU's ops, names their roles (else their functions
        do)."""
        self.template = template
        self.rank = rank
        self.job = job
        self._comm_code = comm_code
        self._by_key: tuple[np.ndarray, np.ndarray] | None = None  # (keys, Steps) by key
        # the same batches fed again in the same order (not resumed): an op's arrival
        # number is its place in the cut's arrival order
        self._by_arrival: np.ndarray | None = None
        if by_arrival:
            self._by_arrival = np.empty(len(rank.label), np.int64)
            self._by_arrival[rank.gpu.arrival] = rank.label
        self.last_step = last_step  # the latest Step begun
        self.begun: list[int] = []
        self._recoveries: dict[bool, dict] = {}
        self.names: list[str] = []
        self._codes: dict[str, int] = {}
        self.warmup_steps = job.warmup_steps

    def labels(self, batch: OpBatch) -> CutLabels:
        first, inverse = batch.shapes()
        roles = [self.code(self._role(batch, i)) for i in first.tolist()]
        role = np.array(roles, np.int32)[inverse] if len(first) else np.zeros(0, np.int32)
        if self._by_arrival is not None:
            return CutLabels(role, self._by_arrival[batch["arrival"]])
        table = np.fromiter(
            (self._comm_code(c.comm_id) for c in batch.comms.comms),
            np.int64,
            len(batch.comms.comms),
        )
        c = batch.cols
        keys = op_keys(c["kind"], table[c["comm"]], c["func"], c["seq"])
        sorted_keys, steps = self._keyed()
        at = np.searchsorted(sorted_keys, keys)
        at = np.minimum(at, max(0, len(sorted_keys) - 1))
        found = (sorted_keys[at] == keys) if len(sorted_keys) else np.zeros(len(keys), bool)
        step = np.where(found, steps[at] if len(sorted_keys) else 0, STARTUP)
        return CutLabels(role, step)

    def _keyed(self) -> tuple[np.ndarray, np.ndarray]:
        """The GPU's op keys, sorted, and their Steps (only a resumed run looks ops up)."""
        if self._by_key is None:
            order = np.argsort(self.rank.gpu.key, kind="stable")
            self._by_key = (self.rank.gpu.key[order], self.rank.label[order])
        return self._by_key

    def decide(self, labels: CutLabels) -> np.ndarray:
        # self.begun: the job's indices of the Steps begun
        dec, self.begun, self.last_step = native.cut_decide(labels.step, TAIL, self.last_step)
        return dec

    def _role(self, batch: OpBatch, i: int) -> str:
        if self.template is not None:
            return self.template.role_of(batch.shape(i))
        return func_role(FUNCS[int(batch["func"][i])])

    def code(self, role: str) -> int:
        if role not in self._codes:
            self._codes[role] = len(self.names)
            self.names.append(role)
        return self._codes[role]

    def recoveries(self, indices: list[int]) -> list[Recovery]:
        """The step-summary recovery of each Step (one record per kind of Step: doubtful or
        not)."""
        doubtful = self.rank.doubtful_steps
        flags = [i in doubtful for i in indices]
        made = {
            flag: recovery_of(
                self.job.method, None, None, **self.recovery(indices[flags.index(flag)])
            )
            for flag in set(flags)
        }
        return list(map(made.__getitem__, flags))

    def recovery(self, step_index: int) -> dict:
        """What the step-summary's recovery says of a Step (recovery_of's arguments)."""
        doubtful = step_index in self.rank.doubtful_steps
        made = self._recoveries.get(doubtful)
        if made is None:
            made = self._recoveries[doubtful] = self._recovery(step_index)
        return made

    def _recovery(self, step_index: int) -> dict:
        confidence = self.job.step_confidence(self.rank, step_index)
        extra: dict = {"job_steps": self.job.steps}
        if self.template is not None:
            extra["template_name"] = self.template.name
        if confidence < 1.0 and self.job.reasons:
            extra["reasons"] = self.job.reasons[:MAX_REASONS]
        return {"confidence": confidence, **extra}


class LiveCutRunner(CutRunner):
    """The labels come with the ops (live_cut.LiveJobCut.settle hands them over); the
    confidence and reasons of each Step are those of the cut that settled it."""

    def __init__(self, last_step: int = -1, template: CompiledTemplate | None = None) -> None:
        self.template = template
        self.last_step = last_step
        self.begun = []
        self.names = []
        self._codes = {}
        self.warmup_steps = 0
        self.given: np.ndarray | None = None  # the labels of the ops being placed
        self._judged: dict[int, dict] = {}  # Step -> its recovery, until the Step closes
        self._latest: dict = {"method": "job", "confidence": 0.0}  # before any cut: nothing

    def give(
        self, steps: np.ndarray, confidence: float, reasons: list[str], method: str = "job"
    ) -> None:
        # no job_steps: while training runs, how many Steps the job will have is not known
        self.given = steps
        recovery: dict = {"method": method, "confidence": round(confidence, 4)}
        if self.template is not None:
            recovery["template_name"] = self.template.name
        if confidence < 1.0 and reasons:
            recovery["reasons"] = reasons[:MAX_REASONS]
        for step in np.unique(steps[(steps >= 0) & (steps != TAIL)]).tolist():
            self._judged.setdefault(step, recovery)
        self._latest = recovery

    def labels(self, batch: OpBatch) -> CutLabels:
        first, inverse = batch.shapes()
        roles = [self.code(self._role(batch, i)) for i in first.tolist()]
        role = np.array(roles, np.int32)[inverse] if len(first) else np.zeros(0, np.int32)
        steps = self.given if self.given is not None else np.full(len(batch), STARTUP, np.int64)
        return CutLabels(role, steps)

    def recoveries(self, indices: list[int]) -> list[Recovery]:
        out = []
        for i in indices:
            made = dict(self.recovery(i))
            out.append(recovery_of(made.pop("method"), None, None, **made))
        return out

    def recovery(self, step_index: int) -> dict:
        made = self._judged.pop(step_index, None)
        for old in [s for s in self._judged if s < step_index]:
            del self._judged[old]  # Steps skipped (lost) never close: forget them
        # a Step open across a restart was judged by a cut the checkpoint does not keep:
        # the latest cut's word stands for it
        return made if made is not None else self._latest
