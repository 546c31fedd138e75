"""Offline step recovery: a directory of inspector_logs in, step summaries per GPU out.

`recover_steps(logs_dir)` runs one GpuEngine per process found in the logs, over its ops in
file order, and returns the summaries and every problem met (bad lines, bad seals, missing
segments, bad template files), each naming its file. `write_summaries` puts each GPU's
records in `<out>/<stream>.jsonl`, written atomically, where the Agent's API and
`comminsight steps` read them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from comminsight.durable_files import write_atomically
from comminsight.semantic.engine import GpuEngine
from comminsight.semantic.log_input import GpuLog, read_gpu_logs
from comminsight.semantic.ops import EngineOp
from comminsight.semantic.step_builder import GpuIdentity
from comminsight.semantic.templates import TemplateSet, load_templates
from comminsight_gen.models.step_summary_v1 import StepSummary


@dataclass
class GpuResult:
    stream: str
    gpu: GpuIdentity
    summaries: list[StepSummary]
    ops: int
    method: str | None  # template name, "period", or None when no Step was found
    kept_ops: list[EngineOp] | None = None  # every op, when asked for (trace export)


@dataclass
class OfflineResult:
    gpus: list[GpuResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ops(self) -> int:
        return sum(g.ops for g in self.gpus)


def identity_of(log: GpuLog, fallback_rank: int) -> GpuIdentity:
    ident = log.identity
    if ident is None:
        return GpuIdentity(host="unknown", global_rank=fallback_rank)
    return GpuIdentity(
        host=ident.host,
        global_rank=ident.global_rank if ident.global_rank is not None else fallback_rank,
        pid=ident.pid,
        local_rank=ident.local_rank,
    )


def recover_gpu(
    log: GpuLog,
    templates: TemplateSet,
    index: int,
    on_ops: Callable[[int], None] | None = None,
    keep_ops: bool = False,
) -> GpuResult:
    kept: list[EngineOp] | None = [] if keep_ops else None
    ops = log.ops() if kept is None else _keeping(log.ops(), kept)
    first = next(ops, None)
    gpu = identity_of(log, index)  # the identity is known once the first line was read
    engine = GpuEngine(gpu, templates)
    summaries: list[StepSummary] = []
    count = 0
    if first is not None:
        summaries += engine.feed(first)
        count = 1
    for op in ops:
        summaries += engine.feed(op)
        count += 1
        if on_ops is not None and count % 4096 == 0:
            on_ops(4096)
    summaries += engine.finish()
    if on_ops is not None:
        on_ops(count % 4096)
    runner = engine.runner
    method = None
    if runner is not None:
        method = runner.template.name if runner.method == "template" else "period"
    return GpuResult(log.stream, gpu, summaries, count, method, kept)


def _keeping(ops, kept: list):
    for op in ops:
        kept.append(op)
        yield op


def recover_steps(
    logs_dir: str | Path,
    template_dirs: str = "",
    on_ops: Callable[[int], None] | None = None,
    templates: TemplateSet | None = None,
    keep_ops: bool = False,
) -> OfflineResult:
    """Steps of every GPU in `logs_dir`, with the built-in templates plus `template_dirs`
    (or exactly `templates` when given)."""
    if templates is None:
        templates = load_templates(template_dirs)
    logs, problems = read_gpu_logs(logs_dir)
    result = OfflineResult(problems=problems + templates.problems)
    for index, log in enumerate(logs):
        result.gpus.append(recover_gpu(log, templates, index, on_ops, keep_ops))
        result.problems += log.problems
    result.gpus.sort(key=lambda g: (g.gpu.host, g.gpu.global_rank, g.stream))
    return result


def write_summaries(result: OfflineResult, out_dir: str | Path) -> list[Path]:
    out_dir = Path(out_dir)
    written = []
    encoder = msgspec.json.Encoder()
    for g in result.gpus:
        path = out_dir / f"{g.stream}.jsonl"
        write_atomically(path, b"".join(encoder.encode(s) + b"\n" for s in g.summaries))
        written.append(path)
    return written
