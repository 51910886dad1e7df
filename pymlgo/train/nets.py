"""The torch mirror of `MLPParams`, and the settings that make torch training reproducible.

`MLP` has exactly the layers of the numpy network (Linear, ReLU between layers), with
`linear.weight == W.T` for the numpy `W` of shape (in, out), so a policy converted either
way decides exactly as the other. Only the trainer process imports this (workers forbid
torch).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from pymlgo.policy.mlp import MLPParams


def make_deterministic(seed: int) -> None:
    """Same seed, same bytes: one thread (float sums in a fixed order), deterministic
    kernels, seeded global generator (nothing here draws from it, but libraries might)."""
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


class MLP(nn.Module):
    """ReLU MLP: sizes = (inputs, hidden..., outputs); no activation on the output."""

    def __init__(self, sizes: Sequence[int]) -> None:
        super().__init__()
        self.sizes = tuple(int(s) for s in sizes)
        self.layers = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(self.sizes[:-1], self.sizes[1:], strict=True)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = torch.relu(layer(x))
        return self.layers[-1](x)

    @classmethod
    def from_arrays(cls, weights: Sequence[np.ndarray], biases: Sequence[np.ndarray]) -> MLP:
        """Weights in numpy layout (in, out), as `MLPParams` holds them."""
        net = cls([weights[0].shape[0], *(w.shape[1] for w in weights)])
        with torch.no_grad():
            for layer, w, b in zip(net.layers, weights, biases, strict=True):
                layer.weight.copy_(torch.from_numpy(np.array(w, dtype=np.float32).T))
                layer.bias.copy_(torch.from_numpy(np.array(b, dtype=np.float32).reshape(-1)))
        return net

    @classmethod
    def from_params(cls, params: MLPParams) -> MLP:
        return cls.from_arrays(params.weights, params.biases)

    def arrays(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(weights, biases) in numpy layout, float32 copies."""
        weights = [layer.weight.detach().numpy().T.copy() for layer in self.layers]
        biases = [layer.bias.detach().numpy().copy() for layer in self.layers]
        return weights, biases

    def to_params(self) -> MLPParams:
        """The numpy network (this net must have one output: the logit of P(inline))."""
        weights, biases = self.arrays()
        return MLPParams(tuple(weights), tuple(biases))


def q_from_logit_params(params: MLPParams) -> MLP:
    """A two-output Q net (Q(no), Q(yes)) whose difference is `params`' logit.

    Splitting the logit as Q(yes) = z/2, Q(no) = -z/2 keeps the warm start's decisions.
    """
    w_out, b_out = params.weights[-1], params.biases[-1]
    weights = [*params.weights[:-1], np.concatenate([-w_out / 2, w_out / 2], axis=1)]
    biases = [*params.biases[:-1], np.concatenate([-b_out / 2, b_out / 2])]
    return MLP.from_arrays(weights, biases)


def logit_params_from_q(q: MLP) -> MLPParams:
    """The one-logit network with logit = Q(yes) - Q(no): `p >= 0.5` iff Q(yes) >= Q(no)."""
    weights, biases = q.arrays()
    w, b = weights[-1], biases[-1]
    weights[-1] = w[:, 1:2] - w[:, 0:1]
    biases[-1] = b[1:2] - b[0:1]
    return MLPParams(tuple(weights), tuple(biases))


def tensor(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
