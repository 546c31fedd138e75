"""Resolve CommInsight settings: environment beats the KEY=VALUE file beats schema defaults.

Keys, types, defaults and limits come only from the generated `config` protocol
(comminsight_gen.config_v1), the same definitions the Profiler's C header is generated from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec

from comminsight_gen.config_v1 import KEY_BY_NAME, KEYS, ConfigKey, ConfigV1

Settings = ConfigV1
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


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
        lines = path.read_text().splitlines()
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
        if not sep or not key:
            raise ConfigError(f"{where.text}: expected KEY=VALUE, got {raw.strip()!r}")
        if key not in KEY_BY_NAME:
            raise ConfigError(f"{where.text}: unknown key {key}")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = (value, where)
    return values


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
        raise ConfigError(f"{key.name}={raw!r} ({origin.text}): {detail}") from None


def load_settings(env: Mapping[str, str] | None = None, conf_path: Path | None = None) -> ConfigV1:
    """Resolve settings from `env` (default os.environ) and the config file.

    The file is COMMINSIGHT_CONF if set, else <COMMINSIGHT_HOME>/etc/comminsight.conf; a missing
    default file is fine, a missing file that was named explicitly is an error.
    """
    env = os.environ if env is None else env
    raw: dict[str, tuple[str, Origin]] = {}
    explicit = conf_path or (Path(env["COMMINSIGHT_CONF"]) if env.get("COMMINSIGHT_CONF") else None)
    if explicit is not None:
        raw.update(parse_conf_file(explicit))
    else:
        home = env.get("COMMINSIGHT_HOME", str(KEY_BY_NAME["COMMINSIGHT_HOME"].default))
        default_file = Path(home) / "etc" / "comminsight.conf"
        if default_file.is_file():
            raw.update(parse_conf_file(default_file))
    for key in KEYS:
        if key.name in env:
            raw[key.name] = (env[key.name], Origin("environment"))
    typed = {
        KEY_BY_NAME[name].field: convert(KEY_BY_NAME[name], value, origin)
        for name, (value, origin) in raw.items()
    }
    try:
        return msgspec.convert(typed, ConfigV1)
    except msgspec.ValidationError as e:
        # msgspec names the field ("at `$.agent_mode`"); translate it back to the key.
        message = str(e)
        for name, (value, origin) in raw.items():
            field = KEY_BY_NAME[name].field
            if f"`$.{field}`" in message:
                raise ConfigError(
                    f"{name}={value!r} ({origin.text}): {message.split(' - at ')[0]}"
                ) from None
        raise ConfigError(message) from None
