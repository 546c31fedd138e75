"""The Agent's stack requests on real processes: the signal goes only to a process whose Inject
announced the handler (same host, same start time, this Agent's directory), at most once per
interval, and the answer is waited for within a bound and read within size limits."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import msgspec
import pytest
from stack_processes import (
    HOST,
    answer,
    ask,
    forge_announcement,
    line_of,
    ready_inject,
    stack_files,
    train_script,
    write_answer,
)
from waiting import wait_until, wait_until_async

from comminsight.agent.hangs import stack_capture
from comminsight.agent.hangs.stack_capture import StackCapture
from comminsight.agent.hangs.stack_format import describe
from comminsight_gen.config_v1 import ConfigV1
from comminsight_gen.models.python_stack_v1 import Frame, PythonStack, StackStatus, ThreadStack

# ---------------------------------------------------------------------------- the round trip


def test_request_captures_a_real_inject_process(tmp_path):
    p, home = ready_inject(tmp_path)
    with p:
        capture = StackCapture(home, interval_s=30, timeout_s=60)
        stack = ask(capture, p.pid, rank=None)
    assert stack.status is StackStatus.captured, stack.reason
    assert (stack.host, stack.pid, stack.rank, capture.signals_sent) == (HOST, p.pid, 1, 1)
    assert isinstance(stack.requested_real_ns, int)
    assert stack.requested_real_ns <= stack.captured_real_ns
    frame = stack.threads[0].frames[0]
    assert (frame.function, frame.line) == ("train_step", line_of(p.script, "SLEEP_LINE"))
    assert any(t.name == "data-loader" for t in stack.threads)


def test_a_second_request_within_the_interval_sends_no_second_signal(tmp_path):
    p, home = ready_inject(tmp_path)
    with p:
        capture = StackCapture(home, interval_s=30, timeout_s=60)
        first = ask(capture, p.pid)
        second = ask(capture, p.pid)
        assert capture.signals_sent == 1
        assert second == first
        assert [f.name for f in stack_files(home, p.pid)] == [f"{p.pid}-0.json"]
        # past the interval (moved back, not waited for) it signals again; the process
        # itself skips signals within a second of its last dump, so let that second pass
        key = next(iter(capture._asked))
        capture._asked[key].sent_mono_ns -= 31 * 10**9
        # the process's own limit has no signal to wait on but the clock
        wait_until(
            lambda: time.monotonic_ns() - first.captured_mono_ns > 1.5e9, 60, "a second to pass"
        )
        third = ask(capture, p.pid)
    assert capture.signals_sent == 2
    assert third.status is StackStatus.captured and third.seq == 1


def test_concurrent_requests_share_one_signal(tmp_path):
    p, home = ready_inject(tmp_path)
    with p:
        capture = StackCapture(home, interval_s=30, timeout_s=60)

        async def both():
            return await asyncio.gather(
                capture.request(HOST, p.pid, 1), capture.request(HOST, p.pid, 1)
            )

        a, b = asyncio.run(both())
    assert capture.signals_sent == 1
    assert a.status is StackStatus.captured and a == b


def test_a_late_answer_is_picked_up_without_a_new_signal(tmp_path):
    """The main thread cannot run the handler (the signal is blocked, as inside a long C
    call) until the test lets it: the request times out, and the next one within the interval
    finds the answer written since."""
    trigger = tmp_path / "unblock"
    script = (
        train_script()
        .replace(
            "stop = threading.Event()",  # before the helper thread starts: it inherits the mask
            "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})\nstop = threading.Event()",
        )
        .replace(  # the process is held until the trigger: its loop is no wait of the test
            "train_step()\n",
            f"while not os.path.exists({str(trigger)!r}):\n"
            "    time.sleep(0.01)\n"
            "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})\n"
            "train_step()\n",
        )
    )
    p, home = ready_inject(tmp_path, script)
    with p:
        capture = StackCapture(home, interval_s=30, timeout_s=0.3)
        first = ask(capture, p.pid)
        assert first.status is StackStatus.unavailable
        assert first.reason.startswith("timed out after 0.3 s: the process wrote no stacks")
        assert "not signalled again for" in first.reason
        trigger.touch()
        wait_until(lambda: stack_files(home, p.pid), 60, "the late stack file")
        second = ask(capture, p.pid)
    assert capture.signals_sent == 1
    assert second.status is StackStatus.captured
    # where it could answer: in signal.pthread_sigmask, called from the unblocking line
    assert "SIG_UNBLOCK" in second.threads[0].frames[1].code


# ---------------------------------------------------------------------------- never signalled


def test_a_process_without_inject_is_never_signalled(tmp_path, no_inject):
    capture = StackCapture(tmp_path / "home", timeout_s=0.3)
    stack = ask(capture, no_inject.pid)
    assert stack.status is StackStatus.unavailable
    assert stack.reason.startswith("Inject is not in this process")
    assert (capture.signals_sent, no_inject.marker.exists()) == (0, False)
    assert stack.rank == 1 and "Inject is not in this process" in describe(stack)
    os.kill(no_inject.pid, signal.SIGUSR2)  # the control: a signal it gets is recorded
    wait_until(no_inject.marker.exists, 60, "the control signal")


@pytest.mark.parametrize(
    "overrides, reason",
    [
        ({"start_ticks": -1}, "is now another process"),
        ({"stack_dir": "/elsewhere"}, "not to this Agent's"),
        ({"start_ticks": None}, "Inject announced no start time"),
        ({"stacks": "unavailable", "reason": "Inject disabled stacks (X=0)"}, "Inject disabled"),
    ],
)
def test_an_announcement_that_does_not_hold_sends_nothing(tmp_path, no_inject, overrides, reason):
    home = tmp_path / "home"
    if overrides.get("start_ticks") == -1:
        overrides["start_ticks"] = stack_capture.start_ticks(no_inject.pid) + 1
    forge_announcement(home, no_inject.pid, **overrides)
    if overrides.get("start_ticks", 0) is None:  # absent, as without /proc
        path = next((home / "metadata" / "inject").iterdir())
        line = json.loads(path.read_text())
        del line["start_ticks"]
        path.write_text(json.dumps(line) + "\n")
    capture = StackCapture(home, timeout_s=0.3)
    stack = ask(capture, no_inject.pid)
    assert stack.status is StackStatus.unavailable and reason in stack.reason
    assert (capture.signals_sent, no_inject.marker.exists()) == (0, False)


def test_another_hosts_process_is_never_signalled(tmp_path, no_inject):
    forge_announcement(tmp_path / "home", no_inject.pid, host="other-node")
    capture = StackCapture(tmp_path / "home", timeout_s=0.3)
    stack = ask(capture, no_inject.pid, host="other-node")
    assert stack.reason.startswith("the process runs on other-node")
    assert (capture.signals_sent, no_inject.marker.exists()) == (0, False)


def test_inject_that_turned_stacks_off_or_lost_the_signal_is_not_signalled(tmp_path):
    for env, reason in [
        ({"COMMINSIGHT_INJECT_STACKS": "0"}, "Inject disabled stacks"),
        ({"COMMINSIGHT_INJECT_STACK_SIGNAL": "SIGUSR1"}, None),
    ]:
        run_dir = tmp_path / str(len(env) + len(reason or ""))
        run_dir.mkdir()
        p, home = ready_inject(run_dir, **env)
        with p:
            capture = StackCapture(home, timeout_s=60)
            stack = ask(capture, p.pid)
        if reason is not None:
            assert stack.reason.startswith(reason) and capture.signals_sent == 0
        else:  # the announced signal is the one sent
            assert stack.status is StackStatus.captured and stack.signal == signal.SIGUSR1


def test_the_applications_handler_makes_stacks_unavailable(tmp_path):
    prelude = "signal.signal(signal.SIGUSR2, lambda s, f: None)"
    p, home = ready_inject(tmp_path, train_script(prelude))
    with p:
        capture = StackCapture(home, timeout_s=60)
        stack = ask(capture, p.pid)
    assert stack.reason.startswith("signal handler taken by the application")
    assert capture.signals_sent == 0


def test_an_ended_process_is_not_signalled(tmp_path):
    p, home = ready_inject(tmp_path)
    p.stop()
    capture = StackCapture(home, timeout_s=60)
    stack = ask(capture, p.pid)
    assert stack.reason == f"pid {p.pid} has ended" and capture.signals_sent == 0


# ---------------------------------------------------------------------------- bounds


def test_the_wait_is_bounded_when_the_process_does_not_answer(tmp_path, no_inject):
    """Announced but never answering (its own handler takes the signal): timed out."""
    forge_announcement(tmp_path / "home", no_inject.pid)
    capture = StackCapture(tmp_path / "home", timeout_s=0.2)
    stack = ask(capture, no_inject.pid)
    assert stack.status is StackStatus.unavailable
    assert stack.reason.startswith("timed out after 0.2 s")
    assert capture.signals_sent == 1
    wait_until(no_inject.marker.exists, 60, "the signal")


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda pid: b"x" * 10000, "over the 8192-byte limit of a stack file; not read"),
        (lambda pid: b"{not json", "is not a python-stack v1 document"),
        (
            lambda pid: json.dumps(answer(pid, threads=[{"name": "t"}])).encode(),
            "is not a python-stack v1 document",
        ),
        (lambda pid: json.dumps(answer(pid + 1)).encode(), "is not a capture of pid"),
        (
            lambda pid: json.dumps(
                answer(
                    pid,
                    threads=[
                        {"name": "t", "ident": 1, "main": True, "frames": [], "frames_omitted": 0}
                    ]
                    * 65,
                )
            ).encode(),
            "is not a python-stack v1 document",
        ),
    ],
)
def test_a_bad_answer_is_named_and_not_used(tmp_path, no_inject, make, reason):
    home = tmp_path / "home"
    forge_announcement(home, no_inject.pid)
    path = write_answer(home, no_inject.pid, make(no_inject.pid))
    capture = StackCapture(home, timeout_s=60, max_read_bytes=8192)
    stack = ask(capture, no_inject.pid)
    assert stack.status is StackStatus.unavailable
    assert str(path) in stack.reason and reason in stack.reason


def test_a_linked_answer_is_refused(tmp_path, no_inject):
    home = tmp_path / "home"
    forge_announcement(home, no_inject.pid)
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps(answer(no_inject.pid)))
    directory = home / "metadata" / "stacks"
    directory.mkdir(parents=True, mode=0o700)
    (directory / f"{no_inject.pid}-0.json").symlink_to(target)
    stack = ask(StackCapture(home, timeout_s=60), no_inject.pid)
    assert "symbolic link" in stack.reason


def test_a_good_answer_gets_the_rank_the_caller_knows(tmp_path, no_inject):
    home = tmp_path / "home"
    forge_announcement(home, no_inject.pid)
    write_answer(home, no_inject.pid, json.dumps(answer(no_inject.pid, rank=None)).encode())
    stack = ask(StackCapture(home, timeout_s=60), no_inject.pid, rank=5)
    assert stack.status is StackStatus.captured and stack.rank == 5


def test_remembered_processes_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(stack_capture, "MAX_TRACKED", 3)
    capture = StackCapture(tmp_path, interval_s=30)

    async def fill(pids, sent_mono_ns):
        for pid in pids:
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            capture._asked[(pid, 0)] = stack_capture._Asked(sent_mono_ns + pid, 0, done)
            capture._forget_old()

    asyncio.run(fill(range(10), time.monotonic_ns()))  # all within their interval
    assert sorted(capture._asked) == [(7, 0), (8, 0), (9, 0)]  # the oldest went first
    asyncio.run(fill([10], time.monotonic_ns() - 60 * 10**9))  # one long past its interval
    assert sorted(capture._asked) == [(7, 0), (8, 0), (9, 0)]


def test_prune_removes_files_of_ended_processes(tmp_path, no_inject):
    ended = write_answer(tmp_path, 2**22 + 7, b"{}")  # above the kernel's pid_max default
    alive = write_answer(tmp_path, no_inject.pid, b"{}")
    assert StackCapture(tmp_path).prune() == 1
    assert not ended.exists() and alive.exists()


def test_settings_give_the_interval_and_timeout(tmp_path):
    settings = ConfigV1(home=str(tmp_path), agent_stack_interval_s=7.0, agent_stack_timeout_s=0.5)
    capture = StackCapture.from_settings(settings)
    assert (capture.interval_ns, capture.timeout_s) == (7 * 10**9, 0.5)


# ---------------------------------------------------------------------------- the display line


def stack_of(*frames: tuple[str, int, str, str], rank=1) -> PythonStack:
    return PythonStack(
        schema="comminsight.python-stack.v1",
        status=StackStatus.captured,
        host="node-a",
        pid=42,
        rank=rank,
        threads=[
            ThreadStack(
                name="MainThread",
                ident=1,
                main=True,
                frames=[Frame(file=f, line=n, function=fn, code=c) for f, n, fn, c in frames],
                frames_omitted=0,
            )
        ],
    )


def test_describe_names_the_innermost_user_frame():
    torch_frame = ("/x/lib/python3.11/site-packages/torch/nn/module.py", 9, "forward", "y()")
    inject_frame = ("/x/site/comminsight_inject/stack_dump.py", 3, "dump", "z()")
    user = ("/home/u/train.py", 76, "main", "time.sleep(30)")
    stack = stack_of(inject_frame, torch_frame, user)
    assert describe(stack) == "rank 1 (node-a, pid 42) at train.py:76 in main: time.sleep(30)"


def test_describe_falls_back_to_the_innermost_frame_and_cuts_long_code():
    code = "f(" + "a" * 200 + ")"
    stack = stack_of(("<frozen runpy>", 1, "run", code), rank=None)
    text = describe(stack)
    assert text.startswith("process (node-a, pid 42) at <frozen runpy>:1 in run: f(aaa")
    assert text.endswith("…") and len(text) < 160


# ---------------------------------------------------------------------------- over gRPC

MASTER_TOKEN = "stack-token"


async def with_master_and_slave(tmp_path: Path, answer_stacks, body):
    """A real master gRPC server and a real slave link to it on 127.0.0.1; runs
    body(server) once the slave's stack request stream is open."""
    from comminsight.agent.master.grpc_service import AgentMasterServer
    from comminsight.agent.master.store import MasterStore
    from comminsight.agent.slave.link import SlaveLink
    from comminsight.agent.slave.outbox import SlaveOutbox
    from comminsight.agent.slave.tls import SlaveTls
    from comminsight_gen.agent_master_slave.v1 import agent_master_slave_pb2 as pb

    server = AgentMasterServer(
        nodes={},
        store=MasterStore(tmp_path / "master"),
        token=MASTER_TOKEN,
        max_batch_bytes=1 << 20,
        stale_ms=60_000,
        on_events=lambda node, events: None,
    )
    grpc_server, port = await server.start("127.0.0.1:0")
    outbox = SlaveOutbox(tmp_path / "slave", 1 << 20)
    outbox.load()
    link = SlaveLink(
        master_addr=f"127.0.0.1:{port}",
        token=MASTER_TOKEN,
        tls=SlaveTls(),
        outbox=outbox,
        identity=pb.NodeIdentity(node_name="node-a", host=HOST),
        inventory=lambda: ([], []),
        max_batch_bytes=1 << 20,
        heartbeat_s=5,
        answer_stacks=answer_stacks,
    )
    stop = asyncio.Event()
    running = asyncio.ensure_future(link.run(stop))
    try:
        await wait_until_async(
            lambda: "node-a" in server.stacks.streams,
            60,
            lambda: f"the slave's stack request stream (last error: {link.last_error})",
        )
        return await body(server)
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
        await grpc_server.stop(None)


