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
- `PriorityHead`: one Gaussian decision per enqueued live range over its log2 priority
  (`PriorityPolicy`, learned standard deviation); advantages per machine function as for
  eviction.

Only the trainer process imports this module (torch); workers run the numpy policies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.priority import INPUT_NAMES as PRIORITY_INPUTS
from pymlgo.policy.priority import PriorityNetwork, PriorityPolicy, log2_actions
from pymlgo.policy.priority import encode as encode_priority
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
# regalloc decisions learned from per iteration, split over the trajectories: a large
# module sends tens of thousands (memory)
MAX_REGALLOC_DECISIONS = 20_000

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
            xs.append(inputs(behaviour.vocab.raw_features, e))
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


def trajectory_batch(trajectory: Trajectory, advantages: dict[str, float], *, minor: int,
                     limit: int | None = None,
                     rng: np.random.Generator | None = None) -> EvictionBatch | None:
    """Decisions of the functions that have an advantage, with a real choice, encoded for
    a policy of version 1.`minor`; at most `limit` of them (a seeded subsample, drawn
    before encoding)."""
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
    x = np.stack([encode({name: v[i] for name, v in traj.features.items()}, minor)
                  for i in rows])
    actions = traj.advice.reshape(n, -1)[rows, 0].astype(np.int64)
    adv = np.array([advantages[fns[i]] for i in rows], dtype=np.float64)
    return EvictionBatch(x, mask[rows], actions, adv)


