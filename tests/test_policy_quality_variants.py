"""The training variants `benchmarks/policy_quality.py --variants` reads from
configs/policy-quality-variants.toml each make a valid training config."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import policy_quality  # noqa: E402


def test_every_shipped_variant_is_a_valid_training_config():
    variants = policy_quality.load_variants(ROOT / "configs/policy-quality-variants.toml")
    assert "bc-best-window-cxx" in variants  # the shipped model's algorithm
    for name in variants:
        config = policy_quality._config(name, variants, 0, 10.0, 0.0, "", "package")
        assert config.algo == variants[name]["algo"]
    shipped = policy_quality._config("bc-best-window-cxx", variants, 0, 10.0, 0.0, "",
                                     "package")
    assert shipped.bc.teacher == "best:shift:2:30:3:0,shift:2"
    assert shipped.policy.differences == ("threshold-cost_estimate",)
    assert shipped.policy.window == "shift:2:30:3:0"
    assert shipped.policy.languages == ("c++",)


def test_the_shipped_algorithms_variant_trains_as_the_shipped_config_does():
    from pymlgo.train.config import load_config

    variants = policy_quality.load_variants(ROOT / "configs/policy-quality-variants.toml")
    variant = policy_quality._config("bc-best-window-cxx", variants, 0, 10.0, 0.0, "",
                                     "package")
    shipped = load_config(ROOT / "configs/pretrained-inlining-oz.toml")
    for key in ("algo", "iterations", "eval_every"):
        assert getattr(variant, key) == getattr(shipped, key), key
    assert variant.bc == shipped.bc
    assert variant.policy.differences == shipped.policy.differences
    assert variant.policy.window == shipped.policy.window
    assert variant.policy.languages == shipped.policy.languages
