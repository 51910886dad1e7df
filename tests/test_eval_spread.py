"""The package bootstrap behind `mlgo eval`'s interval: how far a total rests on a few
packages."""

from __future__ import annotations

import pytest

from pymlgo.evaluate.spread import largest_share, package_interval


def test_packages_that_agree_give_a_point():
    same = {f"p{i}": (100.0 * (i + 1), 95.0 * (i + 1)) for i in range(6)}
    lo, hi = package_interval(same)
    assert lo == pytest.approx(-0.05) and hi == pytest.approx(-0.05)


def test_one_package_holding_the_total_makes_the_interval_wide():
    # the big package is -10%, five small ones +10%: the total is -9%, but a resampling
    # without the big package is +10%
    totals = {"big": (1000.0, 900.0), **{f"s{i}": (10.0, 11.0) for i in range(5)}}
    lo, hi = package_interval(totals)
    assert lo == pytest.approx(-0.10, abs=0.005)
    assert hi == pytest.approx(0.10)
    assert largest_share(totals) == ("big", pytest.approx(1000 / 1050))


def test_the_interval_is_deterministic_for_a_seed_and_ignores_the_mapping_order():
    totals = {"a": (100.0, 90.0), "b": (300.0, 330.0), "c": (50.0, 50.0), "d": (80.0, 70.0)}
    reordered = dict(reversed(list(totals.items())))
    assert package_interval(totals, seed=3) == package_interval(reordered, seed=3)
    assert package_interval(totals, seed=3) != package_interval(totals, seed=4)


@pytest.mark.parametrize("totals", [{}, {"only": (10.0, 9.0)},
                                    {"a": (0.0, 0.0), "b": (0.0, 5.0)}])
def test_no_interval_without_two_packages_or_a_baseline(totals):
    assert package_interval(totals) is None


def test_a_draw_of_packages_without_baseline_is_left_out():
    lo, hi = package_interval({"zero": (0.0, 0.0), "a": (100.0, 80.0), "b": (100.0, 80.0)})
    assert lo == pytest.approx(-0.2) and hi == pytest.approx(-0.2)


@pytest.mark.parametrize(("level", "draws"), [(0.0, 100), (1.0, 100), (0.9, 0)])
def test_a_level_or_draw_count_out_of_range_is_an_error(level, draws):
    with pytest.raises(ValueError, match="0 < level < 1"):
        package_interval({"a": (1.0, 1.0), "b": (1.0, 2.0)}, level=level, draws=draws)
