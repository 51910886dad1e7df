"""Register allocation as a `Problem`: the greedy allocator's eviction advisor at -O2,
reward from the allocator's weighted spill/reload/copy cost (`remarks.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pymlgo.problems.base import (
    CompileJob,
    CompileSettings,
    Measure,
    ModuleResult,
    Policy,
    problem_by_name,
)
from pymlgo.problems.regalloc.advice import Advisor
from pymlgo.problems.regalloc.compile import (
    CORRECTED_KEY,
    COST_KEY,
    advisor_of,
    compile_baseline,
    compile_with_policy,
    is_stock,
)
from pymlgo.problems.regalloc.reward import relative_change
from pymlgo.toolchain.compiler import Compiler

# The `problem` field and version prefix of saved regalloc policies (`policy/regalloc.py`).
POLICY_TAG = "regalloc"
COST = Measure(COST_KEY, "cost", "weighted spill/reload/copy cost")


@dataclass(frozen=True)
class RegallocProblem:
    name: str
    advisor: Advisor
    summary: str
    aliases: tuple[str, ...] = ()
    baseline_label: str = "stock"
    measures: tuple[Measure, ...] = (COST,)
    counters: tuple[str, ...] = (CORRECTED_KEY,)
    policy_codec: str = "pymlgo.policy.regalloc"
    training: str = "pymlgo.train.regalloc"
    traces: bool = False  # `mlgo trace` writes the inliner's log format only, so far

    def compile(self, compiler: Compiler, job: CompileJob, policy: Policy | None,
                settings: CompileSettings) -> ModuleResult:
        if not is_stock(policy) and advisor_of(policy) != self.advisor:
            assert policy is not None
            raise ValueError(f"policy {policy.name!r} answers the {advisor_of(policy)} "
                             f"advisor, not the {self.advisor} advisor of {self.name}")
        if policy is None:
            return compile_baseline(compiler, job, timeout=settings.timeout,
                                    edits=settings.edits, size_metric=settings.size_metric,
                                    memory_mb=settings.memory_mb)
        return compile_with_policy(compiler, job, policy, timeout=settings.timeout,
                                   record=settings.record, edits=settings.edits,
                                   size_metric=settings.size_metric,
                                   memory_mb=settings.memory_mb)

    def cache_extra(self, result: ModuleResult) -> Mapping[str, float]:
        return dict(result.extra)  # every remark figure: training reads per-function costs

    def reward(self, baseline: ModuleResult, result: ModuleResult) -> float:
        """-(cost - stock cost) / max(stock cost, floor): positive when cheaper."""
        return -relative_change(float(result.extra[COST_KEY]), float(baseline.extra[COST_KEY]))

    def __reduce__(self) -> tuple[Any, ...]:
        return problem_by_name, (self.name,)


REGALLOC_EVICT = RegallocProblem(
    name="regalloc-evict", advisor="evict", aliases=("regalloc",),
    summary="regalloc-evict (alias regalloc): -O2 with POLICY answering the register "
    "allocator's eviction advisor; reward: the allocator's block-frequency weighted "
    "spill/reload/copy cost vs the stock advisor")

REGALLOC_PRIORITY = RegallocProblem(
    name="regalloc-priority", advisor="priority",
    summary="regalloc-priority: -O2 with POLICY giving the register allocator's queue "
    "priorities (float32 `priority` from li_size, stage, weight); reward as regalloc-evict")
