"""Behaviour cloning with `bc.lr_anneal_epochs`: the learning rate falls linearly to 0 over
that many epochs and stays there, a checkpoint carries the schedule (a resumed run ends with
the bytes of an uninterrupted one: `test_train_reproducible.py` runs it on real modules),
and the option is refused where it would do nothing."""

from __future__ import annotations

import numpy as np
import pytest

from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.mlp import init_mlp
from pymlgo.policy.vocab import build_vocab
from pymlgo.train.bc import BehaviourCloning
from pymlgo.train.config import BCConfig, ConfigError, make_config, to_dict
from pymlgo.train.env import Demonstrations

ROWS, BATCH = 200, 50  # 4 minibatches per epoch


def demonstrations(seed: int = 0) -> tuple[InliningPolicy, Demonstrations]:
    rng = np.random.default_rng(seed)
    cols = {"threshold": rng.integers(-50, 50, ROWS).astype(np.float64),
            "cost_estimate": rng.integers(-50, 50, ROWS).astype(np.float64)}
    vocab = build_vocab(cols, features=list(cols), quantiles=20)
    policy = InliningPolicy(vocab, init_mlp(vocab.input_dim, (8,), rng), hidden=(8,))
    y = (cols["threshold"] > cols["cost_estimate"]).astype(np.float32)
    return policy, Demonstrations(vocab.matrix(cols), y)


def cloner(anneal_epochs: int) -> BehaviourCloning:
    policy, demos = demonstrations()
    cfg = BCConfig(learning_rate=0.01, batch_size=BATCH, lr_anneal_epochs=anneal_epochs)
    return BehaviourCloning(cfg, policy, demos, None, seed=3)


def weights(bc: BehaviourCloning) -> list[np.ndarray]:
    return [p.detach().numpy().copy() for p in bc.net.parameters()]


def test_the_rate_falls_linearly_to_zero_over_the_epochs_given_and_stays_there():
    bc = cloner(anneal_epochs=4)
    assert bc.fit(1)["bc/learning_rate"] == pytest.approx(0.0075)
    assert bc.fit(1)["bc/learning_rate"] == pytest.approx(0.005)
    assert bc.fit(2)["bc/learning_rate"] == pytest.approx(0.0)
    before = weights(bc)
    bc.fit(2)  # at rate 0 the network no longer moves
    assert all(np.array_equal(a, b) for a, b in zip(before, weights(bc), strict=True))


def test_without_annealing_the_rate_stays_constant_and_is_not_reported():
    bc = cloner(anneal_epochs=0)
    assert "bc/learning_rate" not in bc.fit(2)
    assert bc.opt.param_groups[0]["lr"] == pytest.approx(0.01)


def test_a_cloner_restored_from_its_checkpoint_continues_the_schedule():
    whole = cloner(anneal_epochs=4)
    whole.fit(4)
    first = cloner(anneal_epochs=4)
    first.fit(2)
    state = first.state_dict()
    resumed = cloner(anneal_epochs=4)
    resumed.load_state_dict(state)
    resumed.fit(2)
    assert all(np.array_equal(a, b)
               for a, b in zip(weights(whole), weights(resumed), strict=True))


def test_annealing_is_refused_where_it_would_do_nothing_and_left_out_of_provenance_when_off():
    with pytest.raises(ConfigError, match="lr_anneal_epochs must be >= 0"):
        make_config(algo="bc", warmstart="", bc={"lr_anneal_epochs": -1})
    with pytest.raises(ConfigError, match="a warm start keeps a constant rate"):
        make_config(algo="ppo", warmstart="bc", bc={"lr_anneal_epochs": 4})
    assert "lr_anneal_epochs" not in to_dict(make_config(algo="bc", warmstart=""))["bc"]
    on = to_dict(make_config(algo="bc", warmstart="", bc={"lr_anneal_epochs": 4}))
    assert on["bc"]["lr_anneal_epochs"] == 4
