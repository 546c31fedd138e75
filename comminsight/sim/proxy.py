"""The GPU and proxy side of one process's simulated NCCL, on its own thread.

NCCL's proxy progress thread, not the thread that called ncclAllReduce, reports the GPU: it
polls the kernel's per-channel counters and starts a KernelCh event for every channel as the
kernel reaches it (pTimer = the GPU globaltimer at that moment), then, as channels finish,
records KernelChStop with the end tick and stops each one (src/transport/profiler.cc). This
thread does the same against a model of the GPU:

- one timeline per process: a kernel starts when it was launched and the previous kernel has
  finished; each op in it (one, or every op of an NCCL group, side by side) finishes when every
  participant has reached it (their arrivals, read from the rendezvous board) plus the op's
  modeled duration, and the kernel when its last op has;
- an op some participant never joins, or joined with other arguments, never finishes: its
  channels stay started until the run is aborted, and every later op waits behind it;
- across nodes it also reports the network proxy: per channel a send and a receive ProxyOp
  (parent: the Coll/P2p) and their ProxySteps with NCCL's state sequence, when the op's mask
  asks. As in NCCL, the proxy takes an op when it is launched, not when its kernel runs
  (ncclProxyStart at launch, ProxyAppend then starts the ProxyOp and posts the first steps:
  send buffers offered to the GPU, receives posted): so the proxy ops of a launch queued
  behind a stuck kernel exist and wait at their first step (src/proxy.cc, src/transport/net.cc).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque

from comminsight.sim.abi import ProfilerAbi
from comminsight.sim.board import Board, RunAborted, monotonic_shift_ns
from comminsight.sim.event_gate import starts
from comminsight.sim.truth import GroundTruthWriter
from comminsight_gen.abi.nccl_profiler_v5 import EventState, EventType

LAUNCH_LATENCY_NS = 5_000
CHANNEL_SKEW_NS = 150  # channels of one kernel start and end a little apart
PROXY_CHUNK_BYTES = 512 * 1024
MAX_PROXY_STEPS = 4  # per ProxyOp; real transfers have more, the sim keeps the volume bounded
POLL_MIN_S, POLL_MAX_S = 0.0002, 0.005
SLEEP_SLICE_S = 0.05


class ProxyThread(threading.Thread):
    def __init__(
        self,
        abi: ProfilerAbi,
        board: Board,
        rank: int,
        truth: GroundTruthWriter,
        time_scale: float,
        gpu_tick_offset_ns: int,
    ):
        super().__init__(name=f"sim-proxy-{rank}", daemon=True)
        self.abi, self.board, self.rank, self.truth = abi, board, rank, truth
        self.scale, self.tick_offset = time_scale, gpu_tick_offset_ns
        self._queue: deque = deque()
        self._posts: deque[_NetworkProxy] = deque()  # launched, not yet taken by the proxy
        self._network: dict[int, _NetworkProxy] = {}  # id(issued) -> its network proxy work
        self._cond = threading.Condition()
        self._current = None
        self._stopping = False
        self.error: BaseException | None = None
        self.prev_end_ns = 0
        self.completed = 0
        # ranks meet on the board on the shared clock: each may run in a time namespace of its
        # own, where CLOCK_MONOTONIC (the clock of every other time here) is shifted
        self.to_shared_ns = -monotonic_shift_ns()

    # ---- the calling thread's side ----

    def submit(self, launch: list) -> None:
        """One kernel launch: the ops of one NCCL group (a lone op is a group of one)."""
        networks = []
        for issued in launch:
            if self._uses_network(issued):
                self._network[id(issued)] = network = _NetworkProxy(self.abi, issued)
                networks.append(network)
        with self._cond:
            self._queue.append(list(launch))
            self._posts.extend(networks)
            self._cond.notify_all()

    def wait_idle(self) -> None:
        """Block until the GPU has finished everything submitted (a host synchronization)."""
        with self._cond:
            while self._queue or self._current is not None:
                self._raise_if_failed()
                if self.board.aborted:
                    raise RunAborted()
                self._cond.wait(0.05)
            self._raise_if_failed()

    def shutdown(self) -> list:
        """Stop, leaving started events open as an aborted NCCL does; return unfinished ops."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self.is_alive():
            self.join()
        launches = ([self._current] if self._current is not None else []) + list(self._queue)
        return [
            issued for launch in launches for issued in launch if not issued.record["completed"]
        ]

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            raise RuntimeError("the proxy thread failed") from self.error

    # ---- the proxy thread ----

    def run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._stopping:
                        self._cond.wait()
                    if self._stopping:
                        return
                    self._current = self._queue.popleft()
                self._post_launched()
                self._execute(self._current)
                with self._cond:
                    self._current = None
                    self._cond.notify_all()
        except RunAborted:
            return
        except BaseException as e:  # reported to the calling thread at its next sync
            self.error = e
            with self._cond:
                self._cond.notify_all()

    def _post_launched(self) -> None:
        """The proxy's side of every launch so far: its ops started, first steps posted."""
        with self._cond:
            posts = list(self._posts)
            self._posts.clear()
        for network in posts:
            network.post()

    def _execute(self, launch: list) -> None:
        """One kernel launch: a lone op, or every op of an NCCL group, which run side by side
        (each finishes once its own participants have arrived, so a group's sends and receives
        between the same two ranks meet)."""
        first = launch[0]
        gpu_start = max(first.launch_ns + int(LAUNCH_LATENCY_NS * self.scale), self.prev_end_ns)
        runs = [_KernelOp(self, issued, gpu_start) for issued in launch]
        for run in runs:
            run.arrive()
        self._sleep_until(gpu_start)
        for run in runs:
            run.start_channels()
        self.prev_end_ns = self._finish(runs)

    def _finish(self, runs: list[_KernelOp]) -> int:
        """Complete each op of a launch as its participants arrive and its time comes; returns
        when the last one is done, with its end."""
        waiting, due, last_end = list(runs), [], 0
        pause = POLL_MIN_S
        while waiting or due:
            arrived = [run for run in waiting if run.resolve_end()]
            if arrived:
                waiting = [run for run in waiting if run not in arrived]
                due = sorted(due + arrived, key=lambda run: run.end)
                pause = POLL_MIN_S
            now = time.monotonic_ns()
            while due and due[0].end <= now:
                run = due.pop(0)
                run.complete()
                last_end = max(last_end, run.end)
            if not waiting:
                if due:
                    self._sleep_until(due[0].end)
                continue
            if self.board.aborted or self._stopping:
                raise RunAborted()
            self._post_launched()  # later launches reach the proxy while this one runs
            wait_s = pause if not due else min(pause, max(0, due[0].end - now) / 1e9)
            time.sleep(wait_s)
            pause = min(pause * 2, POLL_MAX_S)
        return last_end

    def _uses_network(self, issued) -> bool:
        return (
            issued.comm.context is not None
            and issued.comm.spec.nnodes > 1
            and starts(EventType.PROXY_OP, issued.mask)
        )

    def _sleep_until(self, target_ns: int) -> None:
        while True:
            left = (target_ns - time.monotonic_ns()) / 1e9
            if left <= 0:
                return
            if self.board.aborted or self._stopping:
                raise RunAborted()
            self._post_launched()
            time.sleep(min(left, SLEEP_SLICE_S))

    def _tick(self, monotonic_ns: int) -> int:
        return monotonic_ns + self.tick_offset