def test_the_master_gets_a_culprits_stack_from_its_node(tmp_path):
    p, home = ready_inject(tmp_path)
    with p:
        capture = StackCapture(home, timeout_s=60)

        async def answer(request):
            rank = request.global_rank if request.HasField("global_rank") else None
            return msgspec.json.encode(await capture.request(HOST, request.pid, rank))

        async def ask_twice(server):
            first = await server.request_stacks("node-a", p.pid, 1, timeout_s=120)
            second = await server.request_stacks("node-a", p.pid, 1, timeout_s=120)
            return first, second

        first, second = asyncio.run(with_master_and_slave(tmp_path, answer, ask_twice))
    assert first.status is StackStatus.captured, first.reason
    assert (first.host, first.pid, first.rank) == (HOST, p.pid, 1)
    assert first.threads[0].frames[0].function == "train_step"
    assert second == first and capture.signals_sent == 1  # the node's rate limit holds


def test_the_masters_request_names_the_process_by_pid_and_namespace(tmp_path):
    """Over the real link: the slave learns which pod's process of the pid is meant."""
    asked = []

    async def record(request):
        asked.append((request.pid, request.pid_namespace))
        return msgspec.json.encode(answer(request.pid))

    async def body(server):
        return await server.request_stacks("node-a", 7, 1, 60, pid_namespace=4026532999)

    stack = asyncio.run(with_master_and_slave(tmp_path, record, body))
    assert stack.status is StackStatus.captured and asked == [(7, 4026532999)]


