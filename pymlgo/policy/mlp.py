"""The policy network as plain numpy arrays: a ReLU MLP ending in one logit, alone or with
a linear skip term (`SkipMLP`, the register allocation policies' network).

Training code (torch) converts to and from `MLPParams`; compile workers only ever run the
numpy forward pass here, so they never need torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

_ROWS_PER_BLOCK = 256  # bounds affine's temporary to 256 * in * out values


def affine(h: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`h @ w + b` for one row (in,) or rows (n, in), the products summed in one fixed
    order (input 0, then 1, ...), so the result is the same on every CPU.

    BLAS does not promise that: OpenBLAS picks its kernels per CPU, and they sum in other
    orders (measured: SkylakeX, Haswell and Prescott kernels give three different last bits
    for the same float32 product). A policy's decisions, and the bytes training writes,
    would then depend on the machine. Each multiply and add here is one correctly rounded
    IEEE operation, whatever SIMD width numpy uses. One row and a block of rows give the
    same bits. Slower than BLAS (~30 us for a 76-40-40-20-1 network, one row), which the
    compile path does not notice."""
    if h.ndim == 1:
        out = (h[:, None] * w).sum(axis=0)
    else:
        out = np.empty((h.shape[0], w.shape[1]), dtype=np.result_type(h, w))
        for start in range(0, h.shape[0], _ROWS_PER_BLOCK):
            block = h[start:start + _ROWS_PER_BLOCK]
            np.add.reduce(block.T[:, :, None] * w[:, None, :], axis=0,
                          out=out[start:start + _ROWS_PER_BLOCK])
    out += b
    return out


@dataclass(frozen=True, eq=False)  # eq=False: ndarray fields make generated __eq__ raise
class MLPParams:
    weights: tuple[np.ndarray, ...]  # float32, shapes (in, h1), (h1, h2), ..., (hk, 1)
    biases: tuple[np.ndarray, ...]  # float32, shapes (h1,), ..., (1,)

    def __post_init__(self) -> None:
        if not self.weights or len(self.weights) != len(self.biases):
            raise ValueError(
                f"an MLP needs >= 1 layer and one bias per weight matrix, got "
                f"{len(self.weights)} weights and {len(self.biases)} biases"
            )
        weights, biases = [], []
        prev: int | None = None
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            # Copy to owned, read-only float32: a frozen policy shared by workers stays put.
            w = np.array(w, dtype=np.float32)
            b = np.array(b, dtype=np.float32).reshape(-1)
            if w.ndim != 2 or (prev is not None and w.shape[0] != prev) or b.shape != (w.shape[1],):
                raise ValueError(
                    f"layer {i}: weight {w.shape} / bias {b.shape} do not chain "
                    f"(previous layer width {prev})"
                )
            w.flags.writeable = b.flags.writeable = False
            weights.append(w)
            biases.append(b)
            prev = w.shape[1]
        if prev != 1:
            raise ValueError(f"the last layer must have 1 output (a logit), has {prev}")
        object.__setattr__(self, "weights", tuple(weights))
        object.__setattr__(self, "biases", tuple(biases))

    @property
    def input_dim(self) -> int:
        return int(self.weights[0].shape[0])

    @property
    def hidden(self) -> tuple[int, ...]:
        return tuple(int(w.shape[1]) for w in self.weights[:-1])

    @property
    def size(self) -> int:
        """Number of parameters (length of `flat()`)."""
        return sum(w.size + b.size for w, b in zip(self.weights, self.biases, strict=True))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """(n, in) inputs -> (n,) float32 logits; ReLU between layers, none on the output."""
        h = np.asarray(x, dtype=np.float32)
        if h.ndim != 2 or h.shape[1] != self.input_dim:
            raise ValueError(f"expected inputs of shape (n, {self.input_dim}), got {h.shape}")
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = affine(h, w, b)
            if i < last:
                np.maximum(h, 0.0, out=h)
        return h[:, 0]

    def flat(self) -> np.ndarray:
        """All parameters as one float32 vector: per layer, the weight (row-major) then the
        bias. `with_flat` inverts it (ES perturbs this vector)."""
        parts = [
            p.reshape(-1) for w, b in zip(self.weights, self.biases, strict=True) for p in (w, b)
        ]
        return np.concatenate(parts).astype(np.float32, copy=False)

    def with_flat(self, v: np.ndarray) -> MLPParams:
        v = np.asarray(v, dtype=np.float32).reshape(-1)
        if v.size != self.size:
            raise ValueError(f"flat vector has {v.size} values, the MLP has {self.size}")
        weights, biases, at = [], [], 0
        for w, b in zip(self.weights, self.biases, strict=True):
            weights.append(v[at : at + w.size].reshape(w.shape))
            at += w.size
            biases.append(v[at : at + b.size])
            at += b.size
        return MLPParams(tuple(weights), tuple(biases))


def init_mlp(input_dim: int, hidden: Sequence[int], rng: np.random.Generator) -> MLPParams:
    """Glorot-uniform weights (Keras' default, which MLGO's TF-Agents networks use), zero
    biases; the output layer gives one logit."""
    dims = [int(input_dim), *(int(h) for h in hidden), 1]
    if any(d < 1 for d in dims):
        raise ValueError(f"layer widths must be >= 1, got {dims}")
    weights, biases = [], []
    for fan_in, fan_out in zip(dims[:-1], dims[1:], strict=True):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        weights.append(rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32))
        biases.append(np.zeros(fan_out, dtype=np.float32))
    return MLPParams(tuple(weights), tuple(biases))


_Net = TypeVar("_Net", bound="SkipMLP")


@dataclass(frozen=True, eq=False)  # eq=False: holds arrays
class SkipMLP:
    """score(x) = mlp(x) + skip . x: the skip term holds a hand-written rule the untrained
    policy follows exactly or nearly (the MLP starts small), so training learns departures
    from it."""

    mlp: MLPParams
    skip: np.ndarray  # (input_dim,) float32

    def __post_init__(self) -> None:
        skip = np.array(self.skip, dtype=np.float32).reshape(-1)
        if skip.size != self.mlp.input_dim:
            raise ValueError(f"network takes {self.mlp.input_dim} inputs and the skip has "
                             f"{skip.size}")
        skip.flags.writeable = False
        object.__setattr__(self, "skip", skip)

    @property
    def input_dim(self) -> int:
        return self.mlp.input_dim

    @property
    def size(self) -> int:
        return self.mlp.size + self.skip.size

    def scores(self, x: np.ndarray) -> np.ndarray:
        """(..., input_dim) inputs -> (...) float32 scores."""
        x = np.asarray(x, dtype=np.float32)
        lead = x.shape[:-1]
        flat = x.reshape(-1, self.input_dim)
        skip = affine(flat, self.skip[:, None], np.zeros(1, np.float32))[:, 0]
        return (self.mlp.forward(flat) + skip).reshape(lead)

    def flat(self) -> np.ndarray:
        return np.concatenate((self.mlp.flat(), self.skip))

    def with_flat(self: _Net, v: np.ndarray) -> _Net:
        """The same kind of network (a subclass stays itself) with parameters `v`."""
        v = np.asarray(v, dtype=np.float32).reshape(-1)
        if v.size != self.size:
            raise ValueError(f"flat vector has {v.size} values, the network has {self.size}")
        return type(self)(self.mlp.with_flat(v[: self.mlp.size]), v[self.mlp.size :])
