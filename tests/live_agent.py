"""An AgentService with its HTTP API, on 127.0.0.1 (an ephemeral port) in a background thread,
for tests that talk to the real server over TCP."""

from __future__ import annotations

import asyncio
import threading

import msgspec
from waiting import wait_until, wait_until_async

from comminsight.agent.api.server import start_server
from comminsight.agent.node.service import AgentService
from comminsight_gen.config_v1 import ConfigV1

START_S = 120.0  # bounds a first pass that went wrong (a loaded machine is slow, not stuck)


class LiveAgent:
    """polling=False: one pass at start, then the API alone, so what a test puts into the
    service (a hang report, say) is not changed by later passes."""

    def __init__(self, home, polling: bool = True, **settings) -> None:
        self.polling = polling
        self.settings = msgspec.convert(
            {"home": str(home), "agent_listen": "127.0.0.1:0", **settings}, ConfigV1
        )
        self.service = AgentService(self.settings)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.base_url = ""
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-agent", daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # surfaced by start()
            self._error = e
            self._started.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        runner = await start_server(self.service, self.settings.agent_listen)
        host, port = runner.addresses[0][:2]
        scheme = "https" if self.settings.agent_http_tls_cert else "http"
        self.base_url = f"{scheme}://{host}:{port}"
        if self.polling:
            task = asyncio.ensure_future(self.service.run(self._stop))
        else:
            self.service.poll_once()
            task = asyncio.ensure_future(self._stop.wait())
        await wait_until_async(lambda: self.service.ready or task.done(), START_S, "the first pass")
        self._started.set()
        try:
            await task
        finally:
            await runner.cleanup()

    def start(self) -> LiveAgent:
        self._thread.start()
        started = self._started.wait(START_S + 30)
        if self._error is not None:
            raise self._error
        assert started, "the agent's thread never started serving"
        return self

    def call(self, fn, *args):
        """Run fn on the agent's loop (between passes) and return its result."""

        async def run():
            return fn(*args)

        future = asyncio.run_coroutine_threadsafe(run(), self.loop)
        return future.result(timeout=30)

    def wait_passes(self, n: int = 2, timeout_s: float = 60.0) -> None:
        """Until n more passes ran (everything published before now is ingested)."""
        target = self.service.passes + n
        wait_until(
            lambda: self.service.passes >= target,
            timeout_s,
            lambda: f"{n} passes of the agent (at {self.service.passes}, waiting for {target})",
        )

    def stop(self) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def __enter__(self) -> LiveAgent:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
