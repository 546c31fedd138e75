"""GET /api/v1/job-steps: the job's reconciled Steps (job_steps) over the recent window of
step summaries (steps.window), as agent-master-api v1 JobStepPage.

The window is refreshed at each request (only bytes appended since are read) and a job is
reconciled again only when a record arrived since its last answer, so a request costs the
window's size, never the run's history. Requests come from worker threads (the API runs its
file work off the event loop): one lock keeps the window consistent.
"""

from __future__ import annotations

import threading
from pathlib import Path

from comminsight.agent.steps.job_steps import GpuKey, Reconciliation, SpanClaim, reconcile
from comminsight.agent.steps.window import StepWindow
from comminsight_gen.models import agent_master_api_v1 as api

MAX_JOBS_LISTED = 64


class UnknownJob(LookupError):
    def __init__(self, job: str, known: list[str | None]) -> None:
        listed = ", ".join(repr(j) if j is not None else "(no job_id)" for j in known[:8])
        super().__init__(
            f"no step summaries of job {job!r} in the recent window"
            + (f"; jobs known: {listed}" if known else "; no step summaries yet")
        )


def _gpu_ref(g: GpuKey) -> api.GpuRef:
    return api.GpuRef(node_name=g.node, global_rank=g.global_rank, pid=g.pid)


def _claim(c: SpanClaim) -> api.SeqSpanClaim:
    return api.SeqSpanClaim(
        gpu=_gpu_ref(c.gpu),
        local_step_index=c.local_index,
        first_seq=c.first_seq,
        last_seq=c.last_seq,
    )


class JobStepsView:
    def __init__(self, directories: list[Path], **window_kwargs) -> None:
        self.window = StepWindow(directories, **window_kwargs)
        self._lock = threading.Lock()
        self._cache: dict[str | None, tuple[tuple, Reconciliation]] = {}

    def page(
        self,
        *,
        job: str | None,
        since_step: int,
        cursor: str | None,
        limit: int,
        job_nodes: dict[str | None, frozenset[str]] | None = None,
    ) -> api.JobStepPage:
        """UnknownJob when `job` has no summaries in the window; `job_nodes`: the nodes known
        to run each job's processes (a master's), those without a Step named silent."""
        with self._lock:
            self.window.refresh()
            jobs = self._jobs()
            if job is None:
                chosen = jobs[0].job_id if jobs else None
            elif job in self.window.jobs:
                chosen = job
            else:
                raise UnknownJob(job, [j.job_id for j in jobs])
            expected = (job_nodes or {}).get(chosen, frozenset())
            result = self._reconciled(chosen, expected)
            return self._page(chosen, jobs, result, since_step, cursor, limit)

    def _jobs(self) -> list[api.JobRef]:
        refs = [
            api.JobRef(
                job_id=job_id,
                nodes=len({g.node for g in w.gpus}),
                gpus=len(w.gpus),
                latest_end_real_ns=max(w.latest_end.values(), default=0),
            )
            for job_id, w in self.window.jobs.items()
            if w.gpus
        ]
        refs.sort(key=lambda r: (-r.latest_end_real_ns, r.job_id or ""))
        return refs

    def _reconciled(self, job: str | None, expected: frozenset[str]) -> Reconciliation | None:
        w = self.window.jobs.get(job)
        if w is None:
            return None
        version = (self.window.version, expected)
        cached = self._cache.get(job)
        if cached is not None and cached[0] == version:
            return cached[1]
        result = reconcile(self.window.window(w), expected)
        self._cache[job] = (version, result)
        return result

    def _page(self, job, jobs, result, since_step, cursor, limit) -> api.JobStepPage:
        nodes, steps, disagreements, total_disagreements = [], [], [], 0
        if result is not None:
            nodes = [
                api.JobStepNode(
                    node_name=n.node,
                    state=api.JobStepNodeState(n.state),
                    offset=n.offset,
                    gpus=n.gpus,
                    first_local_step=n.first_local,
                    last_local_step=n.last_local,
                    linked_through=n.linked_through,
                    votes=n.votes,
                )
                for n in result.nodes
            ]
            after = int(cursor) if cursor is not None else -1
            matched = [s for s in result.steps if s.index >= since_step]
            steps = [s for s in matched if s.index > after]
            disagreements = [
                api.StepDisagreement(
                    kind=api.DisagreementKind(d.kind),
                    description=d.description[:2048],
                    nodes=d.nodes,
                    comm_id=d.comm_id,
                    job_step_index=d.job_step,
                    spans=[_claim(c) for c in d.spans],
                )
                for d in result.disagreements
            ]
            total_disagreements = result.disagreements_total
        else:
            matched = []
        page = steps[:limit]
        return api.JobStepPage(
            job_id=job,
            jobs=jobs[:MAX_JOBS_LISTED],
            nodes=nodes,
            items=[
                api.JobStep(
                    job_step_index=s.index,
                    start_real_ns=s.start_real_ns,
                    end_real_ns=s.end_real_ns,
                    gpus=[
                        api.JobStepGpu(
                            node_name=g.node,
                            global_rank=g.global_rank,
                            pid=g.pid,
                            local_step_index=r.index,
                            start_real_ns=r.start_real_ns,
                            end_real_ns=r.end_real_ns,
                        )
                        for g, r in s.records
                    ],
                    missing=[_gpu_ref(g) for g in s.missing],
                )
                for s in page
            ],
            total=len(matched),
            next_cursor=str(page[-1].index) if len(steps) > len(page) else None,
            disagreements=disagreements,
            disagreements_total=total_disagreements,
            window_steps_per_gpu=self.window.steps_per_gpu,
            invalid_lines=self.window.invalid_lines,
        )
