"""The calls' userProfilerTags as the Steps a framework names.

From NCCL 2.31 (profiler ABI v7) a call may carry a tag (`ncclCollConfig_t.userProfilerTag`),
which every event of the call reports and the Profiler records with the op. A framework that
tags each op with its training iteration names the Steps itself: a Step is the ops whose
calls carried one tag. Untagged ops (0) between two tags belong to the Step before them (what
a Step issues past its last tagged call, an untagged optimizer collective say); those before
the first tag are the start-up.

Tags are Step ids only where they read as such: most of the GPU's ops from its first tagged
one to its last tagged (the set-up before is untagged) carry one, the tags never going back
(an iteration counter), and at least MIN_TAGGED_STEPS of them. Tags that go back
(a layer or micro-batch id repeating in every iteration) name something else: the op cycle
decides, and the reason says so.
"""

from __future__ import annotations

import numpy as np

from comminsight.semantic.job_ops import GpuOps

MIN_TAGGED_STEPS = 3  # fewer distinct tags say nothing of a cycle
MIN_TAGGED_FRACTION = 0.5  # of the GPU's ops from its first tagged one to its last


def tag_step_starts(g: GpuOps) -> tuple[np.ndarray | None, str | None]:
    """(where each tagged Step begins, None), or (None, why the tags are no Step ids) where
    the GPU's ops carry tags that do not read as Step ids, or (None, None) where they carry
    none (or too few to say anything)."""
    tags = g.user_tag
    tagged = np.flatnonzero(tags)
    if len(tagged) == 0 or len(tagged) < MIN_TAGGED_FRACTION * (tagged[-1] - tagged[0] + 1):
        return None, None
    values = tags[tagged]
    steps = np.unique(values)
    if len(steps) < MIN_TAGGED_STEPS:
        return None, None
    back = np.flatnonzero(np.diff(values) < 0)
    if len(back):
        at = int(tagged[back[0] + 1])
        return None, (
            f"its calls' user tags go back (to {int(values[back[0] + 1])} after "
            f"{int(values[back[0]])}, at op {at}): they are no Step ids"
        )
    changes = tagged[1:][np.diff(values) != 0]
    return np.concatenate([tagged[:1], changes]).astype(np.int64), None
