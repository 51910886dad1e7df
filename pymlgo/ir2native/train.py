"""Fit IR2Native and measure it on held-out packages against the instruction-count line.

Functions of one package share code style, macros and inlined helpers, so a random split
of functions (or even of modules) leaks; the held-out sets are whole packages: with
`heldout` given, one split; otherwise leave-one-package-out over every package.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pymlgo.ir2native.dataset import Dataset
from pymlgo.ir2native.model import InstructionCountModel, IR2NativeModel


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
    heldout: tuple[str, ...]  # packages
    train_functions: int
    model: Metrics
    baseline: Metrics


@dataclass(frozen=True)
class Evaluation:
    folds: tuple[Fold, ...]
    pooled_model: Metrics  # every held-out prediction together
    pooled_baseline: Metrics

    def to_json(self) -> dict[str, Any]:
        def m(x: Metrics) -> dict[str, float]:
            return {"functions": x.functions, "mae_bytes": x.mae, "r2": x.r2}

        return {
            "folds": [{"heldout_packages": list(f.heldout), "train_functions": f.train_functions,
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


def evaluate_heldout(
    ds: Dataset, heldout: Sequence[Sequence[str]] | None = None, *, l2: float = 100.0
) -> Evaluation:
    """Fit on the other packages, predict each held-out group; `heldout` None means
    leave-one-package-out."""
    x, y, pkg = arrays(ds)
    packages = sorted(set(pkg.tolist()))
    groups = [list(g) for g in heldout] if heldout is not None else [[p] for p in packages]
    unknown = sorted({p for g in groups for p in g} - set(packages))
    if unknown:
        raise ValueError(f"package(s) {', '.join(unknown)} not in the data set "
                         f"(it has: {', '.join(packages)})")
    folds: list[Fold] = []
    preds, base_preds, truth = [], [], []
    for group in groups:
        test = np.isin(pkg, group)
        train = ~test
        if train.sum() < 2 or test.sum() == 0:
            raise ValueError(f"holding out {group} leaves too few functions to fit or test")
        model = IR2NativeModel.fit(ds.feature_names, x[train], y[train], l2=l2)
        base = InstructionCountModel.fit(ds.feature_names, x[train], y[train])
        p, b = model.predict(x[test]), base.predict(x[test])
        folds.append(Fold(tuple(group), int(train.sum()), Metrics.of(y[test], p),
                          Metrics.of(y[test], b)))
        preds.append(p)
        base_preds.append(b)
        truth.append(y[test])
    t = np.concatenate(truth)
    return Evaluation(tuple(folds), Metrics.of(t, np.concatenate(preds)),
                      Metrics.of(t, np.concatenate(base_preds)))


def fit(ds: Dataset, *, exclude_packages: Sequence[str] = (), l2: float = 100.0
        ) -> IR2NativeModel:
    x, y, pkg = arrays(ds)
    keep = ~np.isin(pkg, list(exclude_packages))
    return IR2NativeModel.fit(ds.feature_names, x[keep], y[keep], l2=l2)


def format_evaluation(ev: Evaluation) -> str:
    lines = [f"{'held out':<20} {'functions':>9}  {'IR2Native MAE':>13} {'R2':>6}   "
             f"{'#instr MAE':>10} {'R2':>6}"]
    rows = [(",".join(f.heldout), f.model, f.baseline) for f in ev.folds]
    if len(ev.folds) > 1:
        rows.append(("pooled", ev.pooled_model, ev.pooled_baseline))
    for name, m, b in rows:
        lines.append(f"{name:<20} {m.functions:>9}  {m.mae:>13.1f} {m.r2:>6.3f}   "
                     f"{b.mae:>10.1f} {b.r2:>6.3f}")
    return "\n".join(lines)
