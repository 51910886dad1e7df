"""The fuzz tests' hang guard: a hanging example fails fast, naming itself; a passing one
leaves no alarm behind."""

from __future__ import annotations

import os
import signal
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz_watchdog import ExampleHung, hang_guard


def test_an_example_blocked_in_a_read_fails_within_the_limit_naming_the_example() -> None:
    calls: list[bytes] = []

    @settings(max_examples=50, deadline=None, database=None)
    @given(st.binary(min_size=3, max_size=3))
    @hang_guard(0.3)
    def reads_a_pipe_nobody_writes(data: bytes) -> None:
        calls.append(data)
        r, w = os.pipe()
        try:
            os.read(r, 1)  # blocks for ever: the writer is still open and silent
        finally:
            os.close(r)
            os.close(w)

    started = time.monotonic()
    with pytest.raises(ExampleHung) as hung:
        reads_a_pipe_nobody_writes()
    assert time.monotonic() - started < 5
    assert len(calls) == 1  # stopped at once: no shrinking by running more hanging examples
    message = str(hung.value)
    assert "reads_a_pipe_nobody_writes" in message and "0.3 s" in message
    assert repr(calls[0]) in message
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_passing_examples_leave_no_alarm_and_the_previous_handler_in_place() -> None:
    seen: list[int] = []

    @settings(max_examples=20, deadline=None, database=None)
    @given(st.integers())
    @hang_guard(5)
    def passes(n: int) -> None:
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0  # armed while it runs
        seen.append(n)

    before = signal.getsignal(signal.SIGALRM)
    passes()
    assert len(seen) == 20
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is before
