"""Rewards from the allocator's remark costs, relative to the stock advisor's.

A release compiler sends no reward, so the reward is computed after the compile from the
weighted spill/reload/copy cost (`remarks.SpillStats.weighted_cost`), per function (the
unit MLGO's regalloc training uses: one trajectory per machine function) and per module.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from pymlgo.problems.base import ModuleResult, Trajectory
from pymlgo.problems.regalloc.compile import COST_KEY, function_costs

# Costs are block-frequency weighted counts; a function with no spill code costs 0. The
# floor keeps relative changes finite there: below one reload at entry frequency (cost 4
# with the default weights) a change is measured against that instead.
COST_FLOOR = 4.0


def relative_change(policy_cost: float, baseline_cost: float, floor: float = COST_FLOOR) -> float:
    """(policy - baseline) / max(baseline, floor): negative is better than the stock
    advisor."""
    return (policy_cost - baseline_cost) / max(baseline_cost, floor)


def function_rewards(result: ModuleResult, baseline: ModuleResult,
                     floor: float = COST_FLOOR) -> dict[str, float]:
    """Function -> reward (-relative_change: positive when cheaper than the stock advisor),
    for every function either compile reports (an absent function cost 0)."""
    pol, base = function_costs(result), function_costs(baseline)
    return {fn: -relative_change(pol.get(fn, 0.0), base.get(fn, 0.0), floor)
            for fn in sorted(set(pol) | set(base))}


def module_cost(result: ModuleResult) -> float:
    return float(result.extra[COST_KEY])


def log_ratio(policy_cost: float, baseline_cost: float, floor: float = COST_FLOOR) -> float:
    """log((policy + floor) / (baseline + floor)): symmetric in better/worse, so a module
    whose cost halves counts as much as one whose cost doubles, whatever its size."""
    return math.log((policy_cost + floor) / (baseline_cost + floor))


def split_by_function(trajectory: Trajectory) -> dict[str, Trajectory]:
    """One trajectory per machine function (its channel context), decisions in order."""
    contexts = np.asarray(trajectory.contexts, dtype=object)
    out: dict[str, Trajectory] = {}
    for fn in dict.fromkeys(trajectory.contexts):
        rows = np.flatnonzero(contexts == fn)
        out[fn] = Trajectory(
            contexts=tuple(trajectory.contexts[i] for i in rows),
            features={k: v[rows] for k, v in trajectory.features.items()},
            advice=trajectory.advice[rows],
        )
    return out


def total_change(policy: Mapping[str, float], baseline: Mapping[str, float]) -> float:
    """Total cost of the modules both have, relative to the baseline's total (-0.02: 2%
    cheaper)."""
    common = [m for m in policy if m in baseline]
    base = sum(baseline[m] for m in common)
    return sum(policy[m] for m in common) / base - 1.0 if base else 0.0
