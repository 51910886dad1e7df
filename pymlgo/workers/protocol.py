"""The executor protocol eval/trace/train use to run compile jobs on some workers."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, TypeVar

from pymlgo.corpus.command import FlagEdits
from pymlgo.problems.base import CompileJob, CompileSettings, ModuleResult, Policy, Problem
from pymlgo.problems.registry import DEFAULT, problem
from pymlgo.toolchain.size import DEFAULT_SIZE_METRIC, check_metric

CUT_ERROR = "cut: straggler"
"""`ModuleResult.error` of a module still compiling (or queued) when a run was cut."""

_E = TypeVar("_E", bound="ExecutorBase")

LOST_ERROR = "lost: worker died"
"""Prefix of `ModuleResult.error` for a module whose every attempt lost its worker."""

DEFAULT_MAX_RETRIES = 2  # a job that kills its worker three times is reported, not retried


class ExecutorError(RuntimeError):
    """The executor itself cannot run: workers fail to start, a pool is gone, Ray is missing."""


@dataclass(frozen=True)
class WorkSpec:
    """How to compile: the same for every job of one batch; shipped once per worker.

    `policy=None` means the problem's baseline (plain compile, no channel). `problem` may
    be given by name (`problems.registry`); it is held as the Problem.
    """

    problem: Problem = field(default=DEFAULT)
    clang: str | None = None  # None: the bundled zig clang
    policy: Policy | None = None
    record: bool = False  # keep every decision's features (a trajectory)
    timeout: float = 300.0
    edits: FlagEdits = FlagEdits()
    memory_mb: int | None = None  # address-space limit per compile (None: unlimited)
    # what `ModuleResult.size` counts (`toolchain.size`); `sizes` always has every group
    size_metric: str = DEFAULT_SIZE_METRIC
    # the problem's own options (`CompileSettings.options`), opaque here
    options: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "problem", problem(self.problem))
        check_metric(self.size_metric)

    @property
    def settings(self) -> CompileSettings:
        return CompileSettings(timeout=self.timeout, record=self.record, edits=self.edits,
                               memory_mb=self.memory_mb, size_metric=self.size_metric,
                               options=self.options)


class Executor(Protocol):
    """Runs compile jobs somewhere; results come back as they complete.

    Every submitted job yields exactly one ModuleResult (success or `error`), unless the
    caller stops iterating, which cancels what has not finished. A worker that dies takes
    its job elsewhere (bounded retries, then an `error` starting with LOST_ERROR).
    Straggler cut: once `min_fraction` of the jobs are done, wait at most
    `straggler_grace_s` more, then report every unfinished job with error CUT_ERROR.
    An exception raised by the compile code itself (a policy that cannot run on this
    compiler) is not a module failure: it propagates out of `run`.
    A job may hold only its bitcode's path (`CompileJob.from_file`): workers on this
    machine read the file when they compile it; a backend without a shared filesystem
    ships `job.loaded()`. A file that cannot be read is that module's error.
    """

    @property
    def num_workers(self) -> int: ...

    def run(
        self,
        spec: WorkSpec,
        jobs: Sequence[CompileJob],
        *,
        min_fraction: float | None = None,
        straggler_grace_s: float = 0.0,
    ) -> Iterator[ModuleResult]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Executor: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class ExecutorBase:
    """Context-manager plumbing shared by the executors."""

    def close(self) -> None:  # pragma: no cover - every executor overrides it
        raise NotImplementedError

    def __enter__(self: _E) -> _E:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class StragglerCut:
    """When to stop waiting: `min_fraction` of `total` done, then `grace_s` more at most."""

    def __init__(self, total: int, min_fraction: float | None, grace_s: float = 0.0) -> None:
        if min_fraction is not None and not 0.0 < min_fraction <= 1.0:
            raise ValueError(f"min_fraction must be in (0, 1], got {min_fraction}")
        if grace_s < 0:
            raise ValueError(f"straggler_grace_s must be >= 0, got {grace_s}")
        self.need = None if min_fraction is None else math.ceil(min_fraction * total)
        self.grace_s = grace_s
        self.done = 0
        self.deadline: float | None = None
        self._arm()

    def _arm(self) -> None:
        if self.need is not None and self.deadline is None and self.done >= self.need:
            self.deadline = time.monotonic() + self.grace_s

    def record_done(self) -> None:
        self.done += 1
        self._arm()

    def timeout(self, cap: float) -> float:
        """How long the caller may block waiting for results before checking `expired`."""
        if self.deadline is None:
            return cap
        return max(0.0, min(cap, self.deadline - time.monotonic()))

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def cut_result(job_module: str) -> ModuleResult:
    return ModuleResult(job_module, None, error=CUT_ERROR)


def lost_result(job_module: str, attempts: int) -> ModuleResult:
    return ModuleResult(job_module, None, error=f"{LOST_ERROR} on each of {attempts} attempts")


def unreadable_result(job: CompileJob, exc: OSError) -> ModuleResult:
    """A job whose bitcode file cannot be read (e.g. removed since the run started)."""
    return ModuleResult(job.module, None, error=f"cannot read bitcode {job.path}: {exc}")
