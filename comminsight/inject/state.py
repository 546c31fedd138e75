"""Inject's on/off state and its warnings: one line on stderr per kind of trouble, ever.

Written to stderr directly, not through `warnings`: a program run with `-W error` would turn a
warning into an exception inside a training script, which Inject must never cause.
"""

from __future__ import annotations

import sys
import threading

PREFIX = "comminsight-inject: "

_lock = threading.Lock()
_warned: set[str] = set()
_disabled_reason: str | None = None


def warn_once(kind: str, message: str) -> bool:
    """Print `message` unless a warning of this `kind` was printed before; True if printed."""
    with _lock:
        if kind in _warned:
            return False
        _warned.add(kind)
    try:
        sys.stderr.write(PREFIX + message + "\n")
        sys.stderr.flush()
    except Exception:  # a closed or broken stderr must not reach the caller
        pass
    return True


def disable(reason: str) -> None:
    """Turn Inject off for the rest of the process, with one warning saying why."""
    global _disabled_reason
    with _lock:
        first = _disabled_reason is None
        if first:
            _disabled_reason = reason
    if first:
        warn_once("disabled", f"disabled ({reason}); torch runs unchanged")


def disabled() -> bool:
    return _disabled_reason is not None


def disabled_reason() -> str | None:
    return _disabled_reason


def reset_for_tests() -> None:
    """Forget warnings and the disabled state (tests run several scenarios in one process)."""
    global _disabled_reason
    with _lock:
        _warned.clear()
        _disabled_reason = None
