"""The files in configs/ are what the README says they are: every config it names exists,
and every training config there loads (an unknown key or a bad value fails the load)."""

import re
from pathlib import Path

import pytest

from pymlgo.train.config import load_config

ROOT = Path(__file__).resolve().parent.parent
# not a training config: benchmarks/policy_quality.py's variants, each a partial config
NOT_TRAINING = {"policy-quality-variants.toml"}


def test_every_config_the_readme_names_is_in_the_repository():
    named = set(re.findall(r"configs/[A-Za-z0-9_.-]+", (ROOT / "README.md").read_text()))
    assert named, "the README names no config"
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing


@pytest.mark.parametrize("path", sorted(p.name for p in (ROOT / "configs").glob("*.toml")
                                        if p.name not in NOT_TRAINING))
def test_every_training_config_loads(path):
    config = load_config(ROOT / "configs" / path)
    assert config.iterations and config.iterations > 0
