"""Settings as they may be shown: secrets hidden, credentials cut out of URLs.

The one place that decides what of a configuration value may be printed, used wherever a
value is shown (`comminsight config`, the Agent's archive status and its configuration errors)
so that no printer can forget a key. Which keys are secret comes from the config schema's
units (`secret`, `url`), not from a list kept here.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from comminsight_gen.config_v1 import KEY_BY_NAME, ConfigKey

HIDDEN = "***"


def redact_url(url: str) -> str:
    """The URL without user:password or query string (where tokens are often passed); each
    is replaced by *** so that a reader sees credentials were there."""
    if "://" not in url:
        return url  # a directory path carries no credentials
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    user, at, host = parts.netloc.rpartition("@")
    netloc = f"{HIDDEN}@{host}" if at else host
    return urlunsplit((parts.scheme, netloc, parts.path, HIDDEN if parts.query else "", ""))


def scrub_credentials(text: str, url: str) -> str:
    """`text` (an error message a library wrote about `url`) with the URL's user, password and
    query string hidden wherever they appear in it."""
    if "://" not in url:
        return text
    try:
        parts = urlsplit(url)
    except ValueError:
        return text
    userinfo = parts.netloc.rpartition("@")[0]
    for secret in (userinfo, parts.password, parts.query, parts.username):
        if secret:
            text = text.replace(secret, HIDDEN)
    return text


def shown_value(key: ConfigKey, value: object) -> object:
    """`value` of `key` as it may be printed: a secret as ***, a URL without its credentials."""
    if not isinstance(value, str) or not value:
        return value
    if key.unit == "secret":
        return HIDDEN
    if key.unit == "url":
        return redact_url(value)
    return value


def shown_raw(name: str, raw: str) -> str:
    """A raw (untyped) value of the key named `name`, as it may be printed in an error."""
    key = KEY_BY_NAME.get(name)
    return raw if key is None else str(shown_value(key, raw))
