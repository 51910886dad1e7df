"""The numpy MLP: forward pass, flat parameter vector, initialization."""

from __future__ import annotations

import numpy as np
import pytest

from pymlgo.policy.mlp import MLPParams, init_mlp


def test_forward_gives_one_float32_logit_per_row():
    params = init_mlp(6, (40, 40, 20), np.random.default_rng(0))
    assert params.hidden == (40, 40, 20) and params.input_dim == 6
    out = params.forward(np.random.default_rng(1).random((7, 6)))
    assert out.shape == (7,) and out.dtype == np.float32


def test_forward_is_relu_mlp():
    w0 = np.array([[1.0, -1.0]], dtype=np.float32)  # 1 input -> 2 hidden
    w1 = np.array([[2.0], [3.0]], dtype=np.float32)  # 2 hidden -> logit
    params = MLPParams((w0, w1), (np.zeros(2), np.array([0.5])))
    # x = 1: hidden relu([1, -1]) = [1, 0] -> 2 + 0.5; x = -1: [0, 1] -> 3 + 0.5
    assert params.forward(np.array([[1.0], [-1.0]])).tolist() == [2.5, 3.5]


def test_flat_round_trip_and_perturbation():
    params = init_mlp(10, (8, 4), np.random.default_rng(0))
    v = params.flat()
    assert v.dtype == np.float32 and v.size == params.size == 10 * 8 + 8 + 8 * 4 + 4 + 4 + 1
    same = params.with_flat(v)
    x = np.random.default_rng(2).random((5, 10))
    assert np.array_equal(same.forward(x), params.forward(x))
    moved = params.with_flat(v + 0.1)
    assert not np.array_equal(moved.forward(x), params.forward(x))
    assert np.array_equal(params.flat(), v)  # the original is untouched
    with pytest.raises(ValueError, match="values"):
        params.with_flat(v[:-1])


def test_parameters_are_immutable_copies():
    w = np.ones((2, 1), dtype=np.float32)
    params = MLPParams((w,), (np.zeros(1),))
    w[0, 0] = 5.0
    assert params.weights[0][0, 0] == 1.0
    with pytest.raises(ValueError):
        params.weights[0][0, 0] = 2.0


def test_init_is_reproducible_from_the_generator():
    a = init_mlp(12, (40, 40, 20), np.random.default_rng(7)).flat()
    b = init_mlp(12, (40, 40, 20), np.random.default_rng(7)).flat()
    assert np.array_equal(a, b)
    assert not np.array_equal(a, init_mlp(12, (40, 40, 20), np.random.default_rng(8)).flat())


def test_shapes_that_do_not_chain_are_rejected():
    with pytest.raises(ValueError, match="chain"):
        MLPParams((np.ones((3, 4)), np.ones((5, 1))), (np.zeros(4), np.zeros(1)))
    with pytest.raises(ValueError, match="1 output"):
        MLPParams((np.ones((3, 2)),), (np.zeros(2),))
