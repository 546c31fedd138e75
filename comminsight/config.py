"""Resolve CommInsight settings: a command-line flag (where a command has one) beats the
environment beats the KEY=VALUE file beats schema defaults.

Keys, types, defaults and limits come only from the generated `config` protocol
(comminsight_gen.config_v1), the same definitions the Profiler's C header is generated from.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

from comminsight.redaction import shown_raw
from comminsight_gen import config_file_v1 as config_file
from comminsight_gen import home_v1_names as home_names
from comminsight_gen.config_v1 import KEY_BY_NAME, KEYS, ConfigKey, ConfigV1

Settings = ConfigV1
K = config_file.K  # every key's name
# host:port keys; a listen address may say port 0 (any free port), an address dialled may not
_ADDRESS_KEYS = (
    (K.AGENT_LISTEN, 0),
    (K.AGENT_MASTER_LISTEN, 0),
    (K.AGENT_MASTER_ADDR, 1),
)
_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


class ConfigError(ValueError):
    """A configuration value or file is invalid; the message names the key and its origin."""


@dataclass(frozen=True)
class Origin:
    """Where a raw value came from, for error messages: 'environment' or 'file:line'."""

    text: str


def parse_conf_file(path: Path) -> dict[str, tuple[str, Origin]]:
    """Read a KEY=VALUE file: '#' comments, blank lines, optional quotes around values."""
    try:
        values = config_file.read_conf_file(path)
    except config_file.ConfFileError as e:
        raise ConfigError(str(e)) from None
    return {key: (value, Origin(where)) for key, (value, where) in values.items()}


def convert(key: ConfigKey, raw: str, origin: Origin) -> object:
    """Turn one raw string into the key's type, or raise ConfigError naming key and origin."""
    try:
        return config_file.convert(key.name, raw)
    except ValueError as e:
        raise ConfigError(f"{key.name}={shown_raw(key.name, raw)!r} ({origin.text}): {e}") from None


def address_problem(address: str, min_port: int = 0) -> str | None:
    """Why a 'host:port' or '[v6]:port' cannot be used (port range, a host that is neither an
    IP address nor a host name); None when it can. The schema's pattern only says which
    characters may appear: 127.0.0.1:99999 and 999.1.1.1:80 pass it."""
    host, _, port = address.rpartition(":")
    if not port.isdigit() or not host:
        return "expected host:port"
    if not min_port <= int(port) <= 65535:
        return f"port {int(port)} is outside {min_port}..65535"
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host.strip("[]"))
        except ValueError:
            return f"{host} is not an IPv6 address"
        return None
    if re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"{host} is not an IPv4 address"
        return None
    if len(host) > 253 or not all(_HOST_LABEL.match(label) for label in host.split(".")):
        return f"{host!r} is not a host name (labels of 1-63 letters, digits or '-')"
    return None


