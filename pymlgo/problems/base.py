"""What every problem shares: the compile job, its result, and the policy interface."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from pymlgo.toolchain.size import ObjectSize

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
    """One module to compile: its name, cc1 command and bitcode.

    `CompileJob(module, data, cmd)` holds the bitcode; `CompileJob.from_file` holds only
    its path and reads the file whenever `bitcode` is asked for, so a job list costs a
    path per module, not the corpus, until each job compiles. An executor whose workers
    have no shared filesystem ships `loaded()` jobs.
    """

    module: str
    data: bytes | None = field(repr=False)
    cmd: tuple[str, ...]
    path: Path | None = None

    def __post_init__(self) -> None:
        if (self.data is None) == (self.path is None):
            raise ValueError(f"job {self.module!r}: give either the bitcode or its path")

    @classmethod
    def from_file(cls, module: str, path: Path, cmd: tuple[str, ...]) -> CompileJob:
        return cls(module, None, cmd, path)

    @property
    def bitcode(self) -> bytes:
        """The module's bitcode; read from `path` on every call (never kept) if not held."""
        if self.data is not None:
            return self.data
        assert self.path is not None
        return self.path.read_bytes()

    def loaded(self) -> CompileJob:
        """This job holding its bitcode (OSError if the file cannot be read)."""
        return self if self.data is not None else CompileJob(self.module, self.bitcode,
                                                             self.cmd)


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
    size: int | None  # problem's measure: the object's bytes by the run's size metric
    decisions: int = 0
    seconds: float = 0.0
    error: str | None = None
    trajectory: Trajectory | None = None
    extra: Mapping[str, float] = field(default_factory=dict)
    sizes: ObjectSize | None = None  # the object's bytes by section group, when measured

    @property
    def ok(self) -> bool:
        return self.error is None
