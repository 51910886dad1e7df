"""The numpy MLP: forward pass, flat parameter vector, initialization."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np
import pytest

from pymlgo.policy.mlp import MLPParams, affine, init_mlp


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


# What every CPU must compute alike: the pretrained policy's logits (a block of rows, and
# row by row as the compile path does), an eviction network's scores, and an ES gradient.
_ARITHMETIC = """
import hashlib, numpy as np
from pymlgo.policy.inlining import _row_logit_fn
from pymlgo.policy.regalloc import INPUT_DIM, init_network
from pymlgo.policy.store import load_policy
from pymlgo.train.es import weighted_sum
rng = np.random.default_rng(7)
policy = load_policy("pretrained:inlining-oz")
x = rng.integers(0, 400, (300, len(policy.vocab.raw_features))).astype(np.int64)
rows = _row_logit_fn(policy.vocab, policy.params)
one = np.array([rows({n: np.array([v]) for n, v in zip(policy.vocab.raw_features, r)})
                for r in x], dtype=np.float32)
batch = policy.logits(x)
assert np.array_equal(one, batch), "row by row differs from the block"
scores = init_network(rng).scores(rng.random((40, 33, INPUT_DIM)).astype(np.float32))
grad = weighted_sum(rng.standard_normal(6), rng.standard_normal((6, 5000)))
print(hashlib.sha256(batch.tobytes() + scores.tobytes() + grad.tobytes()).hexdigest())
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="OpenBLAS x86 kernel names")
def test_policy_arithmetic_gives_the_same_bits_whatever_the_cpu_kernels():
    # OpenBLAS picks its kernels per CPU and numpy its SIMD width; both can be forced
    # down to what any x86-64 runs. BLAS matmuls gave other last bits under each choice.
    runs = {}
    for label, extra in (
        ("native", {}),
        ("openblas-prescott", {"OPENBLAS_CORETYPE": "Prescott"}),
        ("openblas-nehalem", {"OPENBLAS_CORETYPE": "Nehalem"}),
        ("numpy-baseline-simd", {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL"}),
    ):
        env = {**os.environ, **extra}
        res = subprocess.run([sys.executable, "-c", _ARITHMETIC], env=env, capture_output=True,
                             text=True, check=False, timeout=300)
        assert res.returncode == 0, (label, res.stderr[-2000:])
        runs[label] = res.stdout.strip()
    assert len(set(runs.values())) == 1, runs


def test_affine_is_a_matrix_product_plus_bias():
    rng = np.random.default_rng(3)
    h, w, b = (rng.random((600, 9)).astype(np.float32), rng.random((9, 5)).astype(np.float32),
               rng.random(5).astype(np.float32))
    np.testing.assert_allclose(affine(h, w, b), h @ w + b, rtol=1e-5)
    assert np.array_equal(affine(h[3], w, b), affine(h, w, b)[3])  # one row = its block row
