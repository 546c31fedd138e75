"""Inject's configuration: environment beats the KEY=VALUE file beats the defaults.

The keys and defaults are those of the `config` protocol (protocols/config/v1); this wheel
cannot import the generated definitions (they need msgspec), so the few keys Inject reads are
spelled here and a test checks them against the generated ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

HOME = "COMMINSIGHT_HOME"
CONF = "COMMINSIGHT_CONF"
DISABLE = "COMMINSIGHT_INJECT_DISABLE"
STEP_MARKERS = "COMMINSIGHT_INJECT_STEP_MARKERS"
STACKS = "COMMINSIGHT_INJECT_STACKS"
STACK_SIGNAL = "COMMINSIGHT_INJECT_STACK_SIGNAL"

DEFAULTS = {
    HOME: "/opt/comminsight",
    CONF: "",
    DISABLE: False,
    STEP_MARKERS: False,
    STACKS: True,
    STACK_SIGNAL: "SIGUSR2",
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class SettingsError(ValueError):
    """A value Inject reads is invalid; the message names the key and where it came from."""


@dataclass(frozen=True)
class Settings:
    home: Path
    disable: bool
    step_markers: bool
    stacks: bool = True
    stack_signal: str = "SIGUSR2"  # a name; stack_dump turns it into a number


def parse_bool(key: str, raw: str, origin: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(f"{key}={raw!r} ({origin}): expected 1/0 (true/false/yes/no/on/off)")


def disabled_by_environment(environ: dict[str, str] | None = None) -> bool:
    """The start-up check: only the environment, so that interpreter start reads no file.
    An invalid value counts as 'not disabled' here; `load` reports it by name later."""
    raw = (os.environ if environ is None else environ).get(DISABLE, "")
    return raw.strip().lower() in _TRUE


def conf_path(environ: dict[str, str], home: str) -> Path:
    explicit = environ.get(CONF, "")
    return Path(explicit) if explicit else Path(home) / "etc" / "comminsight.conf"


def read_conf_file(path: Path, keys: set[str]) -> dict[str, tuple[str, str]]:
    """The values of `keys` in a KEY=VALUE file (other keys belong to other components and are
    left to them). A missing file is no error: the defaults apply."""
    values: dict[str, tuple[str, str]] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return values
    except (OSError, UnicodeDecodeError) as e:
        raise SettingsError(f"{path}: cannot read the configuration file: {e}") from None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if key in keys and sep:
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            values[key] = (value, f"{path}:{lineno}")
    return values


def load(environ: dict[str, str] | None = None) -> Settings:
    """Resolve Inject's settings; SettingsError names the key of a bad value."""
    env = dict(os.environ if environ is None else environ)
    home = env.get(HOME) or str(DEFAULTS[HOME])
    wanted = {HOME, DISABLE, STEP_MARKERS, STACKS, STACK_SIGNAL}
    from_file = read_conf_file(conf_path(env, home), wanted)
    if HOME not in env and HOME in from_file:
        home = from_file[HOME][0]

    def flag(key: str) -> bool:
        if key in env:
            return parse_bool(key, env[key], "environment")
        if key in from_file:
            return parse_bool(key, *from_file[key])
        return bool(DEFAULTS[key])

    if STACK_SIGNAL in env:
        signal_name = (env[STACK_SIGNAL].strip(), "environment")
    elif STACK_SIGNAL in from_file:
        signal_name = (from_file[STACK_SIGNAL][0].strip(), from_file[STACK_SIGNAL][1])
    else:
        signal_name = (str(DEFAULTS[STACK_SIGNAL]), "default")
    return Settings(
        home=Path(home),
        disable=flag(DISABLE),
        step_markers=flag(STEP_MARKERS),
        stacks=flag(STACKS),
        stack_signal=parse_signal_name(*signal_name),
    )


def parse_signal_name(raw: str, origin: str) -> str:
    """SIGUSR1, SIGUSR2 or SIGRTMIN+N (the config protocol's pattern), checked here so that a
    bad value is named at start, not when the Agent first asks."""
    name = raw.upper()
    if name in ("SIGUSR1", "SIGUSR2"):
        return name
    prefix = "SIGRTMIN+"
    offset = name[len(prefix) :]
    if name.startswith(prefix) and offset.isdigit() and len(offset) <= 2:
        return name
    raise SettingsError(
        f"{STACK_SIGNAL}={raw!r} ({origin}): expected SIGUSR1, SIGUSR2 or SIGRTMIN+N"
    )
