"""Policy gradient with PPO's clipped objective, as MLGO trains its inliner; written once
for every problem, whose head (`hooks.PPOHead`, `heads.py`) says what a decision is.

Each iteration:
1. sample a batch of training modules; compile each `samples_per_module` times with the
   *sampling* policy (inline with probability P(inline); evict a column drawn from the
   masked softmax; a fresh seed per sample), recording every decision's features and the
   action taken;
2. advantages (the head's), for inlining per module compile (one episode; the reward
   arrives at the end): r = 1 - size / size(-Oz); every decision of the episode gets the
   advantage r - b, where the baseline b is the mean reward of the module's other samples
   this iteration (`group`), a per-module moving average of its past rewards
   (`moving_average`, starting at 0 = the -Oz size), or 0 (`oz`);
   With partial rewards (`shaper`, see pymlgo.train.shaping) each decision has its own
   reward instead; its advantage is its undiscounted return from that decision on, minus
   the mean return of the module's other samples at the same decision index (`group`; the
   samples take the same first call sites in the same order, until they diverge), or
   minus 0 (`oz`);
   With `reward_weighting = "bytes"` every advantage of a module is then multiplied by
   its -Oz bytes over the training modules' mean (`env.byte_weights`): a 1% saving on a
   64 KB module weighs what 1% on sixteen 4 KB modules does, as bytes count for users.
   For register allocation, per machine function (`heads.EvictionHead`);
3. `epochs` passes of minibatch Adam on the clipped surrogate
   -min(ratio * A, clip(ratio, 1 - c, 1 + c) * A), ratio = pi(a|s) / pi_old(a|s), where
   pi_old is the policy that sampled (its log-probs come from the numpy policy that ran in
   the workers, so the ratio starts at 1).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch

from pymlgo.problems.base import Policy
from pymlgo.train.config import PPOConfig
from pymlgo.train.env import Episode, TrainEnv
from pymlgo.train.hooks import PPOHead
from pymlgo.train.nets import tensor
from pymlgo.train.shaping import IR2NativeShaper, returns_to_go


class PPO:
    """The clipped update, written once: what a decision is, its log-probability and its
    advantage come from the problem's head (`hooks.PPOHead`; inlining's by default)."""

    def __init__(self, cfg: PPOConfig, policy: Any, seed: int,
                 shaper: IR2NativeShaper | None = None, weighting: str = "default",
                 head: PPOHead | None = None) -> None:
        if cfg.baseline == "group" and cfg.samples_per_module < 2:
            raise ValueError("ppo.baseline = 'group' needs samples_per_module >= 2")
        if shaper is not None and cfg.baseline == "moving_average":
            raise ValueError("partial rewards need ppo.baseline = 'group' or 'oz'")
        if head is None:
            from pymlgo.train.heads import InliningHead

            head = InliningHead()
        self.cfg = cfg
        self.head = head
        self.shaper = shaper  # per-decision rewards; None: the module's reward for all
        self.by_bytes = weighting == "bytes"
        self.template = policy.greedy()
        self.net = head.net(policy)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.learning_rate)
        self.rng = np.random.default_rng(seed)
        self.moving: dict[str, float] = {}  # module -> moving-average reward

    def policy(self) -> Policy:
        return self.head.policy(self.template, self.net)

    def iterate(self, env: TrainEnv, iteration: int) -> dict[str, float]:
        cfg = self.cfg
        modules = env.sample_modules(self.rng, cfg.modules_per_iteration)
        behaviour: Any = self.policy()
        seeds = self.rng.integers(0, 2**62, size=cfg.samples_per_module)
        episodes = env.run([behaviour.sampling(int(s)) for s in seeds], modules, record=True)
        made = self.head.batch(self, env, episodes, behaviour)
        if isinstance(made, dict):  # nothing to learn from
            return made
        batch, logp_old, adv, scalars = made
        if cfg.normalize_advantages and len(adv) > 1 and adv.std() > 0:
            adv = (adv - adv.mean()) / adv.std()
        stats = self._update(batch, tensor(logp_old), tensor(adv))
        return {**scalars, **stats}

    def partial_advantages(self, ok: list[Episode], shaper: IR2NativeShaper
                            ) -> tuple[dict[int, np.ndarray], dict[str, float]]:
        """Episode id -> per-decision advantages from shaped rewards; shaping scalars."""
        by_module: dict[str, list[Episode]] = defaultdict(list)
        for e in ok:
            by_module[e.module].append(e)
        out: dict[int, np.ndarray] = {}
        mapped, residuals, spreads = [], [], []
        for eps in by_module.values():
            rewards = [shaper(e) for e in eps]
            returns = [returns_to_go(r) for r in rewards]
            n = max((len(g) for g in returns), default=0)
            # returns padded with 0 after an episode's end (nothing left to gain there)
            padded = np.zeros((len(eps), n))
            for j, g in enumerate(returns):
                padded[j, : len(g)] = g
            total = padded.sum(axis=0)
            for j, (e, g) in enumerate(zip(eps, returns, strict=True)):
                if self.cfg.baseline == "group" and len(eps) > 1:
                    others = (total - padded[j]) / (len(eps) - 1)
                    out[id(e)] = g - others[: len(g)]
                else:
                    out[id(e)] = g
                mapped.append(shaper.mapped(e))
                if mapped[-1] and len(rewards[j]):
                    residuals.append(abs(shaper.residual(e)))
                    spreads.append(float(rewards[j].std()))
        return out, {
            "shaping/mapped_episodes": float(np.mean(mapped)) if mapped else 0.0,
            # |final reward - sum of the caller credits|: what the estimates miss
            "shaping/residual_abs": float(np.mean(residuals)) if residuals else 0.0,
            "shaping/reward_std": float(np.mean(spreads)) if spreads else 0.0,
        }

    def module_advantages(self, ok: list[Episode]) -> dict[int, float]:
        """Episode id -> reward minus its baseline; updates the moving averages."""
        cfg = self.cfg
        by_module: dict[str, list[Episode]] = defaultdict(list)
        for e in ok:
            by_module[e.module].append(e)
        out: dict[int, float] = {}
        for module, eps in by_module.items():
            rewards = np.array([e.reward for e in eps])
            if cfg.baseline == "group":
                # leave-one-out mean: the baseline must not depend on the episode's own action
                others = (rewards.sum() - rewards) / max(len(rewards) - 1, 1)
                base = others if len(rewards) > 1 else np.zeros_like(rewards)
            elif cfg.baseline == "moving_average":
                base = np.full_like(rewards, self.moving.get(module, 0.0))
            else:
                base = np.zeros_like(rewards)
            for e, a in zip(eps, rewards - base, strict=True):
                out[id(e)] = float(a)
            d = cfg.moving_average_decay
            self.moving[module] = d * self.moving.get(module, 0.0) + (1 - d) * rewards.mean()
        return out

    def _update(self, batch: tuple[torch.Tensor, ...], logp_old: torch.Tensor,
                adv: torch.Tensor) -> dict[str, float]:
        cfg = self.cfg
        n = len(batch[0])
        losses, clipped, kls, entropies = [], [], [], []
        for _ in range(cfg.epochs):
            order = torch.from_numpy(self.rng.permutation(n))
            for start in range(0, n, cfg.minibatch_size):
                idx = order[start : start + cfg.minibatch_size]
                logp, entropy = self.head.log_prob_entropy(self.net, batch, idx)
                ratio = torch.exp(logp - logp_old[idx])
                a = adv[idx]
                surrogate = torch.min(ratio * a,
                                      torch.clamp(ratio, 1 - cfg.clip, 1 + cfg.clip) * a)
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
            "ppo/loss": float(np.mean(losses)) if losses else 0.0,
            "ppo/clip_fraction": float(np.mean(clipped)) if clipped else 0.0,
            "ppo/approx_kl": float(np.mean(kls)) if kls else 0.0,
            "ppo/entropy": float(np.mean(entropies)) if entropies else 0.0,
        }

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "opt": self.opt.state_dict(),
                "rng": self.rng.bit_generator.state, "moving": dict(self.moving)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.opt.load_state_dict(state["opt"])
        self.rng.bit_generator.state = state["rng"]
        self.moving = dict(state["moving"])
