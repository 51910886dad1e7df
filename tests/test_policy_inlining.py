"""InliningPolicy: the learned policy as the compile path runs it (numpy only)."""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.mlp import init_mlp
from pymlgo.policy.vocab import build_vocab
from tests.test_policy_vocab import skewed_columns


def make_policy(seed: int = 0, hidden: tuple[int, ...] = (40, 40, 20)) -> InliningPolicy:
    cols = skewed_columns(seed)
    vocab = build_vocab(cols)
    params = init_mlp(vocab.input_dim, hidden, np.random.default_rng(seed))
    return InliningPolicy(vocab, params, hidden=hidden, hyperparameters={"lr": 0.001})


def observations(seed: int = 5, n: int = 300) -> list[dict[str, np.ndarray]]:
    """What the compile path hands `decide`: name -> int64 tensor of shape [1]."""
    cols = skewed_columns(seed, n)
    return [{k: v[i : i + 1] for k, v in cols.items()} for i in range(n)]


def as_matrix(policy: InliningPolicy, obs: list[dict[str, np.ndarray]]) -> np.ndarray:
    return policy.vocab.matrix({k: np.concatenate([o[k] for o in obs]) for k in obs[0]})


def test_required_features_are_the_vocab_features_in_order():
    policy = make_policy()
    assert policy.required_features == policy.vocab.features
    assert policy.name == "mlp" and policy.version == "inlining-1.0"


def test_greedy_decisions_are_probability_at_least_one_half():
    policy = make_policy()
    obs = observations()
    p = policy.probabilities(as_matrix(policy, obs))
    decide = policy.for_module("zlib/deflate")
    decisions = np.array([decide(o) for o in obs])
    clear = np.abs(p - 0.5) > 1e-6  # matmul rounding may differ only at the threshold
    assert (decisions[clear] == (p[clear] >= 0.5)).all()
    assert set(decisions.tolist()) <= {0, 1}


def test_probabilities_are_sigmoid_of_the_network_output():
    policy = make_policy()
    x = as_matrix(policy, observations())
    logits = policy.params.forward(policy.vocab.normalize(x))
    p = policy.probabilities(x)
    assert p.dtype == np.float32 and ((p >= 0) & (p <= 1)).all()
    assert np.allclose(p, 1 / (1 + np.exp(-logits.astype(np.float64))), atol=1e-6)


def test_sampling_follows_the_probabilities_with_a_per_module_seed():
    policy = make_policy().sampling(seed=3)
    obs = observations(n=2000)

    def choices(module: str, pol: InliningPolicy = policy) -> list[int]:
        decide = pol.for_module(module)  # once per module, as the compile path does
        return [decide(o) for o in obs]

    run = choices("a")
    assert choices("a") == run  # same (seed, module): same choices, whichever worker
    assert choices("b") != run
    assert choices("a", policy.sampling(seed=4)) != run
    p = policy.probabilities(as_matrix(policy, obs))
    assert abs(np.mean(run) - p.mean()) < 0.05  # frequencies follow P(inline)


def test_sampling_and_greedy_switch_without_touching_the_weights():
    policy = make_policy()
    sampled = policy.sampling(11)
    assert sampled.sample and sampled.seed == 11 and sampled.params is policy.params
    assert not sampled.greedy().sample
    moved = policy.with_params(policy.params.with_flat(policy.params.flat() * 2))
    assert moved.vocab is policy.vocab and moved.params is not policy.params


def test_mismatched_hidden_sizes_or_input_width_are_rejected():
    policy = make_policy()
    with pytest.raises(ValueError, match="hidden sizes"):
        InliningPolicy(policy.vocab, policy.params, hidden=(64, 64))
    small = init_mlp(3, (40, 40, 20), np.random.default_rng(0))
    with pytest.raises(ValueError, match="inputs"):
        InliningPolicy(policy.vocab, small)
    with pytest.raises(ValueError, match="version"):
        InliningPolicy(policy.vocab, policy.params, version="inlining-1")


def test_policy_survives_pickling_to_a_worker():
    policy = make_policy().sampling(4)
    clone = pickle.loads(pickle.dumps(policy))
    obs = observations(n=200)
    d1, d2 = policy.for_module("m"), clone.for_module("m")
    assert [d1(o) for o in obs] == [d2(o) for o in obs]


def test_no_module_of_the_policy_package_imports_torch():
    # Compile workers load policies; they must stay light, with no torch installed.
    code = (
        "import importlib, pkgutil, sys, pymlgo.policy as p\n"
        "for m in pkgutil.iter_modules(p.__path__):\n"
        "    importlib.import_module(f'pymlgo.policy.{m.name}')\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
