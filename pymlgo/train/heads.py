"""ppo's heads (`hooks.PPOHead`): each problem's policy as torch sees it, the decisions of
an iteration's episodes with their advantages, and the log-probability of an action.

- `InliningHead`: one Bernoulli decision per call site, P(inline) = sigmoid(mlp(x));
  advantages per module compile (or per decision with partial rewards), `ppo.py`.
- `EvictionHead`: one categorical decision per eviction over the candidate columns, the
  masked softmax of `EvictionNetwork` scores; advantages per machine function: the
  function's reward -(cost - stock cost) / max(stock cost, 4) from the allocator's remarks
  minus the mean reward of the same function in the module's other samples (leave-one-
  out). Functions whose reward is the same in every sample carry no signal and are
  dropped, as are decisions with a single valid column (nothing to choose).

Only the trainer process imports this module (torch); workers run the numpy policies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pymlgo.policy.inlining import InliningPolicy
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
from pymlgo.train.env import Episode, TrainEnv, inputs, size_change
from pymlgo.train.nets import MLP, tensor

_LOG_EPS = 1e-7  # keeps log(p) finite for a saturated sigmoid
# eviction decisions learned from per iteration, split over the trajectories: a large
# module sends tens of thousands (memory)
MAX_EVICTION_DECISIONS = 20_000

Made = tuple[tuple[torch.Tensor, ...], np.ndarray, np.ndarray, dict[str, float]]


class InliningHead:
    def net(self, policy: InliningPolicy) -> MLP:
        return MLP.from_params(policy.params)

    def policy(self, template: InliningPolicy, net: MLP) -> InliningPolicy:
        return template.with_params(net.to_params())

    def batch(self, ppo: Any, env: TrainEnv, episodes: list[Episode],
              behaviour: InliningPolicy) -> Made | dict[str, float]:
        ok = [e for e in episodes if e.ok]
        if not ok:
            return {"ppo/episodes": 0.0}
        shaping: dict[str, float] = {}
        if ppo.shaper is None:  # every decision of an episode shares its advantage
            module_adv = ppo.module_advantages(ok)
        else:
            per_decision, shaping = ppo.partial_advantages(ok, ppo.shaper)
        weights = env.byte_weights() if ppo.by_bytes else None
        xs, acts, advs = [], [], []
        for e in ok:
            assert e.actions is not None
            xs.append(inputs(behaviour.required_features, e))
            acts.append(e.actions)
            adv_e = (np.full(len(e.actions), module_adv[id(e)]) if ppo.shaper is None
                     else per_decision[id(e)])
            advs.append(adv_e if weights is None else adv_e * weights[e.module])
        x_raw = np.concatenate(xs)
        actions = np.concatenate(acts).astype(np.float32)
        adv = np.concatenate(advs)
        p_old = behaviour.probabilities(x_raw).astype(np.float64)
        logp_old = np.log(np.where(actions > 0, p_old, 1.0 - p_old) + _LOG_EPS)
        rewards = [e.reward for e in ok]
        scalars = {
            "reward/train": float(np.mean(rewards)),
            "size_change/train": size_change(ok),  # of the sampling policy
            "ppo/decisions": float(len(actions)),
            "ppo/inline_rate": float(actions.mean()) if len(actions) else 0.0,
            **shaping,
        }
        batch = (tensor(behaviour.vocab.normalize(x_raw)), tensor(actions))
        return batch, logp_old, adv, scalars

    def log_prob_entropy(self, net: MLP, batch: tuple[torch.Tensor, ...],
                         idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, actions = batch
        logits = net(x[idx])[:, 0]
        # log pi(a|s) for a Bernoulli(sigmoid(logit)) is -BCE(logit, a)
        logp = -F.binary_cross_entropy_with_logits(logits, actions[idx], reduction="none")
        p = torch.sigmoid(logits)
        entropy = -(p * F.logsigmoid(logits) + (1 - p) * F.logsigmoid(-logits))
        return logp, entropy


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
class EvictionBatch:
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
                     rng: np.random.Generator | None = None) -> EvictionBatch | None:
    """Encoded decisions of the functions that have an advantage, with a real choice; at
    most `limit` of them (a seeded subsample, drawn before encoding)."""
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
    return EvictionBatch(x, mask[rows], actions, adv)


class EvictionHead:
    def net(self, policy: EvictionPolicy) -> TorchEvictionNet:
        return TorchEvictionNet(policy.network)

    def policy(self, template: EvictionPolicy, net: TorchEvictionNet) -> EvictionPolicy:
        return template.with_network(net.to_network())

    def batch(self, ppo: Any, env: TrainEnv, episodes: list[Episode],
              behaviour: EvictionPolicy) -> Made | dict[str, float]:
        by_module: dict[str, list[Episode]] = {}
        for e in episodes:  # sorted by (module, member)
            by_module.setdefault(e.module, []).append(e)
        members = max((len(v) for v in by_module.values()), default=1)
        per_trajectory = max(1, MAX_EVICTION_DECISIONS // max(1, len(by_module) * members))
        batches, functions, rewards = [], 0, []
        for m, eps in by_module.items():
            base = env.references.get(m)
            samples = [e.result for e in eps]
            if base is None or len(eps) < members or not all(
                    e.ok and e.result is not None and e.result.trajectory is not None
                    for e in eps):
                continue  # a failed sample has no reward to compare with
            ok = [s for s in samples if s is not None]
            adv = function_advantages(ok, base)
            rewards += [np.mean(list(function_rewards(s, base).values()) or [0.0]) for s in ok]
            for s, a in zip(ok, adv, strict=True):
                functions += len(a)
                assert s.trajectory is not None
                b = trajectory_batch(s.trajectory, a, rng=ppo.rng, limit=per_trajectory)
                if b is not None:
                    batches.append(b)
        if not batches:
            return {"ppo/decisions": 0.0}
        x, mask, actions, adv = (np.concatenate([getattr(b, f) for b in batches])
                                 for f in ("x", "mask", "actions", "advantages"))
        n = len(actions)
        logp_old = masked_log_softmax(behaviour.network.scores(x), mask)[
            np.arange(n), actions].astype(np.float64)
        scalars = {"reward/train": float(np.mean(rewards)) if rewards else 0.0,
                   f"{env.scoring.name}_change/train": size_change([e for e in episodes
                                                                    if e.ok]),
                   "ppo/decisions": float(n), "ppo/functions": float(functions)}
        batch = (torch.from_numpy(x.reshape(-1, x.shape[1], INPUT_DIM)),
                 torch.from_numpy(mask), torch.from_numpy(actions))
        return batch, logp_old, adv, scalars

    def log_prob_entropy(self, net: TorchEvictionNet, batch: tuple[torch.Tensor, ...],
                         idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, valid, actions = batch
        scores = net(x[idx]).masked_fill(~valid[idx], float("-inf"))
        logp_all = torch.log_softmax(scores, dim=-1)
        logp = logp_all.gather(1, actions[idx, None])[:, 0]
        p = logp_all.exp()
        entropy = -(p * logp_all.masked_fill(~valid[idx], 0.0)).sum(dim=-1)
        return logp, entropy