class _KernelOp:
    """One op's part of a kernel launch: its arrival, channels, network proxy and completion."""

    def __init__(self, thread: ProxyThread, issued, gpu_start: int):
        self.thread, self.issued, self.gpu_start = thread, issued, gpu_start
        self.channels: list = []
        self.end = 0
        self.network = thread._network.pop(id(issued), None)  # posted at its launch

    def arrive(self) -> None:
        thread, instance = self.thread, self.issued.instance
        if self.issued.mismatched:
            thread.board.poison(instance.id)
        thread.board.arrive(instance.id, thread.rank, self.gpu_start + thread.to_shared_ns)

    def start_channels(self) -> None:
        thread, issued = self.thread, self.issued
        if starts(EventType.KERNEL_CH, issued.mask):
            first = thread._tick(self.gpu_start)
            ticks = [first + ch * CHANNEL_SKEW_NS for ch in range(issued.n_channels)]
            self.channels = thread.abi.start_kernel_channels(
                issued.comm.context, issued.task, ticks
            )
            issued.record["kernel_ch_events"] = len(self.channels)
        issued.record["gpu_start_tick"] = thread._tick(self.gpu_start)
        if self.network:
            self.network.gpu_filled_first_steps()

    def resolve_end(self) -> bool:
        """Once every participant has arrived: when the op ends. False while one is missing."""
        instance = self.issued.instance
        arrivals = self.thread.board.arrivals_of(instance.id, instance.participants)
        if arrivals is None:
            return False
        # the op ends the same way whatever the mask: never before its last channel started
        n = self.issued.n_channels
        self.end = max(
            max(arrivals)
            - self.thread.to_shared_ns
            + int(instance.duration_ns * self.thread.scale),
            self.gpu_start + (n - 1) * CHANNEL_SKEW_NS + 1,
        )
        if self.network:
            self.network.finish_steps()
        return True

    def complete(self) -> None:
        thread, issued = self.thread, self.issued
        n, end = issued.n_channels, self.end
        if self.channels:
            stops = [
                thread._tick(
                    max(
                        self.gpu_start + ch * CHANNEL_SKEW_NS + 1,
                        end - (n - 1 - ch) * CHANNEL_SKEW_NS,
                    )
                )
                for ch in range(len(self.channels))
            ]
            thread.abi.stop_kernel_channels(self.channels, stops)
        if self.network:
            self.network.stop_ops()
        issued.record["gpu_end_tick"] = thread._tick(end)
        issued.record["completed"] = True
        thread.truth.write("op", **issued.record)
        thread.completed += 1
        thread.board.progress(thread.rank)