def test_the_masters_wait_is_bounded_and_names_the_node(tmp_path):
    never = asyncio.Event()

    async def silent(request):
        await never.wait()
        return b""

    async def body(server):
        return await server.request_stacks("node-a", 4242, 3, timeout_s=0.3)

    stack = asyncio.run(with_master_and_slave(tmp_path, silent, body))
    assert stack.status is StackStatus.unavailable and stack.rank == 3
    assert stack.reason == "node node-a did not answer within 0.3 s"


def test_a_garbled_answer_is_named_not_raised(tmp_path):
    async def garbled(request):
        return b"{not json"

    async def body(server):
        return await server.request_stacks("node-a", 4242, None, timeout_s=60)

    stack = asyncio.run(with_master_and_slave(tmp_path, garbled, body))
    assert stack.reason.startswith("node node-a answered badly: not a python-stack v1 document")


def test_a_node_without_a_stream_is_unavailable_at_once(tmp_path):
    from comminsight.agent.master.stacks import StackRequests

    requests = StackRequests()
    stack = asyncio.run(requests.request("node-b", "host-b", 7, 0, timeout_s=60))
    assert stack.reason == "node node-b has no stack request stream (not connected)"


def test_an_answer_from_another_node_or_unknown_request_is_dropped():
    from comminsight.agent.master.stacks import StackRequests

    requests = StackRequests()

    async def body():
        requests.watch("node-a")
        asking = asyncio.ensure_future(requests.request("node-a", "h", 7, 0, timeout_s=60))
        await wait_until_async(lambda: requests.open, 30, "the open request")
        request_id = next(iter(requests.open))
        assert not requests.answer("node-b", request_id, 1, b"{}")  # not the node asked
        assert not requests.answer("node-a", request_id + 1, 1, b"{}")  # no such request
        good = answer(7)
        assert requests.answer("node-a", request_id, 1, json.dumps(good).encode())
        return await asking

    stack = asyncio.run(body())
    assert stack.status is StackStatus.captured and requests.answers_dropped == 2
    assert requests.open == {}


