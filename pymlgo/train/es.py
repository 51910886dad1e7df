"""Evolution strategies on the flat policy parameters (numpy only, no torch), for every
problem whose policy has flat parameters (`flat()`, `with_flat()`).

Each iteration:
1. sample a batch of training modules and `population` Gaussian directions eps_i;
2. compile every module with the greedy policy at theta + sigma*eps_i and theta - sigma*eps_i
   (antithetic pairs cancel the fitness' common part), plus theta itself for the scalars;
3. fitness of a member, from the problem's scoring (`hooks.Scoring.fitness`) over the
   modules every member compiled (so members are compared on the same modules). For
   inlining: -(total size / total -Oz size - 1) by default (`reward_weighting` "default"
   or "bytes"); with "module" the mean over those modules of 1 - size / -Oz size, every
   module counting the same. For register allocation: -mean log((cost + 4) / (stock + 4))
   by default, every module counting the same; with "cost" -(total cost / total stock - 1);
4. gradient estimate g = sum_i (F(+eps_i) - F(-eps_i)) eps_i / (2 * population * sigma),
   with F the centered ranks of the fitnesses (default; robust to outliers) or raw fitness;
5. one Adam ascent step on theta.

The greedy policy is deterministic, so all the noise is in the module batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pymlgo.problems.base import Policy
from pymlgo.train.config import ESConfig
from pymlgo.train.env import TrainEnv

_ADAM_EPS = 1e-8


class EvolutionStrategies:
    def __init__(self, cfg: ESConfig, policy: Any, seed: int,
                 weighting: str = "default") -> None:
        self.cfg = cfg
        self.weighting = weighting
        self.template = policy.greedy()
        # float64 master copy: Adam's small steps must not vanish in float32 rounding
        self.theta = policy.flat().astype(np.float64)
        self.m = np.zeros_like(self.theta)
        self.v = np.zeros_like(self.theta)
        self.t = 0
        self.rng = np.random.default_rng(seed)

    def policy(self, theta: np.ndarray | None = None) -> Policy:
        flat = self.theta if theta is None else theta
        return self.template.with_flat(flat)  # type: ignore[no-any-return]

    def iterate(self, env: TrainEnv, iteration: int) -> dict[str, float]:
        cfg = self.cfg
        modules = env.sample_modules(self.rng, cfg.modules_per_iteration)
        eps = self.rng.standard_normal((cfg.population, self.theta.size))
        members = [self.policy()]  # member 0: theta; then +eps_i at 2i+1, -eps_i at 2i+2
        for e in eps:
            members += [self.policy(self.theta + cfg.sigma * e),
                        self.policy(self.theta - cfg.sigma * e)]
        episodes = env.run(members, modules)

        by_module: dict[str, list[float | None]] = {m: [None] * len(members)
                                                     for m in modules}
        for ep in episodes:
            by_module[ep.module][ep.member] = ep.size if ep.ok else None
        common = [m for m in modules if all(s is not None for s in by_module[m])]
        if not common:  # every module failed for some member: nothing to compare
            return {"es/common_modules": 0.0}
        fitness, change = env.scoring.fitness(by_module, common, env.baselines,
                                              self.weighting)
        center, plus, minus = fitness[0], fitness[1::2], fitness[2::2]

        shaped = _centered_ranks(fitness[1:]) if cfg.rank_fitness else fitness[1:]
        grad = weighted_sum(shaped[0::2] - shaped[1::2], eps) / (2 * cfg.population
                                                                 * cfg.sigma)
        self._adam_ascent(grad)
        return {
            "reward/train": float(center),
            f"{env.scoring.name}_change/train": change,
            "es/fitness_mean": float(fitness[1:].mean()),
            "es/fitness_best": float(fitness[1:].max()),
            "es/antithetic_spread": float(np.abs(plus - minus).mean()),
            "es/grad_norm": float(np.linalg.norm(grad)),
            "es/common_modules": float(len(common)),
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


def weighted_sum(weights: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """`weights @ vectors`, summed in a fixed order: the same bits on every CPU (BLAS
    kernels differ per CPU in summation order; see `pymlgo.policy.mlp.affine`)."""
    total = np.zeros(vectors.shape[1], dtype=np.float64)
    for w, v in zip(weights, vectors, strict=True):
        total += w * v
    return total


def _centered_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks scaled to [-0.5, 0.5]; ties get the mean of their ranks (order-independent)."""
    n = len(x)
    if n < 2:
        return np.zeros(n)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(n)
    ranks[order] = np.arange(n, dtype=np.float64)
    for value in np.unique(x):  # equal sizes are common: many perturbations change nothing
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks / (n - 1) - 0.5
