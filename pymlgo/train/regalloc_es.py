"""Evolution strategies for the learned eviction policy (numpy only).

`train/es.py` optimizes the inlining policy against .text size; register allocation needs
another policy type and another fitness, the allocator's weighted spill/reload/copy cost
from its remarks (`problems/regalloc`). Each iteration:

1. sample `modules_per_iteration` training modules and `population` Gaussian directions
   eps_i;
2. compile every module with the greedy policy at theta, theta + sigma*eps_i and
   theta - sigma*eps_i, all in one executor batch;
3. fitness of a member = -mean over modules of log((cost + 4) / (stock cost + 4)), so every
   module counts whatever its size (`reward.log_ratio`);
4. g = sum_i (F(+eps_i) - F(-eps_i)) eps_i / (2 * population * sigma) on centered ranks;
5. one Adam ascent step.

The policy starts as the stock rule rebuilt from the channel's features
(`policy/regalloc.py`), so training learns where to deviate from it. The driver
(`regalloc_run.train_regalloc`) keeps the iterate with the best validation fitness.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pymlgo.policy.regalloc import EvictionPolicy
from pymlgo.train.es import _centered_ranks, weighted_sum
from pymlgo.train.regalloc_env import RegallocEnv

_ADAM_EPS = 1e-8


@dataclass(frozen=True)
class RegallocESConfig:
    population: int = 6  # antithetic pairs: 2 * population + 1 compiles per module
    sigma: float = 0.2
    learning_rate: float = 0.05
    modules_per_iteration: int = 8
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999


class RegallocES:
    """Antithetic ES with Adam over the flat network parameters."""

    def __init__(self, cfg: RegallocESConfig, policy: EvictionPolicy, seed: int) -> None:
        if cfg.population < 1 or cfg.sigma <= 0:
            raise ValueError("es needs population >= 1 and sigma > 0")
        self.cfg = cfg
        self.template = policy.greedy()
        # float64 master copy: Adam's small steps must not vanish in float32 rounding
        self.theta = policy.network.flat().astype(np.float64)
        self.m = np.zeros_like(self.theta)
        self.v = np.zeros_like(self.theta)
        self.t = 0
        self.rng = np.random.default_rng(seed)

    def policy(self, theta: np.ndarray | None = None) -> EvictionPolicy:
        flat = self.theta if theta is None else theta
        return self.template.with_network(self.template.network.with_flat(flat))

    def iterate(self, env: RegallocEnv, iteration: int) -> dict[str, float]:
        cfg = self.cfg
        modules = env.sample_modules(self.rng, cfg.modules_per_iteration)
        eps = self.rng.standard_normal((cfg.population, self.theta.size))
        members = [self.policy()]  # member 0: theta; then +eps_i at 2i+1, -eps_i at 2i+2
        for e in eps:
            members += [self.policy(self.theta + cfg.sigma * e),
                        self.policy(self.theta - cfg.sigma * e)]
        costs = env.costs(members, modules)
        if not costs[0]:
            return {"es/common_modules": 0.0}
        fitness = np.array([env.fitness(c) for c in costs])
        shaped = _centered_ranks(fitness[1:])
        grad = weighted_sum(shaped[0::2] - shaped[1::2], eps) / (2 * cfg.population
                                                                 * cfg.sigma)
        self._adam_ascent(grad)
        return {
            "reward/train": float(fitness[0]),
            "es/fitness_best": float(fitness[1:].max()),
            "es/antithetic_spread": float(np.abs(fitness[1::2] - fitness[2::2]).mean()),
            "es/grad_norm": float(np.linalg.norm(grad)),
            "es/common_modules": float(len(costs[0])),
        }

    def _adam_ascent(self, grad: np.ndarray) -> None:
        cfg = self.cfg
        self.t += 1
        self.m = cfg.adam_beta1 * self.m + (1 - cfg.adam_beta1) * grad
        self.v = cfg.adam_beta2 * self.v + (1 - cfg.adam_beta2) * grad * grad
        m_hat = self.m / (1 - cfg.adam_beta1**self.t)
        v_hat = self.v / (1 - cfg.adam_beta2**self.t)
        self.theta = self.theta + cfg.learning_rate * m_hat / (np.sqrt(v_hat) + _ADAM_EPS)

    def state_dict(self) -> dict[str, Any]:
        return {"theta": self.theta.copy(), "m": self.m.copy(), "v": self.v.copy(), "t": self.t,
                "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.theta, self.m, self.v = state["theta"].copy(), state["m"].copy(), state["v"].copy()
        self.t = int(state["t"])
        self.rng.bit_generator.state = state["rng"]
