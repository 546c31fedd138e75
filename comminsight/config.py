"""Resolve CommInsight settings: a command-line flag (where a command has one) beats the
environment beats the KEY=VALUE file beats schema defaults.

Keys, types, defaults and limits come only from the generated `config` protocol
(comminsight_gen.config_v1), the same definitions the Profiler's C header is generated from.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

from comminsight.redaction import shown_raw
from comminsight.safe_open import kind_of
from comminsight_gen.config_v1 import KEY_BY_NAME, KEYS, ConfigKey, ConfigV1

Settings = ConfigV1
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
# host:port keys; a listen address may say port 0 (any free port), an address dialled may not
_ADDRESS_KEYS = (
    ("COMMINSIGHT_AGENT_LISTEN", 0),
    ("COMMINSIGHT_AGENT_MASTER_LISTEN", 0),
    ("COMMINSIGHT_AGENT_MASTER_ADDR", 1),
)
MAX_CONF_BYTES = 1 << 20
_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_KEY_NAME = re.compile(r"^COMMINSIGHT_[A-Z0-9_]{1,64}$")  # what an unknown-key error may echo


class ConfigError(ValueError):
    """A configuration value or file is invalid; the message names the key and its origin."""


@dataclass(frozen=True)
class Origin:
    """Where a raw value came from, for error messages: 'environment' or 'file:line'."""

    text: str


def parse_conf_file(path: Path) -> dict[str, tuple[str, Origin]]:
    """Read a KEY=VALUE file: '#' comments, blank lines, optional quotes around values."""
    values: dict[str, tuple[str, Origin]] = {}
    try:
        lines = _read_conf_text(path).splitlines()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read configuration file: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: configuration file is not UTF-8 text") from None
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        where = Origin(f"{path}:{lineno}")
        # the line itself is never echoed: a file planted or linked here (a password file)
        # must not have its content printed by the error that refuses it
        if not sep or not key:
            raise ConfigError(
                f"{where.text}: expected KEY=VALUE, got a line of {len(raw.strip())} "
                "characters without '=' (not shown)"
            )
        if key not in KEY_BY_NAME:
            shown = key if _KEY_NAME.match(key) else "(not shown: not a key name)"
            raise ConfigError(f"{where.text}: unknown key {shown}")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = (value, where)
    return values


def _read_conf_text(path: Path) -> str:
    """The file's text, opened without blocking: a FIFO or device planted where the file
    belongs would make a plain open() or read() wait for ever."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        # a symbolic link is followed only when this user or root made it (as the Profiler
        # decides); another user's would choose what the Agent reads as its configuration
        owner = os.lstat(path).st_uid
        if owner not in (os.geteuid(), 0):
            raise OSError(
                errno.EPERM, f"is a symbolic link owned by uid {owner}; not followed"
            ) from None
        fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"is a {kind_of(st.st_mode)}, not a regular file")
        if st.st_size > MAX_CONF_BYTES:
            raise OSError(errno.EFBIG, f"larger than {MAX_CONF_BYTES} bytes")
        return f.read(MAX_CONF_BYTES + 1).decode("utf-8")


def convert(key: ConfigKey, raw: str, origin: Origin) -> object:
    """Turn one raw string into the key's type, or raise ConfigError naming key and origin."""
    text = raw.strip()
    try:
        if key.type == "boolean":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError("expected 1/0, true/false, yes/no or on/off")
        if key.type == "integer":
            return int(text, 0)
        if key.type == "number":
            return float(text)
        return raw
    except ValueError as e:
        detail = str(e) if key.type == "boolean" else f"expected {key.type}"
        raise ConfigError(
            f"{key.name}={shown_raw(key.name, raw)!r} ({origin.text}): {detail}"
        ) from None


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
    if env.get("COMMINSIGHT_CONF"):
        return Path(env["COMMINSIGHT_CONF"]), True
    home = env.get("COMMINSIGHT_HOME", str(KEY_BY_NAME["COMMINSIGHT_HOME"].default))
    return Path(home) / "etc" / "comminsight.conf", False


def _check_addresses(settings: ConfigV1, raw: dict[str, tuple[str, Origin]]) -> None:
    for name, min_port in _ADDRESS_KEYS:
        value = getattr(settings, KEY_BY_NAME[name].field)
        if not value:
            continue
        problem = address_problem(value, min_port)
        if problem:
            origin = raw[name][1].text if name in raw else "default"
            raise ConfigError(f"{name}={shown_raw(name, value)!r} ({origin}): {problem}")


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
    explicit = conf_path or (Path(env["COMMINSIGHT_CONF"]) if env.get("COMMINSIGHT_CONF") else None)
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
    _check_addresses(settings, raw)
    return settings
