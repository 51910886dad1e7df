"""PPO for the learned eviction policy, one trajectory per machine function.

Each iteration:
1. sample training modules; compile each `samples_per_module` times with the *sampling*
   policy (a column drawn from the masked softmax, a fresh seed per sample), recording every
   eviction decision (the channel sends one context per machine function);
2. reward per function: r = -(cost - stock cost) / max(stock cost, 4) from the allocator's
   remarks (`reward.function_rewards`); every decision of that function gets the advantage
   r minus the mean reward of the same function in the module's other samples (leave-one-
   out). Functions whose reward is the same in every sample carry no signal and are
   dropped, as are decisions with a single valid column (nothing to choose);
3. `epochs` passes of minibatch Adam on the clipped surrogate over the masked softmax,
   with pi_old from the numpy policy that ran in the workers.

Only this (trainer) process imports torch; the workers run the numpy `EvictionPolicy`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from pymlgo.policy.regalloc import (
    INPUT_DIM,
    EvictionNetwork,
    EvictionPolicy,
    encode,
    masked_log_softmax,
)
from pymlgo.problems.base import ModuleResult, Trajectory
from pymlgo.problems.regalloc.advice import MASK_FEATURE
from pymlgo.problems.regalloc.reward import function_rewards
from pymlgo.train.nets import MLP
from pymlgo.train.regalloc_env import RegallocEnv


@dataclass(frozen=True)
class RegallocPPOConfig:
    modules_per_iteration: int = 4
    samples_per_module: int = 4  # >= 2: the advantage baseline is the other samples' mean
    learning_rate: float = 1e-3
    epochs: int = 4
    minibatch_size: int = 256  # decisions
    clip: float = 0.2
    entropy_coef: float = 0.003
    max_grad_norm: float = 1.0
    max_decisions: int = 20000  # per iteration, split over the trajectories (memory)


class TorchEvictionNet(nn.Module):
    """The torch mirror of `EvictionNetwork`: score(x) = mlp(x) + skip . x per column."""

    def __init__(self, network: EvictionNetwork) -> None:
        super().__init__()
        self.mlp = MLP.from_params(network.mlp)
        self.skip = nn.Parameter(torch.from_numpy(np.array(network.skip, dtype=np.float32)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., INPUT_DIM) -> (...) scores."""
        return self.mlp(x)[..., 0] + x @ self.skip

    def to_network(self) -> EvictionNetwork:
        return EvictionNetwork(self.mlp.to_params(), self.skip.detach().numpy().copy())


@dataclass(frozen=True)
class Batch:
    x: np.ndarray  # (N, C, INPUT_DIM) float32
    mask: np.ndarray  # (N, C) bool
    actions: np.ndarray  # (N,) int64
    advantages: np.ndarray  # (N,) float64


def function_advantages(samples: Sequence[ModuleResult], baseline: ModuleResult
                        ) -> list[dict[str, float]]:
    """Per sample, function -> its reward minus the other samples' mean reward for it
    (functions with the same reward in every sample are left out)."""
    rewards = [function_rewards(s, baseline) for s in samples]
    out: list[dict[str, float]] = [{} for _ in samples]
    functions = set().union(*rewards) if rewards else set()
    n = len(samples)
    for fn in sorted(functions):
        r = np.array([rw.get(fn, 0.0) for rw in rewards])
        if n < 2 or np.all(r == r[0]):
            continue
        others = (r.sum() - r) / (n - 1)
        for k in range(n):
            out[k][fn] = float(r[k] - others[k])
    return out


def trajectory_batch(trajectory: Trajectory, advantages: dict[str, float], *,
                     limit: int | None = None,
                     rng: np.random.Generator | None = None) -> Batch | None:
    """Encoded decisions of the functions that have an advantage, with a real choice; at
    most `limit` of them (a seeded subsample, drawn before encoding: a large module sends
    tens of thousands of decisions)."""
    traj = trajectory
    n = len(traj)
    if n == 0:
        return None
    fns = np.asarray(traj.contexts, dtype=object)
    mask = traj.features[MASK_FEATURE].reshape(n, -1) == 1
    keep = (mask.sum(axis=1) > 1) & np.isin(fns, list(advantages))
    rows = np.flatnonzero(keep)
    if limit is not None and len(rows) > limit:
        rows = np.sort((rng or np.random.default_rng(0)).choice(rows, limit, replace=False))
    if not len(rows):
        return None
    x = np.stack([encode({name: v[i] for name, v in traj.features.items()}) for i in rows])
    actions = traj.advice.reshape(n, -1)[rows, 0].astype(np.int64)
    adv = np.array([advantages[fns[i]] for i in rows], dtype=np.float64)
    return Batch(x, mask[rows], actions, adv)


