"""The flags of `comminsight-agent`: each sets one configuration key for this run.

A flag is its key's strongest source (flag > environment > configuration file > default), so
a flag is a one-off change that leaves `comminsight config` and the Profiler's autostart (which
passes no flags) resolving the same settings as before. Values are checked here, before
anything starts, and a bad one is an error naming the flag (exit 2).
"""

from __future__ import annotations

import argparse
import os

from comminsight.config import address_problem
from comminsight.version_text import VersionAction
from comminsight_gen.config_v1 import KEY_BY_NAME

DESCRIPTION = """\
The CommInsight node Agent, one per home: reads the Profilers' shared memory and hang events,
diagnoses hangs, archives sealed logs, and serves the Agent Master API and /metrics. It runs
until SIGTERM or SIGINT.

Settings come from, strongest first: these flags, the environment (COMMINSIGHT_*), the
configuration file (COMMINSIGHT_CONF, default <home>/etc/comminsight.conf), the defaults.
`comminsight config` shows every key; `comminsight status` asks the running Agent."""

EPILOG = """\
exit status: 0 after SIGTERM/SIGINT; 1 when another Agent holds the home, the home is unusable
or untrusted, or the listen address cannot be bound; 2 for a bad flag or configuration value.

shell completion (bash, zsh), e.g. in ~/.bashrc:
  eval "$(register-python-argcomplete comminsight-agent)"

examples:
  comminsight-agent --home ~/comminsight
  comminsight-agent --listen 127.0.0.1:19200 --log-level debug
  COMMINSIGHT_AGENT_TOKEN=... comminsight-agent --mode master"""


def _home(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a directory")
    # absolute now: a relative home would change meaning with the directory the Agent's
    # children (and a later restart) run in
    return os.path.abspath(os.path.expanduser(text))


def _listen(text: str) -> str:
    problem = address_problem(text, min_port=0)
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r}: {problem}")
    return text


# flag -> (key, metavar, how the text is checked); choices come from the schema's enum
FLAGS = {
    "--home": ("COMMINSIGHT_HOME", "DIR", _home),
    "--listen": ("COMMINSIGHT_AGENT_LISTEN", "HOST:PORT", _listen),
    "--mode": ("COMMINSIGHT_AGENT_MODE", None, None),
    "--log-level": ("COMMINSIGHT_AGENT_LOG_LEVEL", None, None),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="comminsight-agent",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action=VersionAction)
    for flag, (name, metavar, check) in FLAGS.items():
        key = KEY_BY_NAME[name]
        p.add_argument(
            flag,
            dest=key.field,
            default=None,
            metavar=metavar,
            type=check,
            choices=key.choices,
            help=f"{key.description} Overrides {name} (default {key.default!r}).".replace(
                "%", "%%"
            ),
        )
    return p


def overrides(args: argparse.Namespace) -> dict[str, tuple[str, str]]:
    """key name -> (value, the flag that gave it), for config.load_settings."""
    out = {}
    for flag, (name, _, _) in FLAGS.items():
        value = getattr(args, KEY_BY_NAME[name].field)
        if value is not None:
            out[name] = (value, flag)
    return out
