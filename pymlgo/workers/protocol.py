"""The executor protocol eval/trace/train use to run compile jobs on some workers."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from pymlgo.corpus.command import FlagEdits
from pymlgo.problems.base import CompileJob, ModuleResult, Policy


@dataclass(frozen=True)
class WorkSpec:
    """How to compile: the same for every job of one batch; shipped once per worker.

    `policy=None` means the problem's baseline (plain compile, no channel).
    """

    problem: str = "inlining"
    clang: str | None = None  # None: the bundled zig clang
    policy: Policy | None = None
    record: bool = False  # keep every decision's features (a trajectory)
    timeout: float = 300.0
    edits: FlagEdits = FlagEdits()


class Executor(Protocol):
    """Runs compile jobs somewhere; results come back as they complete.

    Every submitted job yields exactly one ModuleResult (success or `error`), unless the
    caller stops iterating, which cancels what has not started.
    """

    @property
    def num_workers(self) -> int: ...

    def run(self, spec: WorkSpec, jobs: Sequence[CompileJob]) -> Iterator[ModuleResult]: ...

    def close(self) -> None: ...
