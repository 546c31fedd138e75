"""What the calls' user tags say of a GPU's Steps (step_tags.tag_step_starts)."""

from __future__ import annotations

import numpy as np

from comminsight.semantic.job_ops import GpuOps
from comminsight.semantic.step_tags import tag_step_starts


def gpu(tags: list[int]) -> GpuOps:
    n = len(tags)
    z = np.zeros(n, np.int64)
    t = np.arange(n, dtype=np.int64) * 1000
    return GpuOps(
        "s", 0, z, z, z, z, z, np.arange(n), z + 8, t, t + 10, t, z, z,
        np.ones(n, bool), np.arange(n), user_tag=np.array(tags, np.int64),
    )  # fmt: skip


def test_steps_begin_where_the_tag_changes_and_untagged_ops_stay_with_the_step_before():
    # set-up untagged, then Steps 1..3; an untagged op (the optimizer's) inside Step 2
    starts, why = tag_step_starts(gpu([0, 0, 1, 1, 1, 2, 2, 0, 3, 3, 3]))
    assert why is None
    assert starts.tolist() == [2, 5, 8]


def test_tags_that_go_back_are_no_step_ids_and_say_why():
    starts, why = tag_step_starts(gpu([1, 2, 3, 1, 2, 3, 1, 2, 3]))  # a layer id, say
    assert starts is None
    assert "go back (to 1 after 3, at op 3)" in why


def test_no_tags_too_few_steps_or_too_few_tagged_ops_say_nothing():
    assert tag_step_starts(gpu([0] * 8)) == (None, None)
    assert tag_step_starts(gpu([1, 1, 2, 2, 2, 2])) == (None, None)  # two Steps: no cycle
    assert tag_step_starts(gpu([1, 0, 0, 0, 2, 0, 0, 0, 3])) == (None, None)  # a third tagged
