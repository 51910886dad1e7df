"""A per-example hang guard for property tests.

Hypothesis' `deadline` judges an example only after it returns, so a reader that never
returns would stall the whole CI run. `hang_guard(seconds)` arms SIGALRM around each
example: a blocking read, a FIFO open or a Python loop still running at the limit is
interrupted and the test fails at once, naming the example. (A hang inside C code that
never returns to the interpreter is out of its reach.)
"""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_REPR_LIMIT = 2000


class ExampleHung(BaseException):
    """An example ran past its limit. Not an Exception, so hypothesis does not catch it:
    it would otherwise shrink the failure by running more (hanging) examples."""


def _describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= _REPR_LIMIT else text[:_REPR_LIMIT] + " ..."


def hang_guard(seconds: float) -> Callable[[F], F]:
    """Decorate a hypothesis test body (below `@given`): each example may run `seconds`."""

    def decorate(test: F) -> F:
        @functools.wraps(test)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not threading.main_thread():
                raise RuntimeError("hang_guard needs the main thread (SIGALRM)")

            def on_alarm(signum: int, frame: object) -> None:
                raise ExampleHung(
                    f"{test.__name__}: one example ran past {seconds:g} s (a hang?) "
                    f"with {_describe(args, kwargs)}"
                )

            previous = signal.signal(signal.SIGALRM, on_alarm)
            signal.setitimer(signal.ITIMER_REAL, seconds)
            try:
                return test(*args, **kwargs)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)

        return guarded  # type: ignore[return-value]

    return decorate