def concat(batches: Sequence[Batch]) -> Batch:
    return Batch(*(np.concatenate([getattr(b, f) for b in batches])
                   for f in ("x", "mask", "actions", "advantages")))


class RegallocPPO:
    def __init__(self, cfg: RegallocPPOConfig, policy: EvictionPolicy, seed: int) -> None:
        if cfg.samples_per_module < 2:
            raise ValueError("regalloc ppo needs samples_per_module >= 2 (the advantage "
                             "baseline is the mean of the other samples)")
        self.cfg = cfg
        self.template = policy.greedy()
        torch.manual_seed(seed)
        self.net = TorchEvictionNet(policy.network)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.learning_rate)
        self.rng = np.random.default_rng(seed)

    def policy(self) -> EvictionPolicy:
        return self.template.with_network(self.net.to_network())

    def iterate(self, env: RegallocEnv, iteration: int) -> dict[str, float]:
        cfg = self.cfg
        modules = env.sample_modules(self.rng, cfg.modules_per_iteration)
        behaviour = self.policy()
        seeds = self.rng.integers(0, 2**62, size=cfg.samples_per_module)
        results = env.run([behaviour.sampling(int(s)) for s in seeds], modules, record=True)
        batches, functions, rewards = [], 0, []
        per_trajectory = max(1, cfg.max_decisions // max(1, len(modules) * len(seeds)))
        for m in modules:
            samples = [r.get(m) for r in results]
            if m not in env.baselines or any(s is None or not s.ok or s.trajectory is None
                                             for s in samples):
                continue
            ok = [s for s in samples if s is not None]
            adv = function_advantages(ok, env.baselines[m])
            rewards += [np.mean(list(function_rewards(s, env.baselines[m]).values()) or [0.0])
                        for s in ok]
            for s, a in zip(ok, adv, strict=True):
                functions += len(a)
                assert s.trajectory is not None
                b = trajectory_batch(s.trajectory, a, rng=self.rng, limit=per_trajectory)
                if b is not None:
                    batches.append(b)
        if not batches:
            return {"ppo/decisions": 0.0}
        batch = concat(batches)
        n = len(batch.actions)
        logp_old = masked_log_softmax(behaviour.network.scores(batch.x), batch.mask)[
            np.arange(n), batch.actions].astype(np.float64)
        adv = batch.advantages
        if n > 1 and adv.std() > 0:
            adv = (adv - adv.mean()) / adv.std()
        stats = self._update(batch, logp_old, adv)
        return {"reward/train": float(np.mean(rewards)) if rewards else 0.0,
                "ppo/decisions": float(n), "ppo/functions": float(functions), **stats}

    def _update(self, batch: Batch, logp_old_np: np.ndarray,
                adv_np: np.ndarray) -> dict[str, float]:
        cfg = self.cfg
        x = torch.from_numpy(batch.x.reshape(-1, batch.x.shape[1], INPUT_DIM))
        valid = torch.from_numpy(batch.mask)
        actions = torch.from_numpy(batch.actions)
        logp_old = torch.from_numpy(logp_old_np).float()
        adv = torch.from_numpy(adv_np).float()
        n = len(actions)
        losses, clipped, kls, entropies = [], [], [], []
        for _ in range(cfg.epochs):
            order = torch.from_numpy(self.rng.permutation(n))
            for start in range(0, n, cfg.minibatch_size):
                idx = order[start : start + cfg.minibatch_size]
                scores = self.net(x[idx]).masked_fill(~valid[idx], float("-inf"))
                logp_all = torch.log_softmax(scores, dim=-1)
                logp = logp_all.gather(1, actions[idx, None])[:, 0]
                ratio = torch.exp(logp - logp_old[idx])
                a = adv[idx]
                surrogate = torch.min(ratio * a,
                                      torch.clamp(ratio, 1 - cfg.clip, 1 + cfg.clip) * a)
                p = logp_all.exp()
                entropy = -(p * logp_all.masked_fill(~valid[idx], 0.0)).sum(dim=-1)
                loss = -surrogate.mean() - cfg.entropy_coef * entropy.mean()
                self.opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.net.parameters(), cfg.max_grad_norm)
                self.opt.step()
                with torch.no_grad():
                    losses.append(loss.item())
                    clipped.append(float(((ratio - 1).abs() > cfg.clip).float().mean()))
                    kls.append(float((logp_old[idx] - logp).mean()))
                    entropies.append(float(entropy.mean()))
        return {
            "ppo/loss": float(np.mean(losses)),
            "ppo/clip_fraction": float(np.mean(clipped)),
            "ppo/approx_kl": float(np.mean(kls)),
            "ppo/entropy": float(np.mean(entropies)),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "opt": self.opt.state_dict(),
                "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.opt.load_state_dict(state["opt"])
        self.rng.bit_generator.state = state["rng"]

