"""What every problem shares: the compile job, its result, and the policy interface."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

# features of one observation, by name -> advice value (int for decisions, float for scores)
Decide = Callable[[Mapping[str, np.ndarray]], "int | float | np.ndarray"]


class Policy(Protocol):
    """A decision rule the compile path can run without torch.

    `for_module` is called once per compiled module; a stochastic policy seeds its
    generator from (seed, module name) there, so results do not depend on which
    worker compiled which module, or in which order.
    """

    @property
    def name(self) -> str: ...

    @property
    def required_features(self) -> tuple[str, ...]: ...

    def for_module(self, module: str) -> Decide: ...


@dataclass(frozen=True)
class CompileJob:
    """One module to compile: everything a worker needs, no shared filesystem."""

    module: str
    bitcode: bytes
    cmd: tuple[str, ...]


@dataclass(frozen=True)
class Trajectory:
    """Every decision of one compile: features stacked on axis 0, plus the advice given."""

    contexts: tuple[str, ...]  # context name of each decision
    features: Mapping[str, np.ndarray]  # name -> array of shape (n, *spec.shape)
    advice: np.ndarray  # shape (n, *advice_spec.shape)

    def __len__(self) -> int:
        return len(self.advice)


@dataclass(frozen=True)
class ModuleResult:
    """Outcome of compiling one module with one policy."""

    module: str
    size: int | None  # problem's measure: .text bytes for inlining
    decisions: int = 0
    seconds: float = 0.0
    error: str | None = None
    trajectory: Trajectory | None = None
    extra: Mapping[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None
