"""tests/waiting.py: the one way tests wait for something."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from waiting import WaitTimeout, wait_until, wait_until_async


def test_returns_the_first_truthy_value():
    values = iter([None, 0, [], {"ready": True}])
    assert wait_until(lambda: next(values), 10, "the value") == {"ready": True}


def test_a_timeout_names_what_and_the_last_value():
    count = itertools.count()
    with pytest.raises(WaitTimeout) as raised:
        wait_until(lambda: next(count) < 0, 0.05, "the counter to go negative")
    assert "the counter to go negative" in str(raised.value)
    assert "last value: False" in str(raised.value)


def test_the_diagnostic_is_computed_at_the_timeout():
    state = {"n": 0}

    def predicate():
        state["n"] += 1
        return False

    with pytest.raises(WaitTimeout, match=r"polled \d+ times"):
        wait_until(predicate, 0.05, lambda: f"polled {state['n']} times")


def test_an_exception_is_not_yet_and_is_reported():
    calls = itertools.count()

    def flaky():
        if next(calls) < 3:
            raise FileNotFoundError("half written")
        return "done"

    assert wait_until(flaky, 10, "the file") == "done"
    with pytest.raises(WaitTimeout, match="FileNotFoundError") as raised:
        wait_until(lambda: open("/nonexistent/comminsight-test"), 0.05, "the file")
    assert isinstance(raised.value.__cause__, FileNotFoundError)


def test_an_assertion_in_the_predicate_fails_at_once():
    calls = itertools.count()

    def dead():
        next(calls)
        raise AssertionError("the process died")

    with pytest.raises(AssertionError, match="the process died") as raised:
        wait_until(dead, 60, "the process")
    assert not isinstance(raised.value, WaitTimeout)
    assert next(calls) == 1  # called once, not polled for a minute


def test_arguments_in_the_wrong_order_are_refused():
    with pytest.raises(TypeError):
        wait_until(lambda: True, "the condition")  # type: ignore[arg-type]


def test_the_async_twin_lets_the_loop_run():
    async def main():
        done = asyncio.Event()
        asyncio.get_running_loop().call_later(0.01, done.set)
        assert await wait_until_async(done.is_set, 10, "the event") is True

        async def coroutine_predicate():
            return done.is_set() and "awaited"

        assert await wait_until_async(coroutine_predicate, 10, "the coroutine") == "awaited"
        with pytest.raises(WaitTimeout, match="never set"):
            await wait_until_async(asyncio.Event().is_set, 0.05, "never set")

    asyncio.run(main())
