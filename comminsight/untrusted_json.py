"""What decoding JSON from a file or a peer can raise: a document nested thousands deep raises
RecursionError in msgspec and in the standard library alike, beside the ValueError of
malformed or invalid JSON (msgspec.DecodeError, json.JSONDecodeError and UnicodeDecodeError
are all ValueErrors). A reader that catches only the latter lets one such line crash it."""

from __future__ import annotations

NOT_JSON: tuple[type[Exception], ...] = (ValueError, RecursionError)
