"""A python-stack capture as an incident carries it: hang-report v1 `IncidentStack` entries,
one per thread (the main thread first), or one entry saying why there is none.

The capture (protocols/python-stack) is what Inject writes and what travels from a slave to
the master; the incident's own shape (protocols/hang-report, IncidentStack) is flatter, so
the incident store takes `incident_stacks(capture, node_name, rank)` and never reads a
capture's fields itself.
"""

from __future__ import annotations

import re

from comminsight_gen.models.hang_report_v1 import (
    IncidentStack,
    IncidentStackFrame,
    IncidentStackStatus,
)
from comminsight_gen.models.python_stack_v1 import PythonStack, StackStatus

NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
MAX_ENTRIES = 256  # the incident's bound on stacks


def incident_stacks(stack: PythonStack, node_name: str, rank: int) -> list[IncidentStack]:
    """`rank` is the rank the verdict names; the capture's own (from RANK) wins when present."""
    common = {
        "rank": stack.rank if isinstance(stack.rank, int) else rank,
        "host": stack.host,
        "pid": stack.pid,
    }
    if NODE_NAME.match(node_name):
        common["node_name"] = node_name
    threads = stack.threads if isinstance(stack.threads, list) else []
    if stack.status is not StackStatus.captured or not threads:
        reason = stack.reason if isinstance(stack.reason, str) and stack.reason else "no threads"
        return [
            IncidentStack(
                status=IncidentStackStatus.unavailable,
                frames=[],
                unavailable_reason=reason[:1024],
                **common,
            )
        ]
    entries = []
    for thread in threads[:MAX_ENTRIES]:
        frames = [
            IncidentStackFrame(
                file=f.file or "<unknown>",
                function=f.function or "<unknown>",
                **({"line": f.line} if isinstance(f.line, int) else {}),
                **({"code": f.code} if f.code else {}),
            )
            for f in thread.frames
        ]
        entries.append(
            IncidentStack(
                status=IncidentStackStatus.captured,
                captured_at_real_ns=stack.captured_real_ns,
                thread_id=thread.ident,
                thread_name=thread.name,
                frames=frames,
                **common,
            )
        )
    return entries
