"""How much idle time the ends of NVIDIA Inspector's op lines can show.

Without its verbose event trace, NVIDIA Inspector gives an op no time of its own: its line
says when a dump thread wrote it (`dump_timestamp_us`). The thread wakes every interval and
writes what completed since, so the ends of one dump are microseconds apart whatever the GPU
did, and the step from one dump to the next is the interval (stretched when the machine is
busy), wherever in the op stream it falls. Taken as idle time, that step looks like a long
idle gap before whichever op a dump happened to begin with: a regular dump interval beats
with the Steps and shows "the few longest gaps" at the same op every few Steps (Steps 1-5
taken for one). Only what lies beyond a couple of dump intervals is idle time the log proves.

Such ends are told apart from measured ones by the ops themselves: an op that ends sooner
after the op before it than it took to run was started before that one ended, which a
GPU's ops seldom do and a dump's ops nearly all do.
"""

from __future__ import annotations

import numpy as np

# the lines of one dump are written closer together than this (a line takes microseconds)
WRITE_SPREAD_NS = 20_000
# ends are dump times when at least this share of ops seem to start before the one before ended
DUMPED_SHARE = 0.5
# steps from one end to the next this many times longer than the next shorter ones are steps
# between dumps, the shorter ones a dump's own (its writer kept from the CPU for a moment)
BETWEEN_DUMPS = 4.0
# idle time shorter than this many dump intervals may be the dump thread's alone (one interval
# from where it falls between two dumps, another from a wake-up that came late)
DUMP_INTERVALS = 2.0


def dump_resolution(start: np.ndarray, end: np.ndarray) -> int:
    """The idle time (ns) the ends cannot tell from none: 0 where they are measured ends
    (CommInsight's, or NVIDIA's verbose stop times), else DUMP_INTERVALS times the typical
    step from one dump to the next, or all of their span where they show no such step (one
    dump). `start` and `end` are in the GPU's op order, `start` being an end less the op's
    own duration."""
    n = len(end)
    if n < 3:
        return 0
    duration = end - start
    after_previous = end[1:] - end[:-1]
    overlapped = after_previous < duration[1:] // 2
    if float(np.mean(overlapped)) < DUMPED_SHARE:
        return 0
    # a dump begins with an op that does not overlap the one before; so does a small op
    # written a little after the one before in the same dump
    steps = np.sort(after_previous[~overlapped])
    steps = steps[steps > WRITE_SPREAD_NS]
    if not len(steps):
        return int(end.max() - end.min()) + 1
    if len(steps) > 1:
        ratios = steps[1:] / steps[:-1]
        split = int(np.argmax(ratios))
        if ratios[split] >= BETWEEN_DUMPS:
            steps = steps[split + 1 :]
    return int(DUMP_INTERVALS * float(np.median(steps)))


def idle_before(start: np.ndarray, end: np.ndarray, ends_are_dumps: bool) -> np.ndarray:
    """For each op, how long the GPU ran none of the process's ops before it started; where
    the ends are only dump times, less what the dump interval explains."""
    gaps = np.zeros(len(start), np.int64)
    if len(start) > 1:
        busy_until = np.maximum.accumulate(end)[:-1]
        gaps[1:] = np.maximum(0, start[1:] - busy_until)
        if ends_are_dumps:
            gaps = np.maximum(0, gaps - dump_resolution(start, end))
    return gaps
