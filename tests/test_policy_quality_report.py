"""`benchmarks/policy_quality.py`'s k-fold summary: issue 24's two big-module limits (the
>= 64 KB bucket in every fold, and the held-out big module grown most) are in the JSON and
the printed table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import policy_quality  # noqa: E402

from pymlgo.evaluate.eval import EvalReport, ModuleRow  # noqa: E402

COMPILER = {"path": "clang", "version": "22"}


def fold(rows: tuple[ModuleRow, ...]) -> EvalReport:
    return EvalReport("inlining", "bc", COMPILER, rows)


def test_a_fold_summary_names_the_big_module_the_policy_grew_most():
    report = fold((ModuleRow("zlib/_unity/u0", 100_000, 100_800, 1, None),
                   ModuleRow("zlib/inflate", 5_000, 4_000, 1, None)))
    grown = policy_quality.summary(report)["largest_growth_of_a_big_module"]
    assert grown["module"] == "zlib/_unity/u0"
    assert grown["change"] == pytest.approx(0.008)


def test_the_big_bucket_is_reported_per_fold_and_the_table_shows_the_worst_fold():
    folds = [fold((ModuleRow("a/big", 100_000, 90_000, 1, None),)),
             fold((ModuleRow("b/big", 100_000, 100_010, 1, None),))]
    entry = policy_quality.overall_entry("bc", folds, [None, None])
    assert entry["fold_big_bucket_changes"] == [pytest.approx(-0.1), pytest.approx(0.0001)]
    assert entry["pooled"]["by_bucket"][">=64KB"]["change"] == pytest.approx(-0.04995)
    table = policy_quality.markdown({"fold_results": [{"fold": 0}, {"fold": 1}],
                                     "overall": {"bc": entry}})
    # the pooled bucket shrinks by 5%, yet fold 1 grew its big module: both are shown
    assert "| -5.00% (2) | +0.01% | b/big +0.01% |" in table