# ---------------------------------------------------------------------------- into an incident


def incident_stack_schema() -> dict:
    from stack_processes import ROOT

    full = json.loads((ROOT / "protocols/hang-report/v1/hang-report.schema.json").read_text())
    return {"$ref": "#/$defs/IncidentStack", "$defs": full["$defs"]}


def test_a_capture_becomes_the_incidents_stacks_one_per_thread(tmp_path):
    import jsonschema

    from comminsight.agent.hangs.stack_incident import incident_stacks

    p, home = ready_inject(tmp_path)
    with p:
        stack = ask(StackCapture(home, timeout_s=60), p.pid)
    entries = incident_stacks(stack, "node-a", rank=9)
    assert [e.thread_name for e in entries][0] == "MainThread"
    assert "data-loader" in [e.thread_name for e in entries]
    main = entries[0]
    assert (main.rank, main.node_name, main.pid, main.status.value) == (
        1,
        "node-a",
        p.pid,
        "captured",
    )
    assert main.frames[0].function == "train_step" and main.frames[0].line == line_of(
        p.script, "SLEEP_LINE"
    )
    for entry in entries:
        jsonschema.validate(msgspec.to_builtins(entry), incident_stack_schema())


def test_an_unavailable_capture_becomes_one_entry_with_the_reason(tmp_path, no_inject):
    import jsonschema

    from comminsight.agent.hangs.stack_incident import incident_stacks

    stack = ask(StackCapture(tmp_path, timeout_s=60), no_inject.pid, rank=None)
    (entry,) = incident_stacks(stack, "node-a", rank=4)
    assert (entry.rank, entry.status.value, entry.frames) == (4, "unavailable", [])
    assert entry.unavailable_reason.startswith("Inject is not in this process")
    jsonschema.validate(msgspec.to_builtins(entry), incident_stack_schema())
