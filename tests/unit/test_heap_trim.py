"""The C heap's free pages go back to the system after the engine's passes (heap_trim): glibc
keeps what the engine's big arrays free in its arenas, and without a trim the Agent's resident
size follows the highest peak it ever had rather than what it uses."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest
from engine_inputs import COMMS, GPU, TEMPLATES, ddp_slots
from waiting import wait_until

from comminsight.agent.core.heap_trim import HeapTrim, libc_malloc_trim
from comminsight.agent.steps.semantic_hook import SemanticEngineHook


class Calls:
    def __init__(self, error: Exception | None = None) -> None:
        self.args: list[int] = []
        self.error = error

    def __call__(self, pad: int) -> int:
        self.args.append(pad)
        if self.error is not None:
            raise self.error
        return 1


def test_it_trims_after_work_and_at_most_once_an_interval():
    calls = Calls()
    heap = HeapTrim(every_s=10.0, trim=calls)
    heap.worked()
    assert heap.maybe(100.0)
    assert calls.args == [0]  # pad 0: every free page, none kept at the top
    heap.worked()
    assert heap.due_at() == 110.0
    assert not heap.maybe(109.9)
    assert heap.maybe(110.0)
    assert heap.trims == 2 and len(calls.args) == 2


def test_with_no_work_since_the_last_trim_there_is_nothing_to_trim():
    calls = Calls()
    heap = HeapTrim(every_s=0.0, trim=calls)
    assert heap.due_at() == float("inf")
    assert not heap.maybe(1e9)
    heap.worked()
    assert heap.maybe(1.0)
    assert not heap.maybe(2.0)  # an idle engine is not trimmed over and over
    assert calls.args == [0]


def test_without_malloc_trim_in_the_c_library_it_never_trims():
    heap = HeapTrim(trim=None)
    heap.worked()
    assert not heap.available
    assert heap.due_at() == float("inf")
    assert not heap.maybe(1e9)
    assert heap.trims == 0


def test_a_trim_that_fails_turns_trimming_off_without_raising():
    calls = Calls(OSError("no"))
    heap = HeapTrim(every_s=0.0, trim=calls)
    heap.worked()
    assert not heap.maybe(1.0)
    heap.worked()
    assert not heap.maybe(2.0)
    assert len(calls.args) == 1 and not heap.available


def _rss_anon_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon")


@pytest.mark.skipif(libc_malloc_trim() is None, reason="the C library has no malloc_trim")
def test_glibc_keeps_freed_arena_pages_resident_until_a_trim_gives_them_back():
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    block = 64 << 10  # below glibc's smallest mmap threshold: always from an arena
    blocks = [libc.malloc(block) for _ in range(1024)]  # 64 MiB
    assert all(blocks)
    try:
        for b in blocks:
            ctypes.memset(b, 1, block)  # resident
        resident = _rss_anon_kib()
        # free 7 of every 8: the kept ones pin the arena, so free() gives back little
        for i, b in enumerate(blocks):
            if i % 8:
                libc.free(b)
        before = _rss_anon_kib()
        assert resident - before < 16 << 10  # KiB
        heap = HeapTrim(every_s=0.0)
        heap.worked()
        assert heap.maybe(0.0)
        given_back = before - _rss_anon_kib()
        assert given_back >= 32 << 10  # KiB: most of the 56 MiB freed
    finally:
        for i, b in enumerate(blocks):
            if i % 8 == 0:
                libc.free(b)


def test_the_engine_worker_trims_after_it_took_ops(tmp_path):
    calls = Calls()
    hook = SemanticEngineHook(
        tmp_path, TEMPLATES, checkpoint_s=3600, heap_trim=HeapTrim(every_s=0.0, trim=calls)
    )
    hook.live_cut.interval_s = 3600  # no cut falls due later without ops
    try:
        hook.feed(GPU, ddp_slots(20), COMMS)
        wait_until(lambda: calls.args and hook.idle(), 60, "the worker's pass")
        assert calls.args == [0]  # once: nothing was freed since
        assert hook.heap_trim.trims == 1
    finally:
        hook.stop()