class _NetworkProxy:
    """ProxyOp and ProxyStep events of one op: a send and a receive op on every channel."""

    def __init__(self, abi: ProfilerAbi, issued):
        self.abi, self.issued = abi, issued
        comm, op = issued.comm, issued.op
        self.ctx, self.rank = comm.context, comm.rank
        n = comm.spec.nranks
        if op.peer >= 0:  # Send/Recv: one direction
            self.directions = [(op.func == "Send", op.peer)]
        else:  # ring: send to the next rank, receive from the previous one
            self.directions = [(True, (comm.rank + 1) % n), (False, (comm.rank - 1) % n)]
        per_channel = max(1, issued.record["bytes"] // max(1, issued.n_channels))
        self.n_steps = min(MAX_PROXY_STEPS, max(1, math.ceil(per_channel / PROXY_CHUNK_BYTES)))
        self.chunk = min(per_channel, PROXY_CHUNK_BYTES)
        self.with_steps = starts(EventType.PROXY_STEP, issued.mask)
        self.ops: list[tuple[object, bool]] = []
        self.first_steps: list[object] = []

    def post(self) -> None:
        """At launch: the ProxyOps, and step 0 of each posted and left waiting: a send's buffer
        for the GPU to fill (SendGPUWait), a receive for the peer's data (RecvWait)."""
        self._start_ops()
        if not self.with_steps:
            return
        for handle, is_send in self.ops:
            step = self.abi.start_proxy_step(self.ctx, handle, self.rank, 0)
            state = (
                EventState.PROXY_STEP_SEND_GPU_WAIT if is_send else EventState.PROXY_STEP_RECV_WAIT
            )
            self.abi.record_state(step, state, trans_size=0)
            self.first_steps.append(step)

    def _start_ops(self) -> None:
        pid = os.getpid()
        for ch in range(self.issued.n_channels):
            for is_send, peer in self.directions:
                handle = self.abi.start_proxy_op(
                    self.ctx,
                    self.issued.task,
                    self.rank,
                    pid,
                    ch,
                    peer,
                    self.n_steps,
                    self.chunk,
                    is_send,
                )
                self.abi.record_state(handle, EventState.PROXY_OP_IN_PROGRESS)
                self.ops.append((handle, is_send))

    def gpu_filled_first_steps(self) -> None:
        """The kernel runs: a send's step 0 has its data and waits on the peer until the peer
        shows up (SendPeerWait); a receive still waits for the peer's data."""
        if not self.with_steps:
            return
        for (_, is_send), step in zip(self.ops, self.first_steps, strict=True):
            if is_send:
                self.abi.record_state(step, EventState.PROXY_STEP_SEND_PEER_WAIT, trans_size=0)

    def finish_steps(self) -> None:
        if not self.with_steps:
            return
        for (handle, is_send), first in zip(self.ops, self.first_steps, strict=True):
            self._finish(first, is_send)
            for index in range(1, self.n_steps):
                step = self.abi.start_proxy_step(self.ctx, handle, self.rank, index)
                if is_send:
                    self.abi.record_state(step, EventState.PROXY_STEP_SEND_GPU_WAIT, trans_size=0)
                    self.abi.record_state(step, EventState.PROXY_STEP_SEND_PEER_WAIT, trans_size=0)
                else:
                    self.abi.record_state(step, EventState.PROXY_STEP_RECV_WAIT, trans_size=0)
                self._finish(step, is_send)

    def _finish(self, step, is_send: bool) -> None:
        if is_send:
            self.abi.record_state(step, EventState.PROXY_STEP_SEND_WAIT, trans_size=self.chunk)
        else:  # the data arrived (flush), then went to the GPU
            self.abi.record_state(
                step, EventState.PROXY_STEP_RECV_FLUSH_WAIT, trans_size=self.chunk
            )
            self.abi.record_state(step, EventState.PROXY_STEP_RECV_GPU_WAIT, trans_size=self.chunk)
        self.abi.stop(step)

    def stop_ops(self) -> None:
        for handle, _ in self.ops:
            self.abi.stop(handle)
