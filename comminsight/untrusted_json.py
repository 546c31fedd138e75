"""What decoding JSON from a file or a peer can raise: a document nested thousands deep raises
RecursionError in msgspec and in the standard library alike, beside the ValueError of
malformed or invalid JSON (msgspec.DecodeError, json.JSONDecodeError and UnicodeDecodeError
are all ValueErrors). A reader that catches only the latter lets one such line crash it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

NOT_JSON: tuple[type[Exception], ...] = (ValueError, RecursionError)


def decode_mending_utf8(decode: Callable[[bytes], T], line) -> tuple[T, str | None]:
    """`decode(line)`, and where that fails on bytes that are not UTF-8, `decode` of the line
    with U+FFFD in their place: a name cut inside a character (older Profilers did that) or a
    byte that was never UTF-8 costs the reader one field, not the line. The second value says
    what was not UTF-8 (for the reader to name the line; also when the bad bytes lie in a
    field `decode` skips), None when all was. Raises what `decode` raises for a line that is
    not JSON either way."""
    try:
        value = decode(line)
    except NOT_JSON:
        bad = _not_utf8(line)
        if bad is None:
            raise
        mended = decode(bytes(line).decode("utf-8", "replace").encode())
        return mended, f"not UTF-8 ({bad}); read with U+FFFD there"
    bad = _not_utf8(line)
    return value, None if bad is None else f"not UTF-8 ({bad}), in a field not read"


def _not_utf8(line) -> str | None:
    raw = bytes(line)
    if raw.isascii():
        return None
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"{e.reason} at byte {e.start}"
    return None
