"""Waiting for the Agent to catch up with a run: a condition polled until it holds or a
deadline passes, with a spinner on a terminal and nothing elsewhere."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from rich.console import Console

T = TypeVar("T")


def wait_for(
    console: Console,
    what: str,
    poll: Callable[[], tuple[bool, T]],
    timeout_s: float,
    poll_s: float = 0.1,
) -> T:
    """Call `poll()` -> (done, value) until done or timeout_s passed; the last value (the
    caller judges it: a timeout is no error here, what the Agent served by then is checked)."""
    deadline = time.monotonic() + timeout_s
    status = console.status(what) if console.is_terminal else None
    if status is not None:
        status.start()
    try:
        while True:
            done, value = poll()
            if done or time.monotonic() > deadline:
                return value
            time.sleep(poll_s)
    finally:
        if status is not None:
            status.stop()
