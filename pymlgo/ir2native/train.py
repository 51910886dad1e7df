"""Fit IR2Native and measure it on held-out data against the instruction-count line.

Functions of one module share static helpers inlined into all of them, and modules of one
package share code style and macros, so a random split of functions leaks. Held-out sets
are whole units: packages (the default; the strictest) or modules. With `heldout` given,
one split; otherwise leave-one-package-out, or k folds of modules assigned by a seeded
shuffle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from pymlgo.ir2native.dataset import Dataset
from pymlgo.ir2native.model import InstructionCountModel, IR2NativeModel, seeded_folds

Split = Literal["package", "module"]
SPLITS: tuple[Split, ...] = ("package", "module")
DEFAULT_MODULE_FOLDS = 5


@dataclass(frozen=True)
class Metrics:
    functions: int
    mae: float  # bytes
    r2: float

    @classmethod
    def of(cls, y: np.ndarray, pred: np.ndarray) -> Metrics:
        ss = float(((y - y.mean()) ** 2).sum())
        r2 = 1.0 - float(((y - pred) ** 2).sum()) / ss if ss > 0 else float("nan")
        return cls(len(y), float(np.abs(y - pred).mean()), r2)


@dataclass(frozen=True)
class Fold:
    heldout: tuple[str, ...]  # packages or modules (`Evaluation.split`)
    train_functions: int
    model: Metrics
    baseline: Metrics


@dataclass(frozen=True)
class Evaluation:
    folds: tuple[Fold, ...]
    pooled_model: Metrics  # every held-out prediction together
    pooled_baseline: Metrics
    split: Split = "package"

    def to_json(self) -> dict[str, Any]:
        def m(x: Metrics) -> dict[str, float]:
            return {"functions": x.functions, "mae_bytes": x.mae, "r2": x.r2}

        return {
            "split": self.split,
            "folds": [{f"heldout_{self.split}s": list(f.heldout),
                       "train_functions": f.train_functions,
                       "ir2native": m(f.model), "instruction_count": m(f.baseline)}
                      for f in self.folds],
            "pooled": {"ir2native": m(self.pooled_model),
                       "instruction_count": m(self.pooled_baseline)},
        }


def arrays(ds: Dataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, sizes, package of each row)."""
    if not ds.rows:
        raise ValueError("the data set has no functions")
    x = np.array([r.features for r in ds.rows], dtype=np.float64)
    y = np.array([r.size for r in ds.rows], dtype=np.float64)
    return x, y, np.array([r.package for r in ds.rows])


def units(ds: Dataset, split: Split) -> np.ndarray:
    """The held-out unit of every row: its package or its module."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    return np.array([r.package if split == "package" else r.module for r in ds.rows])


def module_folds(modules: Sequence[str], k: int, seed: int) -> list[list[str]]:
    """`k` groups of modules of near-equal count, from a seeded shuffle of the sorted
    names (the same data set and seed always give the same folds)."""
    names = sorted(set(modules))
    if not 2 <= k <= len(names):
        raise ValueError(f"module folds must be between 2 and the number of modules "
                         f"({len(names)}), not {k}")
    return seeded_folds(names, k, seed)


def evaluate_heldout(
    ds: Dataset, heldout: Sequence[Sequence[str]] | None = None, *, l2: float | None = None,
    split: Split = "package", folds: int = DEFAULT_MODULE_FOLDS, seed: int = 0,
) -> Evaluation:
    """Fit on the other units, predict each held-out group; `heldout` None means
    leave-one-package-out (split "package") or `folds` seeded folds of modules."""
    x, y, _ = arrays(ds)
    unit, modules = units(ds, split), units(ds, "module")
    names = sorted(set(unit.tolist()))
    if heldout is not None:
        groups = [list(g) for g in heldout]
    elif split == "package":
        groups = [[p] for p in names]
    else:
        groups = module_folds(names, folds, seed)
    unknown = sorted({u for g in groups for u in g} - set(names))
    if unknown:
        raise ValueError(f"{split}(s) {', '.join(unknown)} not in the data set "
                         f"(it has: {', '.join(names)})")
    result: list[Fold] = []
    preds, base_preds, truth = [], [], []
    for group in groups:
        test = np.isin(unit, group)
        train = ~test
        if train.sum() < 2 or test.sum() == 0:
            raise ValueError(f"holding out {group} leaves too few functions to fit or test")
        model = IR2NativeModel.fit(ds.feature_names, x[train], y[train], l2=l2,
                                   groups=modules[train])
        base = InstructionCountModel.fit(ds.feature_names, x[train], y[train])
        p, b = model.predict(x[test]), base.predict(x[test])
        result.append(Fold(tuple(group), int(train.sum()), Metrics.of(y[test], p),
                           Metrics.of(y[test], b)))
        preds.append(p)
        base_preds.append(b)
        truth.append(y[test])
    t = np.concatenate(truth)
    return Evaluation(tuple(result), Metrics.of(t, np.concatenate(preds)),
                      Metrics.of(t, np.concatenate(base_preds)), split)


def fit(ds: Dataset, *, exclude_packages: Sequence[str] = (),
        exclude_modules: Sequence[str] = (), l2: float | None = None) -> IR2NativeModel:
    x, y, pkg = arrays(ds)
    modules = units(ds, "module")
    keep = ~np.isin(pkg, list(exclude_packages)) & ~np.isin(modules, list(exclude_modules))
    return IR2NativeModel.fit(ds.feature_names, x[keep], y[keep], l2=l2,
                              groups=modules[keep])


def format_evaluation(ev: Evaluation) -> str:
    def label(i: int, f: Fold) -> str:
        joined = ",".join(f.heldout)
        # a fold of many modules: its number and size (the JSON lists the modules)
        return joined if len(f.heldout) == 1 or len(joined) <= 40 else (
            f"fold {i + 1} ({len(f.heldout)} {ev.split}s)")

    rows = [(label(i, f), f.model, f.baseline) for i, f in enumerate(ev.folds)]
    if len(ev.folds) > 1:
        rows.append(("pooled", ev.pooled_model, ev.pooled_baseline))
    w = max([20, *(len(r[0]) for r in rows)])
    lines = [f"{'held out':<{w}} {'functions':>9}  {'IR2Native MAE':>13} {'R2':>6}   "
             f"{'#instr MAE':>10} {'R2':>6}"]
    for name, m, b in rows:
        lines.append(f"{name:<{w}} {m.functions:>9}  {m.mae:>13.1f} {m.r2:>6.3f}   "
                     f"{b.mae:>10.1f} {b.r2:>6.3f}")
    return "\n".join(lines)
