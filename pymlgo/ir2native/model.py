"""The IR2Native regression: a function's native bytes from its post-inlining IR features.

Two linear models whose errors differ, averaged (numpy only, so the compile path can use
it without torch):

- additive: bytes = sum_k cost_k * count_k + c with every cost >= 0 (non-negative least
  squares by coordinate descent): each opcode class has a byte cost;
- multiplicative: bytes = instructions * exp(w . g(x)), a ridge fit of log bytes per
  instruction on the opcode mix (class fractions) and log counts: dense arithmetic code
  and call-heavy glue code differ in bytes per IR instruction.

The ridge penalty of the multiplicative part is chosen per fit, by cross-validation
inside the training data with whole modules (`groups`) held out: a penalty tuned on
functions of the same module rewards memorizing that module's opcode mix. On the demo
corpus, over 4 seeds of 5 module folds, this gave pooled held-out R² 0.956-0.962 where a
fixed penalty of 100 gave 0.951-0.959 (`benchmarks/ir2native_quality.py`).

The baseline it is judged against is `InstructionCountModel`: a least-squares line on the
instruction count alone.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

FORMAT = "pymlgo-ir2native-model"
COUNT_FEATURE = "instructions"
_CD_SWEEPS = 3000
L2_GRID = (10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0)
_INNER_FOLDS = 4
T = TypeVar("T")


def nnls(a: np.ndarray, y: np.ndarray, *, free_last: bool = True) -> np.ndarray:
    """min ||a w - y||^2 with w >= 0 (the last column unconstrained if `free_last`), by
    cyclic coordinate descent on the normal equations: deterministic, no scipy."""
    g, b = a.T @ a, a.T @ y
    w = np.zeros(a.shape[1])
    diag = np.diag(g)
    for _ in range(_CD_SWEEPS):
        delta = 0.0
        for j in range(len(w)):
            if diag[j] <= 0:
                continue
            new = w[j] - (g[j] @ w - b[j]) / diag[j]
            if not (free_last and j == len(w) - 1):
                new = max(0.0, new)
            delta = max(delta, abs(new - w[j]))
            w[j] = new
        if delta < 1e-9 * (1.0 + np.abs(w).max()):
            break
    return w


def ridge(z: np.ndarray, y: np.ndarray, l2: float) -> np.ndarray:
    """Ridge weights for standardized `z` plus an unpenalized intercept (last weight)."""
    a = np.c_[z, np.ones(len(z))]
    reg = l2 * np.eye(a.shape[1])
    reg[-1, -1] = 0.0
    return np.linalg.solve(a.T @ a + reg, a.T @ y)


@dataclass(frozen=True)
class InstructionCountModel:
    """Baseline: bytes = slope * instructions + intercept."""

    feature_names: tuple[str, ...]
    slope: float = 0.0
    intercept: float = 0.0

    @classmethod
    def fit(cls, names: tuple[str, ...], x: np.ndarray, y: np.ndarray) -> InstructionCountModel:
        n = x[:, names.index(COUNT_FEATURE)]
        slope, intercept = np.polyfit(n, y, 1) if len(set(n)) > 1 else (0.0, float(y.mean()))
        return cls(names, float(slope), float(intercept))

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.slope * x[:, self.feature_names.index(COUNT_FEATURE)] + self.intercept


@dataclass(frozen=True, eq=False)
class IR2NativeModel:
    feature_names: tuple[str, ...]
    l2: float
    costs: np.ndarray  # additive: per feature (0 for `instructions`), then the constant
    mean: np.ndarray  # multiplicative: standardization of g(x)
    scale: np.ndarray
    weights: np.ndarray  # multiplicative: ridge weights on standardized g(x), then intercept

    @classmethod
    def fit(cls, names: tuple[str, ...], x: np.ndarray, y: np.ndarray,
            l2: float | None = None, groups: np.ndarray | None = None) -> IR2NativeModel:
        """`l2` None: chosen from `L2_GRID` by cross-validation over `groups` (each
        row's module; None: folds of rows)."""
        if len(x) < 2:
            raise ValueError("IR2Native needs at least two functions to fit")
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        ic = names.index(COUNT_FEATURE)
        # `instructions` is the sum of the classes: leave it out of the additive model.
        additive = x.copy()
        additive[:, ic] = 0.0
        costs = nnls(np.c_[additive, np.ones(len(x))], y)
        if l2 is None:
            l2 = select_l2(x, y, ic, groups)
        mean, scale, weights = _fit_multiplicative(x, y, ic, l2)
        return cls(names, l2, costs, mean, scale, weights)

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        ic = self.feature_names.index(COUNT_FEATURE)
        additive = x.copy()
        additive[:, ic] = 0.0
        add = np.c_[additive, np.ones(len(x))] @ self.costs
        mul = _predict_multiplicative(x, ic, self.mean, self.scale, self.weights)
        return 0.5 * (add + mul)

    def predict_one(self, features: dict[str, float]) -> float:
        """Bytes of one function from its feature dict (`features.function_features`)."""
        return float(self.predict(np.array([[features[n] for n in self.feature_names]]))[0])

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": 1,
            "feature_names": list(self.feature_names),
            "l2": self.l2,
            "costs": self.costs.tolist(),
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "weights": self.weights.tolist(),
        }

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.to_json(), f, indent=1)
                f.write("\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def load_model(path: Path) -> IR2NativeModel:
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read IR2Native model {path}: {exc}") from exc
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ValueError(f"{path} is not an IR2Native model (made by `mlgo ir2native train`)")
    return IR2NativeModel(tuple(d["feature_names"]), float(d["l2"]),
                          *(np.array(d[k], dtype=np.float64)
                            for k in ("costs", "mean", "scale", "weights")))


def _fit_multiplicative(x: np.ndarray, y: np.ndarray, ic: int, l2: float
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    g = _mix(x, ic)
    mean, scale = g.mean(axis=0), g.std(axis=0)
    scale[scale == 0] = 1.0
    target = np.log((y + 1.0) / np.maximum(x[:, ic], 1.0))
    return mean, scale, ridge((g - mean) / scale, target, l2)


def _predict_multiplicative(x: np.ndarray, ic: int, mean: np.ndarray, scale: np.ndarray,
                            weights: np.ndarray) -> np.ndarray:
    z = (_mix(x, ic) - mean) / scale
    return np.maximum(x[:, ic], 1.0) * np.exp(np.c_[z, np.ones(len(z))] @ weights)


def select_l2(x: np.ndarray, y: np.ndarray, ic: int, groups: np.ndarray | None = None,
              grid: tuple[float, ...] = L2_GRID) -> float:
    """The penalty in `grid` whose multiplicative part has the lowest byte MAE on held-out
    groups (`_INNER_FOLDS` folds of a seeded shuffle of the group names; rows when
    `groups` is None). Ties and too little data go to the larger penalty."""
    labels = np.arange(len(x)) if groups is None else np.asarray(groups)
    names = np.unique(labels).tolist()
    k = min(_INNER_FOLDS, len(names))
    if k < 2:
        return max(grid)
    fold_of = {v: j for j, group in enumerate(seeded_folds(names, k, seed=0)) for v in group}
    fold = np.array([fold_of[v] for v in labels.tolist()])
    best, best_mae = max(grid), np.inf
    for l2 in sorted(grid, reverse=True):
        pred = np.empty(len(y))
        for j in range(k):
            test = fold == j
            params = _fit_multiplicative(x[~test], y[~test], ic, l2)
            pred[test] = _predict_multiplicative(x[test], ic, *params)
        mae = float(np.abs(pred - y).mean())
        if mae < best_mae:
            best, best_mae = l2, mae
    return best


def seeded_folds(names: Sequence[T], k: int, seed: int) -> list[list[T]]:
    """`k` groups of near-equal size from a seeded shuffle of `names` (distinct, sorted):
    the same names and seed always give the same groups, each sorted."""
    order = np.random.default_rng(seed).permutation(len(names))
    return [sorted(names[i] for i in order[j::k]) for j in range(k)]


def _mix(x: np.ndarray, ic: int) -> np.ndarray:
    """Inputs of the multiplicative part: opcode mix (fractions) and log counts."""
    return np.c_[x / np.maximum(x[:, [ic]], 1.0), np.log1p(np.maximum(x, 0.0))]