def is_loopback(host: str) -> bool:
    """The listen host answers this machine only (127.0.0.0/8, ::1, localhost)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def config_file_path(env: Mapping[str, str] | None = None) -> tuple[Path, bool]:
    """The configuration file load_settings reads, and whether it was named explicitly
    (COMMINSIGHT_CONF) rather than found under the home."""
    env = os.environ if env is None else env
    if env.get(K.CONF):
        return Path(env[K.CONF]), True
    home = env.get(K.HOME, str(KEY_BY_NAME[K.HOME].default))
    return Path(home) / home_names.ETC / home_names.COMMINSIGHT_CONF, False


def _check_addresses(settings: ConfigV1, raw: dict[str, tuple[str, Origin]]) -> None:
    for name, min_port in _ADDRESS_KEYS:
        value = getattr(settings, KEY_BY_NAME[name].field)
        if not value:
            continue
        # COMMINSIGHT_AGENT_MASTER_ADDR may list parents, each checked
        problem = next((p for a in value.split(",") if (p := address_problem(a, min_port))), None)
        if problem:
            origin = raw[name][1].text if name in raw else "default"
            raise ConfigError(f"{name}={shown_raw(name, value)!r} ({origin}): {problem}")


def _check_patterns(raw: dict[str, tuple[str, Origin]]) -> None:
    """Each string key's pattern must match the whole value. msgspec tests a pattern with
    re.search, whose `$` also matches before a final line break: a token or node name ending
    in LF would pass `^...$` there."""
    for name, (value, origin) in raw.items():
        key = KEY_BY_NAME[name]
        if key.pattern is None or re.fullmatch(key.pattern, value):
            continue
        control = next((c for c in value if ord(c) < 0x20 or ord(c) == 0x7F), None)
        why = f" (it holds the control character U+{ord(control):04X})" if control else ""
        raise ConfigError(
            f"{name}={shown_raw(name, value)!r} ({origin.text}): "
            f"Expected `str` matching regex {key.pattern!r}{why}"
        )


def _check_home(settings: ConfigV1, raw: dict[str, tuple[str, Origin]]) -> None:
    # A relative home names a different directory in each process's working directory: the
    # Agent, its children and every rank would each use their own.
    if not os.path.isabs(settings.home):
        origin = raw[K.HOME][1].text if K.HOME in raw else "default"
        raise ConfigError(
            f"{K.HOME}={settings.home!r} ({origin}): a relative path, which each "
            "process would resolve against its own working directory; give an absolute one"
        )


def load_settings(
    env: Mapping[str, str] | None = None,
    conf_path: Path | None = None,
    overrides: Mapping[str, tuple[str, str]] | None = None,
) -> ConfigV1:
    """Resolve settings from `env` (default os.environ) and the config file.

    The file is COMMINSIGHT_CONF if set, else <COMMINSIGHT_HOME>/etc/comminsight.conf; a missing
    default file is fine, a missing file that was named explicitly is an error.
    `overrides`: key name -> (raw value, where it came from, e.g. '--listen'), stronger than
    the environment; an overridden COMMINSIGHT_HOME also decides where the default file is.
    """
    env = os.environ if env is None else env
    overrides = overrides or {}
    for name in overrides:
        if name not in KEY_BY_NAME:
            raise ValueError(f"override of unknown key {name}")
    raw: dict[str, tuple[str, Origin]] = {}
    explicit = conf_path or (Path(env[K.CONF]) if env.get(K.CONF) else None)
    if explicit is not None:
        raw.update(parse_conf_file(explicit))
    else:
        default_file, _ = config_file_path(
            {**env, **{name: value for name, (value, _) in overrides.items()}}
        )
        try:
            os.lstat(default_file)
            present = True
        except FileNotFoundError:
            present = False
        except OSError as e:  # an unreadable home: named, not a traceback
            raise ConfigError(
                f"{default_file}: cannot read configuration file: {e.strerror}"
            ) from None
        # anything there is read or refused by name (a FIFO, a directory), never skipped
        if present:
            raw.update(parse_conf_file(default_file))
    for key in KEYS:
        if key.name in env:
            raw[key.name] = (env[key.name], Origin("environment"))
    for name, (value, where) in overrides.items():
        raw[name] = (value, Origin(where))
    _check_patterns(raw)
    typed = {
        KEY_BY_NAME[name].field: convert(KEY_BY_NAME[name], value, origin)
        for name, (value, origin) in raw.items()
    }
    try:
        settings = msgspec.convert(typed, ConfigV1)
    except msgspec.ValidationError as e:
        # msgspec names the field ("at `$.agent_mode`"); translate it back to the key.
        message = str(e)
        for name, (value, origin) in raw.items():
            field = KEY_BY_NAME[name].field
            if f"`$.{field}`" in message:
                raise ConfigError(
                    f"{name}={shown_raw(name, value)!r} ({origin.text}): "
                    f"{message.split(' - at ')[0]}"
                ) from None
        raise ConfigError(message) from None
    _check_home(settings, raw)
    _check_addresses(settings, raw)
    return settings
