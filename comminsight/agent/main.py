# PYTHON_ARGCOMPLETE_OK (argcomplete's global completion looks for this in the entry point)
"""`comminsight-agent`: the node Agent, one per COMMINSIGHT_HOME.

Flags (`--home`, `--listen`, `--mode`, `--log-level`; agent.command_line) override their
configuration keys for this run; `--help` and `--version` answer and exit before anything is
created, bound or locked.

Holds `<home>/metadata/agent.lock` for its whole life (the Profilers' sign that an Agent will
retire their SHM files, and what keeps a second Agent out), then runs AgentService until
SIGTERM or SIGINT: SHM ingest, metrics, the hang-event FIFO, hang diagnosis and reports under
`<home>/metadata/hangs/`, archive passes, and the Agent Master API with /metrics on
COMMINSIGHT_AGENT_LISTEN.

Exit status: 0 after a signal, 1 when another Agent holds the lock, the home is unusable or
untrusted (owned by another user, writable by group or others, mode 000, or reached through a
directory or link another user controls) or the listen address
cannot be bound, 2 for a configuration error (a bad value, an untrusted configuration file).
Every one is a line on stderr naming the path or key, never a traceback.

Everything the Agent creates is private to its user: the umask is 077 (directories 0700,
files 0600) whatever the shell that started it had.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from comminsight.agent.core import command_line
from comminsight.agent.receivers.home_check import HomeError, check_config_file, check_home
from comminsight.agent.tls_files import TlsFileError, read_pem
from comminsight.config import ConfigError, config_file_path, is_loopback, load_settings
from comminsight.durable_files import make_private_dirs
from comminsight.redaction import shown_value
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.config_v1 import KEYS

if TYPE_CHECKING:
    from comminsight.agent.node.service import AgentService

log = logging.getLogger("comminsight.agent")


def take_lock(home: Path, shared: bool = False):
    """The Agent's hold on its home for its whole life; None when another Agent has it.

    Two locks: the home directory itself, which is not deleted or swapped while training
    writes into it, is what keeps a second Agent out; `agent.lock` is the Profilers' sign
    that an Agent runs (their autostart asks it, and a Profiler leaves its region for an
    Agent that runs). A lock file deleted or replaced under a running Agent then fools no
    second Agent into sharing the home. In a shared home, whose directory every user may
    open (and so lock), the first lock is on `metadata/agent.d/` (0700) instead, and every
    user's Profilers ask the Agent's socket rather than the lock file: no user can hold
    either and keep the node's Agent out."""
    path = home / home_names.METADATA / home_names.AGENT_LOCK
    make_private_dirs(path.parent)
    held_dir = home
    if shared:
        held_dir = home / home_names.METADATA / home_names.AGENT_D
        make_private_dirs(held_dir)
        os.chmod(held_dir, 0o700, follow_symlinks=False)
    held = []
    try:
        directory = os.open(held_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        held.append(directory)
        fcntl.flock(directory, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # O_NOFOLLOW: a link planted here must not make the Agent create or lock another file
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        held.append(fd)
        os.fchmod(fd, 0o600)  # whatever an older Agent left
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        for fd in held:
            os.close(fd)
        return None
    except BaseException:
        for fd in held:
            os.close(fd)
        raise
    return HomeLock(directory, os.fdopen(fd, "r+"))


@dataclass
class HomeLock:
    directory_fd: int
    lock_file: object  # the open agent.lock, flocked

    def close(self) -> None:
        self.lock_file.close()
        os.close(self.directory_fd)


class ListenError(Exception):
    pass


async def serve(
    service: AgentService, listen: str, named_by: str = "COMMINSIGHT_AGENT_LISTEN"
) -> None:
    from comminsight.agent.api.server import start_server
    from comminsight.agent.api.unix_socket import remove_agent_socket

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    stopping = (signal.SIGTERM, signal.SIGINT)
    # a mask inherited blocked (a launcher's thread that blocks every signal) would leave an
    # Agent only SIGKILL stops, without its final flush
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stopping)
    for sig in stopping:
        loop.add_signal_handler(sig, stop.set)
    try:
        runner = await start_server(service, listen)
    except OSError as e:
        raise ListenError(f"cannot listen on {listen} ({named_by}): {e}") from e
    if service.listen_error is None:
        scheme = "https" if service.settings.agent_http_tls_cert else "http"
        log.info("Agent Master API and /metrics on %s://%s", scheme, listen)
    try:
        await service.run(stop)
    finally:
        await runner.cleanup()
        if service.socket_path is not None:
            remove_agent_socket(service.socket_path)


def multinode_problem(settings) -> str | None:
    """What a master or slave cannot run without (architecture §7), named by key."""
    if settings.agent_mode == "standalone":
        return None
    if settings.agent_mode in ("slave", "relay") and not settings.agent_master_addr:
        return f"COMMINSIGHT_AGENT_MODE={settings.agent_mode} needs COMMINSIGHT_AGENT_MASTER_ADDR"
    if not settings.agent_token:
        return (
            f"COMMINSIGHT_AGENT_MODE={settings.agent_mode} needs COMMINSIGHT_AGENT_TOKEN "
            "(the secret slaves and master share)"
        )
    if bool(settings.agent_tls_cert) != bool(settings.agent_tls_key):
        return "COMMINSIGHT_AGENT_TLS_CERT and COMMINSIGHT_AGENT_TLS_KEY go together"
    if settings.agent_mode in ("master", "relay") and settings.agent_tls_client_ca:
        if not settings.agent_tls_cert:
            return (
                "COMMINSIGHT_AGENT_TLS_CLIENT_CA needs COMMINSIGHT_AGENT_TLS_CERT and "
                "COMMINSIGHT_AGENT_TLS_KEY: client certificates are checked in a TLS handshake"
            )
    if settings.agent_mode == "slave" and settings.agent_tls_cert and not settings.agent_tls_ca:
        return (
            "COMMINSIGHT_AGENT_TLS_CERT on a slave is its client certificate, presented over "
            "TLS: it needs COMMINSIGHT_AGENT_TLS_CA (the CA that signed the master's)"
        )
    if settings.agent_mode == "relay" and bool(settings.agent_tls_cert) != bool(
        settings.agent_tls_ca
    ):
        return (
            "a relay serves its children and dials its master with one TLS setting: "
            "COMMINSIGHT_AGENT_TLS_CERT (its certificate, both ways) and "
            "COMMINSIGHT_AGENT_TLS_CA (the CA that signed its master's) go together"
        )
    for key, path in (
        ("COMMINSIGHT_AGENT_TLS_CERT", settings.agent_tls_cert),
        ("COMMINSIGHT_AGENT_TLS_KEY", settings.agent_tls_key),
        ("COMMINSIGHT_AGENT_TLS_CA", settings.agent_tls_ca),
        ("COMMINSIGHT_AGENT_TLS_CLIENT_CA", settings.agent_tls_client_ca),
    ):
        if path:
            try:
                read_pem(key, path)
            except TlsFileError as e:
                return str(e)
    return None


def http_tls_problem(settings) -> str | None:
    """What serving the API over TLS cannot start with, named by key."""
    cert, key = settings.agent_http_tls_cert, settings.agent_http_tls_key
    if bool(cert) != bool(key):
        return "COMMINSIGHT_AGENT_HTTP_TLS_CERT and COMMINSIGHT_AGENT_HTTP_TLS_KEY go together"
    for name, path in (
        ("COMMINSIGHT_AGENT_HTTP_TLS_CERT", cert),
        ("COMMINSIGHT_AGENT_HTTP_TLS_KEY", key),
    ):
        if path:
            try:
                read_pem(name, path)
            except TlsFileError as e:
                return str(e)
    return None


def service_for(settings) -> AgentService:
    """The Agent of COMMINSIGHT_AGENT_MODE. (The Agent's modules are imported here, not at the
    top, so that --help and --version answer without loading them.)"""
    if settings.agent_mode == "master":
        from comminsight.agent.master.agent import MasterAgentService

        return MasterAgentService(settings)
    if settings.agent_mode == "slave":
        from comminsight.agent.slave.agent import SlaveAgentService

        return SlaveAgentService(settings)
    if settings.agent_mode == "relay":
        from comminsight.agent.relay.agent import RelayAgentService

        return RelayAgentService(settings)
    from comminsight.agent.node.service import AgentService

    return AgentService(settings)


def exposure_warning(settings) -> str | None:
    """What to say loudly at start when reads are served beyond this host without a token."""
    host = settings.agent_listen.rpartition(":")[0]
    if is_loopback(host) or settings.agent_token:
        return None
    return (
        f"COMMINSIGHT_AGENT_LISTEN={settings.agent_listen} is beyond loopback and "
        "COMMINSIGHT_AGENT_TOKEN is not set: anyone who can reach this port reads this node's "
        "ops, hangs and paths (mutations stay refused). Listen on 127.0.0.1 unless others "
        "must read it, and set a token"
    )


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser()
    if "_ARGCOMPLETE" in os.environ:  # a shell asks for completions: answer and exit
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)  # --help, --version, bad flags: exit here
    flags = command_line.overrides(args)
    os.umask(0o077)
    conf, named = config_file_path({**os.environ, **{k: v for k, (v, _) in flags.items()}})
    if not named:  # the file is the home's own: a home not to be trusted is said as such
        try:
            check_home(conf.parent.parent)
        except HomeError as e:
            print(f"comminsight-agent: refusing home {conf.parent.parent}: {e}", file=sys.stderr)
            return 1
    try:
        check_config_file(conf)
        settings = load_settings(overrides=flags)
    except (ConfigError, HomeError) as e:
        print(f"comminsight-agent: configuration error: {e}", file=sys.stderr)
        return 2
    problem = multinode_problem(settings) or http_tls_problem(settings)
    if problem:
        print(f"comminsight-agent: configuration error: {problem}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.agent_log_level.upper(),
        format="%(asctime)s comminsight-agent %(levelname)s %(name)s: %(message)s",
    )
    log_settings(settings)
    home = Path(settings.home)
    try:
        check_home(home)
        lock = take_lock(home, settings.agent_shared_home)
    except HomeError as e:
        print(f"comminsight-agent: refusing home {home}: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"comminsight-agent: cannot use home {home}: {_os_error(e)}", file=sys.stderr)
        return 1
    if lock is None:
        print(
            f"comminsight-agent: another agent holds "
            f"{home / home_names.METADATA / home_names.AGENT_LOCK}; one agent per home",
            file=sys.stderr,
        )
        return 1
    warning = exposure_warning(settings)
    if warning:
        log.warning("%s", warning)
        print(f"comminsight-agent: WARNING: {warning}", file=sys.stderr)
    log.info("home %s: watching shms/ and fifos/hang-events.fifo", home)
    from comminsight.agent.receivers.fifo_reader import FifoError

    try:
        listen_from = flags.get("COMMINSIGHT_AGENT_LISTEN", (None, "COMMINSIGHT_AGENT_LISTEN"))[1]
        asyncio.run(serve(service_for(settings), settings.agent_listen, listen_from))
    except (FifoError, ListenError) as e:
        print(f"comminsight-agent: {e}", file=sys.stderr)
        return 1
    except TlsFileError as e:  # a certificate file changed since the check at start
        print(f"comminsight-agent: configuration error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a directory or file of the home the Agent cannot use
        print(f"comminsight-agent: cannot use home {home}: {_os_error(e)}", file=sys.stderr)
        return 1
    finally:
        lock.close()
    log.info("stopped")
    return 0


def log_settings(settings) -> None:
    """The resolved settings at debug level, secrets hidden as `comminsight config` hides them."""
    if log.isEnabledFor(logging.DEBUG):
        for key in KEYS:
            log.debug("%s=%r", key.name, shown_value(key, getattr(settings, key.field)))


def _os_error(e: OSError) -> str:
    """'<path>: <reason>' without the errno prefix a traceback-free message does not need."""
    return f"{e.filename}: {e.strerror}" if e.filename else (e.strerror or str(e))


if __name__ == "__main__":
    sys.exit(main())
