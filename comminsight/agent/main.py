"""`comminsight-agent`: the node Agent, one per COMMINSIGHT_HOME.

Holds `<home>/metadata/agent.lock` for its whole life (the Profilers' sign that an Agent will
retire their SHM files, and what keeps a second Agent out), then runs AgentService until
SIGTERM or SIGINT. What it does today: SHM ingest, metrics state, the hang-event FIFO, hang
diagnosis and reports under `<home>/metadata/hangs/`. The HTTP API and /metrics endpoint are
not served yet (issue 4); the Agent says so at start.

Exit status: 0 after a signal, 1 when another Agent holds the lock or the home is unusable,
2 for a configuration error.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import signal
import sys
from pathlib import Path

from comminsight.agent.fifo_reader import FifoError
from comminsight.agent.service import AgentService
from comminsight.config import ConfigError, load_settings
from comminsight.durable_files import make_private_dirs

log = logging.getLogger("comminsight.agent")


def take_lock(home: Path):
    """The open, exclusively locked lock file; None when another Agent has it."""
    path = home / "metadata" / "agent.lock"
    make_private_dirs(path.parent)
    f = open(path, "a")  # noqa: SIM115 - held for the Agent's life
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return None
    return f


async def serve(service: AgentService) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await service.run(stop)


def main(argv: list[str] | None = None) -> int:
    try:
        settings = load_settings()
    except ConfigError as e:
        print(f"comminsight-agent: configuration error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.agent_log_level.upper(),
        format="%(asctime)s comminsight-agent %(levelname)s %(name)s: %(message)s",
    )
    home = Path(settings.home)
    try:
        lock = take_lock(home)
    except OSError as e:
        print(f"comminsight-agent: cannot use home {home}: {e}", file=sys.stderr)
        return 1
    if lock is None:
        print(
            f"comminsight-agent: another agent holds {home / 'metadata' / 'agent.lock'}; "
            "one agent per home",
            file=sys.stderr,
        )
        return 1
    log.info("home %s: watching shms/ and fifos/hang-events.fifo", home)
    log.warning(
        "the HTTP API and /metrics are not served by this build yet (issue 4); "
        "hang reports are written under %s",
        home / "metadata" / "hangs",
    )
    try:
        asyncio.run(serve(AgentService(settings)))
    except FifoError as e:
        print(f"comminsight-agent: {e}", file=sys.stderr)
        return 1
    finally:
        lock.close()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