@dataclass(frozen=True)
class FunctionSamples:
    """What a regalloc iteration's samples teach, per machine function: each recorded
    sample's trajectory with its functions' advantages (`function_advantages`)."""

    samples: list[tuple[Trajectory, dict[str, float]]]
    rewards: list[float]  # per sample: the mean reward of its functions
    functions: int  # (sample, function) pairs with an advantage
    members: int  # samples per module
    modules: int  # sampled this iteration, those that failed included

    def scalars(self, env: TrainEnv, episodes: list[Episode], n: int) -> dict[str, float]:
        return {"reward/train": float(np.mean(self.rewards)) if self.rewards else 0.0,
                f"{env.scoring.name}_change/train": size_change([e for e in episodes
                                                                 if e.ok]),
                "ppo/decisions": float(n), "ppo/functions": float(self.functions)}

    def per_trajectory(self) -> int:
        """Decisions to keep of each sample, so an iteration learns from at most
        MAX_REGALLOC_DECISIONS."""
        return max(1, MAX_REGALLOC_DECISIONS // max(1, self.modules * self.members))


def function_samples(env: TrainEnv, episodes: list[Episode]) -> FunctionSamples:
    """The recorded samples of every module whose samples all succeeded, with their
    per-function advantages against each other (a failed sample has no reward to compare
    with)."""
    by_module: dict[str, list[Episode]] = {}
    for e in episodes:  # sorted by (module, member)
        by_module.setdefault(e.module, []).append(e)
    members = max((len(v) for v in by_module.values()), default=1)
    samples: list[tuple[Trajectory, dict[str, float]]] = []
    functions, rewards = 0, []
    for m, eps in by_module.items():
        base = env.references.get(m)
        if base is None or len(eps) < members or not all(
                e.ok and e.result is not None and e.result.trajectory is not None
                for e in eps):
            continue
        ok = [e.result for e in eps if e.result is not None]
        rewards += [np.mean(list(function_rewards(s, base).values()) or [0.0]) for s in ok]
        for s, a in zip(ok, function_advantages(ok, base), strict=True):
            functions += len(a)
            assert s.trajectory is not None
            samples.append((s.trajectory, a))
    return FunctionSamples(samples, rewards, functions, members, len(by_module))


class EvictionHead:
    def net(self, policy: EvictionPolicy) -> TorchEvictionNet:
        return TorchEvictionNet(policy.network)

    def policy(self, template: EvictionPolicy, net: TorchEvictionNet) -> EvictionPolicy:
        return template.with_network(net.to_network())

    def batch(self, ppo: Any, env: TrainEnv, episodes: list[Episode],
              behaviour: EvictionPolicy) -> Made | dict[str, float]:
        got = function_samples(env, episodes)
        limit = got.per_trajectory()
        batches = [b for traj, adv in got.samples
                   if (b := trajectory_batch(traj, adv, minor=behaviour.minor, rng=ppo.rng,
                                             limit=limit)) is not None]
        if not batches:
            return {"ppo/decisions": 0.0}
        x, mask, actions, adv = (np.concatenate([getattr(b, f) for b in batches])
                                 for f in ("x", "mask", "actions", "advantages"))
        n = len(actions)
        logp_old = masked_log_softmax(behaviour.network.scores(x), mask)[
            np.arange(n), actions].astype(np.float64)
        batch = (torch.from_numpy(x.reshape(-1, x.shape[1], INPUT_DIM)),
                 torch.from_numpy(mask), torch.from_numpy(actions))
        return batch, logp_old, adv, got.scalars(env, episodes, n)

    def demonstrations(self, trajectories: Sequence[Trajectory],
                       learner: EvictionPolicy) -> tuple[np.ndarray, ...]:
        """(inputs, valid columns, column taken) of every recorded decision with a real
        choice (more than one valid column), encoded for `learner`: what behaviour cloning
        fits."""
        batches = [b for t in trajectories
                   if (b := trajectory_batch(t, dict.fromkeys(t.contexts, 0.0),
                                             minor=learner.minor)) is not None]
        if not batches:
            return (np.zeros((0, 1, INPUT_DIM), np.float32), np.zeros((0, 1), bool),
                    np.zeros(0, np.int64))
        return tuple(np.concatenate([getattr(b, f) for b in batches])
                     for f in ("x", "mask", "actions"))

    def log_prob_entropy(self, net: TorchEvictionNet, batch: tuple[torch.Tensor, ...],
                         idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, valid, actions = batch
        scores = net(x[idx]).masked_fill(~valid[idx], float("-inf"))
        logp_all = torch.log_softmax(scores, dim=-1)
        logp = logp_all.gather(1, actions[idx, None])[:, 0]
        p = logp_all.exp()
        entropy = -(p * logp_all.masked_fill(~valid[idx], 0.0)).sum(dim=-1)
        return logp, entropy


_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


class TorchPriorityNet(nn.Module):
    """The torch mirror of `PriorityPolicy`: the mean log2 priority mlp(x) + skip . x, and
    the Gaussian's log standard deviation."""

    def __init__(self, network: PriorityNetwork, log_std: float) -> None:
        super().__init__()
        self.mlp = MLP.from_params(network.mlp)
        self.skip = nn.Parameter(torch.from_numpy(np.array(network.skip, dtype=np.float32)))
        self.log_std = nn.Parameter(torch.tensor(float(log_std), dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(n, PRIORITY_INPUT_DIM) -> (n,) mean scores."""
        return self.mlp(x)[:, 0] + x @ self.skip

    def to_network(self) -> PriorityNetwork:
        return PriorityNetwork(self.mlp.to_params(), self.skip.detach().numpy().copy())


def priority_rows(trajectory: Trajectory, advantages: dict[str, float], *, limit: int,
                  rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(inputs, scores drawn, advantages) of the decisions of the functions that have an
    advantage; at most `limit` of them (a seeded subsample)."""
    n = len(trajectory)
    fns = np.asarray(trajectory.contexts, dtype=object)
    rows = np.flatnonzero(np.isin(fns, list(advantages))) if n else np.zeros(0, np.int64)
    if len(rows) > limit:
        rows = np.sort(rng.choice(rows, limit, replace=False))
    if not len(rows):
        return None
    x = encode_priority({k: v[rows] for k, v in trajectory.features.items()})
    actions = log2_actions(trajectory.advice.reshape(n, -1)[rows, 0])
    return x, actions, np.array([advantages[fns[i]] for i in rows], dtype=np.float64)


class PriorityHead:
    """One Gaussian decision per live range the allocator enqueues: the log2 priority,
    drawn around the network's score; advantages per machine function as for eviction. A
    priority clamped at the ends of the log2 range is taken as the clamped score."""

    def net(self, policy: PriorityPolicy) -> TorchPriorityNet:
        return TorchPriorityNet(policy.network, policy.log_std)

    def policy(self, template: PriorityPolicy, net: TorchPriorityNet) -> PriorityPolicy:
        return replace(template.with_network(net.to_network()),
                       log_std=float(net.log_std.detach()))

    def batch(self, ppo: Any, env: TrainEnv, episodes: list[Episode],
              behaviour: PriorityPolicy) -> Made | dict[str, float]:
        got = function_samples(env, episodes)
        limit = got.per_trajectory()
        rows = [r for traj, adv in got.samples
                if (r := priority_rows(traj, adv, limit=limit, rng=ppo.rng)) is not None]
        if not rows:
            return {"ppo/decisions": 0.0}
        x, actions, adv = (np.concatenate([r[i] for r in rows]) for i in range(3))
        mean = behaviour.scores(x).astype(np.float64)
        z = (actions - mean) / math.exp(behaviour.log_std)
        logp_old = -0.5 * z * z - behaviour.log_std - _LOG_SQRT_2PI
        batch = (torch.from_numpy(x), torch.from_numpy(actions.astype(np.float32)))
        return batch, logp_old, adv, got.scalars(env, episodes, len(actions))

    def demonstrations(self, trajectories: Sequence[Trajectory],
                       learner: PriorityPolicy) -> tuple[np.ndarray, ...]:
        """(inputs, log2 priority given) of every recorded decision (one encoding for
        every priority policy: `learner` does not change it)."""
        rng = np.random.default_rng(0)  # unused: no limit, every decision is kept
        rows = [r for t in trajectories
                if (r := priority_rows(t, dict.fromkeys(t.contexts, 0.0), limit=len(t),
                                       rng=rng)) is not None]
        if not rows:
            return np.zeros((0, len(PRIORITY_INPUTS)), np.float32), np.zeros(0, np.float32)
        return (np.concatenate([r[0] for r in rows]),
                np.concatenate([r[1] for r in rows]).astype(np.float32))

    def log_prob_entropy(self, net: TorchPriorityNet, batch: tuple[torch.Tensor, ...],
                         idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, actions = batch
        z = (actions[idx] - net(x[idx])) * torch.exp(-net.log_std)
        logp = -0.5 * z * z - net.log_std - _LOG_SQRT_2PI
        entropy = (0.5 + _LOG_SQRT_2PI + net.log_std).expand_as(logp)
        return logp, entropy
