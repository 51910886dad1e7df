"""The learned eviction policy: per-column network, masked softmax, save/load (numpy only)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pymlgo.policy.regalloc import (
    FLAG_FEATURES,
    FLOAT_FEATURES,
    INPUT_DIM,
    INPUT_NAMES,
    PROGRESS,
    REQUIRED_FEATURES,
    STAGE_FEATURES,
    RegallocPolicyError,
    encode,
    initial_policy,
    load_eviction_policy,
    load_spec,
    masked_log_softmax,
    save_policy,
)
from pymlgo.problems.regalloc.policies import heuristic_choice


def decision(rng: np.random.Generator, columns: int, *, must_evict: bool = False) -> dict:
    """A synthetic observation as the channel delivers it: [1, C] tensors."""
    f = {n: rng.random((1, columns)).astype(np.float32) for n in FLOAT_FEATURES}
    for n in FLAG_FEATURES:
        f[n] = rng.integers(0, 2, (1, columns), dtype=np.int64)
    for n in STAGE_FEATURES:
        f[n] = rng.integers(0, 7, (1, columns), dtype=np.int64)
    mask = rng.integers(0, 2, (1, columns), dtype=np.int64)
    mask[0, rng.integers(0, columns - 1)] = 1
    mask[0, -1] = 0 if must_evict else 1
    f["mask"] = mask
    f[PROGRESS] = np.array([rng.random()], dtype=np.float32)
    return f


@pytest.mark.parametrize("columns", [5, 33, 40])
def test_inputs_have_one_row_per_column_whatever_the_column_count(columns):
    x = encode(decision(np.random.default_rng(columns), columns))
    assert x.shape == (columns, INPUT_DIM) and x.dtype == np.float32
    assert np.isfinite(x).all()
    assert x[:, INPUT_NAMES.index("is_candidate")].tolist() == [0.0] * (columns - 1) + [1.0]


def test_an_infinite_spill_weight_is_flagged_not_propagated():
    f = decision(np.random.default_rng(0), 6)
    f["use_def_density"][0, 2] = np.nan  # LLVM's inf / inf
    x = encode(f)
    assert np.isfinite(x).all()
    assert x[:, INPUT_NAMES.index("non_finite")].tolist() == [0, 0, 1, 0, 0, 0]


def test_the_untrained_policy_makes_the_stock_rules_choice():
    rng = np.random.default_rng(1)
    decide = initial_policy(0).for_module("m")
    for _ in range(300):
        f = decision(rng, 33, must_evict=rng.random() < 0.2)
        assert decide(f) == heuristic_choice(f)


def test_masked_columns_get_no_probability_and_are_never_chosen():
    rng = np.random.default_rng(2)
    policy = initial_policy(3)
    sampler = policy.sampling(7).for_module("m")
    for _ in range(200):
        f = decision(rng, 12, must_evict=rng.random() < 0.5)
        mask = f["mask"].reshape(-1)
        logp = policy.log_probs(encode(f), mask)
        assert np.isneginf(logp[mask != 1]).all()
        assert np.exp(logp[mask == 1]).sum() == pytest.approx(1.0, abs=1e-5)
        assert mask[sampler(f)] == 1
    assert masked_log_softmax(np.zeros(3), np.array([0, 1, 1])).tolist()[0] == -np.inf


def test_sampling_is_fixed_by_seed_and_module():
    rng = np.random.default_rng(4)
    obs = [decision(rng, 20) for _ in range(50)]
    policy = initial_policy(0).sampling(5)

    def run(p, module):
        d = p.for_module(module)
        return [d(f) for f in obs]

    assert run(policy, "a") == run(policy, "a")
    assert run(policy, "a") != run(policy, "b")


def test_save_load_round_trip_is_exact_and_byte_deterministic(tmp_path):
    policy = initial_policy(11, hidden=(8, 4))
    save_policy(policy, tmp_path / "p")
    save_policy(policy, tmp_path / "q")
    assert (tmp_path / "p/policy.json").read_bytes() == (tmp_path / "q/policy.json").read_bytes()
    loaded = load_eviction_policy(tmp_path / "p")
    assert (loaded.network.flat() == policy.network.flat()).all()
    assert loaded.hidden == (8, 4) and loaded.required_features == REQUIRED_FEATURES
    by_spec = load_spec(str(tmp_path / "p"), seed=3)
    assert by_spec.name == str(tmp_path / "p") and by_spec.seed == 3


def test_unknown_specs_and_foreign_files_are_refused(tmp_path):
    with pytest.raises(RegallocPolicyError, match="unknown regalloc policy"):
        load_spec("no-such-policy")
    (tmp_path / "policy.json").write_text('{"format": "pymlgo-policy"}')
    with pytest.raises(RegallocPolicyError, match="not a pymlgo-regalloc-policy"):
        load_eviction_policy(tmp_path)
    assert load_spec("heuristic").name == "heuristic"


def test_the_policy_path_does_not_import_torch():
    code = ("import sys; import pymlgo.policy.regalloc, pymlgo.problems.regalloc.compile, "
            "pymlgo.train.regalloc, pymlgo.train.es, pymlgo.train.trainer; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
