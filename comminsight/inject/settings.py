"""Inject's configuration: environment beats the KEY=VALUE file beats the defaults.

The file is read, and raw values converted, by the config protocol's generated parser
(comminsight_gen.config_file_v1: the standard library only, so the dependency-free Inject wheel
ships a copy of it). The few keys Inject reads are named here; their defaults are the schema's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .tenant_home import writable_home

try:  # the Inject wheel's own copy (it depends on nothing)
    from . import config_file_v1 as config_file  # type: ignore[attr-defined]
    from . import home_v1_names as home_names  # type: ignore[attr-defined]
except ImportError:  # the source tree, and the CommInsight package
    from comminsight_gen import config_file_v1 as config_file
    from comminsight_gen import home_v1_names as home_names

K = config_file.K
HOME = K.HOME
CONF = K.CONF
DISABLE = K.INJECT_DISABLE
STEP_MARKERS = K.INJECT_STEP_MARKERS
STACKS = K.INJECT_STACKS
STACK_SIGNAL = K.INJECT_STACK_SIGNAL

DEFAULTS = {
    key: config_file.convert(key, config_file.KEYS[key][1])
    for key in (HOME, CONF, DISABLE, STEP_MARKERS, STACKS, STACK_SIGNAL)
}


class SettingsError(ValueError):
    """A value Inject reads is invalid; the message names the key and where it came from."""


@dataclass(frozen=True)
class Settings:
    home: Path
    disable: bool
    step_markers: bool
    stacks: bool = True
    # step_markers came from the environment or the file: a torch without the global step
    # hook then gets a warning, where the default alone leaves markers off without a word
    step_markers_asked: bool = False
    stack_signal: str = "SIGUSR2"  # a name; stack_dump turns it into a number


def parse_bool(key: str, raw: str, origin: str) -> bool:
    try:
        return config_file.parse_bool(raw)
    except ValueError as e:
        raise SettingsError(f"{key}={raw!r} ({origin}): {e}") from None


def disabled_by_environment(environ: dict[str, str] | None = None) -> bool:
    """The start-up check: only the environment, so that interpreter start reads no file.
    An invalid value counts as 'not disabled' here; `load` reports it by name later."""
    raw = (os.environ if environ is None else environ).get(DISABLE, "")
    return raw.strip().lower() in config_file.TRUE


def conf_path(environ: dict[str, str], home: str) -> Path:
    explicit = environ.get(CONF, "")
    return Path(explicit) if explicit else Path(home) / home_names.ETC / home_names.COMMINSIGHT_CONF


def read_conf_file(path: Path, keys: set[str]) -> dict[str, tuple[str, str]]:
    """The values of `keys` in a KEY=VALUE file (other keys belong to other components and are
    left to them). A missing file is no error: the defaults apply."""
    try:
        values = config_file.read_conf_file(path, strict=False)
    except config_file.ConfFileError as e:
        if not os.path.lexists(path):
            return {}
        raise SettingsError(str(e)) from None
    return {key: found for key, found in values.items() if key in keys}


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
    try:
        # a node's shared home: this user's own directory in it
        writes_into = writable_home(home)
    except OSError as e:
        raise SettingsError(f"{HOME}={home}: {e}") from None
    return Settings(
        home=writes_into,
        disable=flag(DISABLE),
        step_markers=flag(STEP_MARKERS),
        stacks=flag(STACKS),
        stack_signal=parse_signal_name(*signal_name),
        step_markers_asked=STEP_MARKERS in env or STEP_MARKERS in from_file,
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
