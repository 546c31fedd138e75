"""Stack-capture metrics: every request the Agent's StackCapture answers is counted under the
one outcome it had, signals sent and answers awaited are counted beside them, and the
exposition an Agent serves carries all three with every outcome present from the start."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess

import pytest
from prometheus_client.core import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from stack_processes import (
    HOST,
    answer,
    ask,
    forge_announcement,
    ready_inject,
    stack_files,
    write_answer,
)
from waiting import wait_until, wait_until_async

from comminsight.agent.hangs import stack_capture
from comminsight.agent.hangs.stack_capture import OUTCOMES, StackCapture
from comminsight.agent.metrics.stacks import StackCaptureMetrics
from comminsight_gen.models.python_stack_v1 import StackStatus


def counted(capture: StackCapture) -> dict[str, int]:
    """The outcomes with a count (the others are zero)."""
    return {k: v for k, v in capture.outcomes.items() if v}


def exposition(capture: StackCapture) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StackCaptureMetrics(capture))
    return generate_latest(registry).decode()


def samples(text: str) -> dict[tuple, float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_capture_then_a_request_within_the_interval(tmp_path):
    p, home = ready_inject(tmp_path)
    with p:
        capture = StackCapture(home, interval_s=30, timeout_s=60)
        first = ask(capture, p.pid)
        second = ask(capture, p.pid)
    assert first.status is StackStatus.captured and second == first
    assert counted(capture) == {"captured": 1, "rate_limited": 1}
    assert (capture.signals_sent, capture.pending) == (1, 0)


def test_requests_sharing_a_pending_signal_are_rate_limited(tmp_path):
    p, home = ready_inject(tmp_path)
    with p:
        capture = StackCapture(home, interval_s=30, timeout_s=60)

        async def three():
            return await asyncio.gather(*(capture.request(HOST, p.pid, 1) for _ in range(3)))

        answers = asyncio.run(three())
    assert all(a.status is StackStatus.captured for a in answers)
    assert counted(capture) == {"captured": 1, "rate_limited": 2}
    assert capture.signals_sent == 1


def test_a_process_without_inject(tmp_path, no_inject):
    capture = StackCapture(tmp_path / "home", timeout_s=0.3)
    ask(capture, no_inject.pid)
    assert counted(capture) == {"unavailable_no_inject": 1}
    assert capture.signals_sent == 0


@pytest.mark.parametrize(
    "overrides",
    [
        {"stacks": "unavailable", "reason": "Inject disabled stacks (X=0)"},
        {"stack_dir": "/elsewhere"},
        {"host": "other-node"},
    ],
)
def test_an_announcement_that_forbids_the_signal_is_refused(tmp_path, no_inject, overrides):
    forge_announcement(tmp_path / "home", no_inject.pid, **overrides)
    capture = StackCapture(tmp_path / "home", timeout_s=0.3)
    ask(capture, no_inject.pid, host=overrides.get("host", HOST))
    assert counted(capture) == {"refused": 1}
    assert capture.signals_sent == 0


def test_a_recycled_or_ended_pid_is_process_gone(tmp_path, no_inject):
    recycled, ended = tmp_path / "recycled", tmp_path / "ended"
    ticks = stack_capture.start_ticks(no_inject.pid)
    forge_announcement(recycled, no_inject.pid, start_ticks=ticks + 1)
    forge_announcement(ended, no_inject.pid)  # its own start time, while it runs
    first = StackCapture(recycled, timeout_s=0.3)
    ask(first, no_inject.pid)
    no_inject.stop()
    second = StackCapture(ended, timeout_s=0.3)
    stack = ask(second, no_inject.pid)
    assert stack.reason == f"pid {no_inject.pid} has ended"
    assert counted(first) == counted(second) == {"process_gone": 1}
    assert first.signals_sent == second.signals_sent == 0


def test_a_process_that_never_answers_times_out(tmp_path, no_inject):
    forge_announcement(tmp_path / "home", no_inject.pid)
    capture = StackCapture(tmp_path / "home", timeout_s=0.2)
    ask(capture, no_inject.pid)
    assert counted(capture) == {"timeout": 1}
    assert (capture.signals_sent, capture.pending) == (1, 0)


def test_an_unusable_answer_is_an_error(tmp_path, no_inject):
    home = tmp_path / "home"
    forge_announcement(home, no_inject.pid)
    write_answer(home, no_inject.pid, b"{not json")
    capture = StackCapture(home, timeout_s=60)
    stack = ask(capture, no_inject.pid)
    assert "is not a python-stack v1 document" in stack.reason
    assert counted(capture) == {"error": 1}


def test_pending_counts_a_signal_until_its_answer_arrives(tmp_path, no_inject):
    home = tmp_path / "home"
    forge_announcement(home, no_inject.pid)
    capture = StackCapture(home, timeout_s=600)

    async def go():
        asking = asyncio.ensure_future(capture.request(HOST, no_inject.pid, 1))
        # the process got the signal; no answer yet
        await wait_until_async(no_inject.marker.exists, 60, "the signal")
        waiting = capture.pending
        text = exposition(capture)
        write_answer(home, no_inject.pid, json.dumps(answer(no_inject.pid)).encode())
        stack = await asking
        return waiting, text, stack

    waiting, text, stack = asyncio.run(go())
    assert waiting == 1
    assert samples(text)[("comminsight_stack_requests_pending", ())] == 1
    assert stack.status is StackStatus.captured
    assert capture.pending == 0 and counted(capture) == {"captured": 1}


def test_the_exposition_has_every_outcome_and_passes_promtool(tmp_path):
    p, home = ready_inject(tmp_path)
    with p:
        capture = StackCapture(home, interval_s=30, timeout_s=60)
        ask(capture, p.pid)
        wait_until(lambda: stack_files(home, p.pid), 60, "the dump")
    text = exposition(capture)
    got = samples(text)
    outcomes = {
        dict(labels)["outcome"]: value
        for (name, labels), value in got.items()
        if name == "comminsight_stack_requests_total"
    }
    assert outcomes == {o: (1.0 if o == "captured" else 0.0) for o in OUTCOMES}
    assert got[("comminsight_stack_signals_total", ())] == 1
    assert got[("comminsight_stack_requests_pending", ())] == 0
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is required (Debian's prometheus package)")
    check = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


# ---- the master's requests to its slaves ---------------------------------------------------


def master_request(requests, node: str, pid: int, reply: bytes | None, timeout_s: float = 60):
    """One request of the master to `node`; `reply` is the node's answer (None: none)."""

    async def body():
        asking = asyncio.ensure_future(requests.request(node, "h", pid, 0, timeout_s=timeout_s))
        if reply is not None:
            await wait_until_async(lambda: requests.open, 30, "the open request")
            requests.answer(node, next(iter(requests.open)), 1, reply)
        return await asking

    return asyncio.run(body())


def test_the_masters_requests_are_counted_by_outcome(monkeypatch):
    from comminsight.agent.master import stacks as master_stacks
    from comminsight.agent.master.stacks import StackRequests

    requests = StackRequests()
    master_request(requests, "node-b", 7, None)  # no stream: not connected
    requests.watch("node-a")
    good = master_request(requests, "node-a", 7, json.dumps(answer(7)).encode())
    assert good.status is StackStatus.captured
    master_request(requests, "node-a", 7, b"{not json")
    master_request(requests, "node-a", 7, json.dumps(answer(8)).encode())  # another pid
    late = master_request(requests, "node-a", 7, None, timeout_s=0.05)
    assert late.reason == "node node-a did not answer within 0.05 s"
    monkeypatch.setattr(master_stacks, "MAX_OPEN", 0)
    master_request(requests, "node-a", 7, None)
    assert requests.outcomes == {
        "answered": 1,
        "not_connected": 1,
        "busy": 1,
        "timeout": 1,
        "bad_answer": 2,
    }
    assert requests.open == {}
