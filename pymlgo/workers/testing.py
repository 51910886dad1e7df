"""Policies for fault injection in tests and benchmarks: slow modules, crashing workers."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pymlgo.problems.base import Decide, Policy


@dataclass(frozen=True)
class SlowPolicy:
    """`inner`, but the first decision of each module (or only of `modules`) first sleeps
    `delay_s`: the compiler is then mid-compile, blocked on the channel, for that long."""

    inner: Policy
    delay_s: float
    modules: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"slow({self.inner.name})"

    @property
    def required_features(self) -> tuple[str, ...]:
        return self.inner.required_features

    def for_module(self, module: str) -> Decide:
        decide = self.inner.for_module(module)
        if self.modules and module not in self.modules:
            return decide
        pending = [self.delay_s]

        def slow(features: Mapping[str, np.ndarray]) -> int | float | np.ndarray:
            if pending:
                time.sleep(pending.pop())
            return decide(features)

        return slow


@dataclass(frozen=True)
class CrashPolicy:
    """`inner`, but the worker process compiling one of `modules` kills itself."""

    inner: Policy
    modules: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"crash({self.inner.name})"

    @property
    def required_features(self) -> tuple[str, ...]:
        return self.inner.required_features

    def for_module(self, module: str) -> Decide:
        if module in self.modules:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.inner.for_module(module)
