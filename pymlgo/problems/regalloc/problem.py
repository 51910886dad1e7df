"""Register allocation as a `Problem`: the greedy allocator's eviction advisor at -O2,
reward from the allocator's weighted spill/reload/copy cost (`remarks.py`).

Traces (`mlgo trace`) record the decisions of a policy that answers the channel. They
cannot record the stock advisor's own: in LLVM 22 the release-mode ML advisors behind
`-regalloc-{evict,priority}-interactive-channel-base` only evaluate the model runner (the
channel) and send nothing of the default advisor (there is no counterpart of the inliner's
`-inliner-interactive-include-default`); the default advisor's choice is computed and
logged only in development mode (`-regalloc-training-log`, `-regalloc-priority-training-log`),
which needs an LLVM built with TFLite, and the bundled clang has neither option. So the
default traced policy is pymlgo's channel-side rebuild of the stock rule (`heuristic`,
`priority:stage-size`), and the stock advisor (`default`) is refused with that reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pymlgo.problems.base import (
    CompileJob,
    CompileSettings,
    Measure,
    ModuleResult,
    Policy,
    problem_by_name,
)
from pymlgo.problems.regalloc.advice import (
    EVICT_ADVICE,
    MASK_FEATURE,
    PRIORITY_ADVICE,
    Advisor,
)
from pymlgo.problems.regalloc.compile import (
    CORRECTED_KEY,
    COST_KEY,
    advisor_of,
    compile_baseline,
    compile_with_policy,
    function_costs,
    is_stock,
)
from pymlgo.problems.regalloc.policies import heuristic_weights
from pymlgo.problems.regalloc.reward import relative_change
from pymlgo.protocol.tensor_spec import TensorSpec
from pymlgo.toolchain.compiler import Compiler

# The `problem` field and version prefix of saved regalloc policies (`policy/regalloc.py`).
POLICY_TAG = "regalloc"
COST = Measure(COST_KEY, "cost", "weighted spill/reload/copy cost")
# The decision specs the release-mode advisors send in their headers (LLVM 22).
ADVICE_SPECS = {"evict": TensorSpec(EVICT_ADVICE, "int64_t", (1,)),
                "priority": TensorSpec(PRIORITY_ADVICE, "float", (1,))}
# What `mlgo trace` records by default: the stock rule as far as the channel shows it.
TRACE_POLICIES = {"evict": "heuristic", "priority": "priority:stage-size"}


@dataclass(frozen=True)
class RegallocProblem:
    name: str
    advisor: Advisor
    summary: str
    aliases: tuple[str, ...] = ()
    baseline_label: str = "stock"
    opt_level: str = "-O2"
    measures: tuple[Measure, ...] = (COST,)
    counters: tuple[str, ...] = (CORRECTED_KEY,)
    policy_codec: str = "pymlgo.policy.regalloc"
    training: str = "pymlgo.train.regalloc"
    traces: bool = True  # of channel policies only: see the module docstring
    # the advisor is created for the first function with virtual registers only
    always_asks: bool = False

    @property
    def trace_advice(self) -> TensorSpec:
        return ADVICE_SPECS[self.advisor]

    @property
    def trace_policy(self) -> str:
        return TRACE_POLICIES[self.advisor]

    def check_trace_policy(self, policy: Policy) -> None:
        if is_stock(policy):
            raise ValueError(
                f"policy {policy.name!r} is the stock {self.advisor} advisor, which never "
                f"answers the channel, and clang's interactive {self.advisor} advisor does not "
                f"report the stock advisor's choice (LLVM logs it only in development mode, "
                f"which the bundled clang lacks): nothing to trace. Trace "
                f"{self.trace_policy!r} (the stock rule rebuilt from the channel's features) "
                f"or another policy that answers the channel")
        if advisor_of(policy) != self.advisor:
            raise ValueError(f"policy {policy.name!r} answers the {advisor_of(policy)} "
                             f"advisor, not the {self.advisor} advisor of {self.name}")

    def reproduces_baseline(self, policy: Policy) -> bool:
        return False  # the stock advisor has no channel (`check_trace_policy`)

    def stands_for_baseline(self, result: ModuleResult) -> bool:
        return False

    def compile(self, compiler: Compiler, job: CompileJob, policy: Policy | None,
                settings: CompileSettings) -> ModuleResult:
        if not is_stock(policy) and advisor_of(policy) != self.advisor:
            assert policy is not None
            raise ValueError(f"policy {policy.name!r} answers the {advisor_of(policy)} "
                             f"advisor, not the {self.advisor} advisor of {self.name}")
        if policy is None:
            return compile_baseline(compiler, job, settings)
        return compile_with_policy(compiler, job, policy, settings)

    def cache_extra(self, result: ModuleResult) -> Mapping[str, float]:
        return dict(result.extra)  # every remark figure: training reads per-function costs

    @property
    def search_moves(self) -> tuple[str, ...]:
        return ("single",) if self.advisor == "evict" else ()  # a priority is a float

    def search_answers(self, features: Mapping[str, np.ndarray], chosen: int
                       ) -> tuple[int, ...]:
        """The other evictable columns: evicting nothing (the candidate's own column: it
        splits or spills instead) first, then the lightest interference first, where the
        stock rule's gains were found (stop 46's search: a heavy candidate in a hot block
        that should not evict, and light interference worth evicting)."""
        mask = np.asarray(features[MASK_FEATURE]).reshape(-1)
        weight = heuristic_weights(features)
        candidate = mask.size - 1
        others = [int(c) for c in np.flatnonzero(mask == 1) if c != chosen]
        return tuple(sorted(others, key=lambda c: (c != candidate, weight[c], c)))

    def decision_weights(self, result: ModuleResult) -> np.ndarray | None:
        """The cost of each decision's function: the allocator works one function at a
        time, so a decision changes its own function's cost only."""
        if result.trajectory is None:
            return None
        costs = function_costs(result)
        return np.array([costs.get(fn, 0.0) for fn in result.trajectory.contexts],
                        dtype=np.float64)

    def reward(self, baseline: ModuleResult, result: ModuleResult) -> float:
        """-(cost - stock cost) / max(stock cost, floor): positive when cheaper."""
        # 0.0 - x, not -x: no change is 0.0, never -0.0 (a trace log writes its bits)
        return 0.0 - relative_change(float(result.extra[COST_KEY]),
                                     float(baseline.extra[COST_KEY]))

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
