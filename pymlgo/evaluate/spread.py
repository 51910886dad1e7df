"""How far a total's change rests on which packages were measured: a bootstrap over packages.

A corpus total is a sum over packages, and a few packages often hold most of it (one
held-out package, libvorbis, holds 83% of the register allocator's stock cost there). The
total's change then says more about those packages than about code in general. Resampling
whole packages with replacement, and taking the total change of each draw, gives an
interval for that: wide when one package decides the total, narrow when many agree.
Packages, not modules, are resampled: modules of one package share code and headers, so
they do not vary independently.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

DRAWS = 2000
LEVEL = 0.9


def package_interval(totals: Mapping[str, tuple[float, float]], *, draws: int = DRAWS,
                     level: float = LEVEL, seed: int = 0) -> tuple[float, float] | None:
    """The central `level` interval of the total change (policy sum / baseline sum - 1)
    over `draws` resamplings of the packages with replacement; `totals` maps a package to
    its (baseline, policy) sums. None with fewer than two packages (nothing to resample)
    or no baseline at all. Deterministic for a seed."""
    if not 0.0 < level < 1.0 or draws < 1:
        raise ValueError(f"need 0 < level < 1 and draws >= 1, got {level} and {draws}")
    if len(totals) < 2:
        return None
    names = sorted(totals)  # the draw order must not depend on the mapping's order
    base = np.array([float(totals[n][0]) for n in names])
    pol = np.array([float(totals[n][1]) for n in names])
    if base.sum() <= 0.0:
        return None
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(names), size=(draws, len(names)))
    b, p = base[picks].sum(axis=1), pol[picks].sum(axis=1)
    kept = b > 0.0  # a draw of packages with no baseline at all has no change
    if not kept.any():
        return None
    change = p[kept] / b[kept] - 1.0
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(change, [tail, 1.0 - tail])
    return float(lo), float(hi)


def largest_share(totals: Mapping[str, tuple[float, float]]) -> tuple[str, float] | None:
    """The package holding the largest part of the baseline total, and that part."""
    whole = sum(b for b, _ in totals.values())
    if whole <= 0.0:
        return None
    name = max(sorted(totals), key=lambda n: totals[n][0])
    return name, totals[name][0] / whole
