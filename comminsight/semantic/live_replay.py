"""Logs replayed the way the Agent's live engine meets the ops: every GPU's ops in small
chunks, GPU after GPU in turns (so that each cut sees some GPUs further along than others),
through one GpuEngine per GPU and the node's LiveJobCut; each GPU's process ends when its
ops do. What comes out is what the live Agent would have written, as an OfflineResult, so
that the accuracy suite can score live Steps as it scores offline ones.
"""

from __future__ import annotations

from pathlib import Path

from comminsight.semantic.cut_runner import LiveCutRunner
from comminsight.semantic.engine import GpuEngine
from comminsight.semantic.live_cut import LiveJobCut
from comminsight.semantic.log_input import read_gpu_logs
from comminsight.semantic.offline import GpuResult, OfflineResult, identity_of, role_template
from comminsight.semantic.step_markers import markers_dir, read_markers
from comminsight.semantic.templates import TemplateSet, load_templates
from comminsight_gen.models.semantic_engine_v1 import ProducerMode


def replay_live(
    directory: str | Path,
    chunk: int = 97,
    templates: TemplateSet | None = None,
    live_cut: LiveJobCut | None = None,
    markers: bool = True,
) -> OfflineResult:
    templates = templates if templates is not None else load_templates()
    logs, problems = read_gpu_logs(directory)
    cut = live_cut if live_cut is not None else LiveJobCut()
    marked, marker_problems = read_markers(markers_dir(directory)) if markers else ({}, [])
    problems += marker_problems
    process_of = {log.stream: identity_of(log, i) for i, log in enumerate(logs)}
    if marked:
        cut.markers_of = lambda key: marked.get((process_of[key].host, process_of[key].pid))
    cut.role_template = lambda batches: role_template(templates, batches)
    engines, pending, out = {}, {}, {}
    for index, log in enumerate(logs):
        ident = identity_of(log, index)
        engine = GpuEngine(ident, templates, mode=ProducerMode.live)
        engine.runner = LiveCutRunner()
        engines[log.stream] = engine
        ops = [b for b in log.batches() if len(b)]
        pending[log.stream] = [
            b.take(slice(i, i + chunk)) for b in ops for i in range(0, len(b), chunk)
        ]
        out[log.stream] = []
        cut.track(log.stream, engine, ident.global_rank)
    clock = 0.0  # the cut's own clock: one tick per turn, so cuts do not depend on speed
    while any(pending.values()):
        for stream, parts in pending.items():
            if not parts:
                continue
            engine = engines[stream]
            out[stream] += engine.feed(parts.pop(0))
            cut.held_ops(stream)
            clock += 1e-3
            if cut.due(clock):
                for s, summaries in cut.cut(clock).items():
                    out[s] += summaries
            if not parts:  # its process ended
                out[stream] += engine.drain()
                cut.end(stream, clock)
            ended = cut.ended(clock)
            if ended:
                for s, summaries in cut.cut(clock, final=frozenset(ended)).items():
                    out[s] += summaries
                for s in ended:
                    cut.forget(s)
                    out[s] += engines[s].finish()
    gpus = [GpuResult(s, engines[s].gpu, out[s], engines[s].arrivals, "job") for s in engines]
    return OfflineResult(gpus, problems)
