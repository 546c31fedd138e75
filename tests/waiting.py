"""Waiting in tests: poll for what can be observed (a file appearing, a counter reaching a value,
a record count, a process state) until it holds, or fail saying what never happened.

A test never sleeps a fixed time to let something happen: too short on a loaded machine, wasted
on an idle one. The timeout only bounds a wait that went wrong; it is generous (the CI box is a
loaded 2-core machine) and never a measurement.

The predicate's truthy value is returned, so a wait can hand over what it waited for. An
exception from the predicate counts as "not yet" (a file half written, a server not listening
yet) and is shown if the wait times out; an AssertionError is the predicate saying that it will
never hold (the process it waits on died) and is raised at once.

Plain modules (the scenario scripts the tests run in fresh interpreters) import this too: it
needs nothing beyond the standard library.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

DEFAULT_TIMEOUT_S = 60.0
FIRST_INTERVAL_S = 0.005
MAX_INTERVAL_S = 0.1
_NOTHING = object()


class WaitTimeout(AssertionError):
    """What was waited for never happened within the timeout."""


def _describe(what: str | Callable[[], str]) -> str:
    if not callable(what):
        return what
    try:
        return str(what())
    except Exception as e:  # the diagnostic must not hide the timeout
        return f"(the diagnostic failed: {e!r})"


def _timeout(timeout_s: float, what, last: object, error: BaseException | None) -> WaitTimeout:
    seen = f"last error: {error!r}" if error is not None else f"last value: {last!r}"
    if last is _NOTHING and error is None:
        seen = "never evaluated"
    return WaitTimeout(f"timed out after {timeout_s:g} s: {_describe(what)} ({seen})")


def _check(timeout_s: float, max_interval_s: float) -> None:
    # a wrong argument order (what where timeout_s goes) must fail at once, not after a minute
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
        raise TypeError(f"timeout_s must be a positive number of seconds, not {timeout_s!r}")
    if max_interval_s <= 0:
        raise TypeError(f"max_interval_s must be positive, not {max_interval_s!r}")


def wait_until(
    predicate: Callable[[], Any],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: str | Callable[[], str] = "the condition",
    *,
    max_interval_s: float = MAX_INTERVAL_S,
) -> Any:
    """Call predicate() until it returns something truthy, and return that. Polls at once, then
    with a short backoff up to max_interval_s. Fails with WaitTimeout after timeout_s, naming
    `what` (a string, or a callable giving a diagnostic at that moment) and the last value or
    exception seen."""
    _check(timeout_s, max_interval_s)
    deadline = time.monotonic() + timeout_s
    interval = FIRST_INTERVAL_S
    last: object = _NOTHING
    error: BaseException | None = None
    while True:
        try:
            value = predicate()
        except AssertionError:
            raise
        except Exception as e:
            error = e
        else:
            if value:
                return value
            last, error = value, None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _timeout(timeout_s, what, last, error) from error
        time.sleep(min(interval, remaining))
        interval = min(interval * 2, max_interval_s)


async def wait_until_async(
    predicate: Callable[[], Any],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: str | Callable[[], str] = "the condition",
    *,
    max_interval_s: float = MAX_INTERVAL_S,
) -> Any:
    """wait_until for asyncio tests: the event loop runs between polls (the predicate usually
    waits on a task of that loop). The predicate may be a plain function or return an
    awaitable."""
    _check(timeout_s, max_interval_s)
    deadline = time.monotonic() + timeout_s
    interval = FIRST_INTERVAL_S
    last: object = _NOTHING
    error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
        except AssertionError:
            raise
        except Exception as e:
            error = e
        else:
            if value:
                return value
            last, error = value, None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _timeout(timeout_s, what, last, error) from error
        await asyncio.sleep(min(interval, remaining))
        interval = min(interval * 2, max_interval_s)
