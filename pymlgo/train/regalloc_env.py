"""Where regalloc training compiles run: modules, stock-advisor baselines, one executor.

Shared by `regalloc_es` and `regalloc_ppo`; numpy only (the policies it ships to workers are
numpy `EvictionPolicy`s). Several policies are compared in one executor batch
(`PolicyBatch`, jobs tagged `module#k`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from pymlgo.problems.base import CompileJob, ModuleResult, Policy
from pymlgo.problems.regalloc.reward import log_ratio, module_cost
from pymlgo.train.policies import PolicyBatch, tag_job, untag
from pymlgo.workers.protocol import Executor, WorkSpec


@dataclass
class RegallocEnv:
    """Training modules (`pool`: those with spill code under the stock advisor, the only
    ones a policy can improve) and the stock results every reward is relative to."""

    executor: Executor
    spec: WorkSpec
    jobs: dict[str, CompileJob]
    baselines: dict[str, ModuleResult]
    pool: tuple[str, ...]

    def sample_modules(self, rng: np.random.Generator, n: int) -> list[str]:
        k = min(n, len(self.pool))
        return sorted(self.pool[i] for i in rng.choice(len(self.pool), size=k, replace=False))

    def run(self, members: Sequence[Policy], modules: Sequence[str], *,
            record: bool = False) -> list[dict[str, ModuleResult]]:
        """Compile every module with every member: results[k][module] (failures included)."""
        tagged = [tag_job(self.jobs[m], k) for k in range(len(members)) for m in modules]
        policy: Policy = members[0] if len(members) == 1 else PolicyBatch(tuple(members),
                                                                          "regalloc-batch")
        if len(members) == 1:
            tagged = [self.jobs[m] for m in modules]
        spec = replace(self.spec, policy=policy, record=record)
        out: list[dict[str, ModuleResult]] = [{} for _ in members]
        for res in self.executor.run(spec, tagged):
            module, k = untag(res.module) if len(members) > 1 else (res.module, 0)
            out[k][module] = res
        return out

    def costs(self, members: Sequence[Policy], modules: Sequence[str]) -> list[dict[str, float]]:
        """Weighted cost per module for each member, on the modules every member compiled
        (members are compared on the same modules)."""
        results = self.run(members, modules)
        common = [m for m in modules if m in self.baselines and
                  all(m in r and r[m].ok for r in results)]
        return [{m: module_cost(r[m]) for m in common} for r in results]

    def fitness(self, costs: dict[str, float]) -> float:
        """-mean log((cost + 4) / (stock + 4)): every module counts whatever its size."""
        if not costs:
            return 0.0
        return -float(np.mean([log_ratio(c, module_cost(self.baselines[m]))
                               for m, c in costs.items()]))

    def evaluate(self, policy: Policy, modules: Sequence[str]) -> dict[str, float]:
        """Validation figures of a (greedy) policy: fitness and total cost change."""
        costs = self.costs([policy], modules)[0]
        base = sum(module_cost(self.baselines[m]) for m in costs)
        total = sum(costs.values())
        return {"fitness": self.fitness(costs),
                "cost_change": total / base - 1.0 if base else 0.0,
                "modules": float(len(costs))}


def cost_change_or_nan(costs: dict[str, float], env: RegallocEnv) -> float:
    base = sum(module_cost(env.baselines[m]) for m in costs)
    return sum(costs.values()) / base - 1.0 if base else math.nan
