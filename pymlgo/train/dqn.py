"""Q-learning for the two actions (don't inline, inline) with a replay buffer.

The inliner's only reward comes when the module is compiled, and there is no discount
(a module is one episode of a few hundred decisions), so the return of every decision is
the episode's reward. The Q targets are therefore those Monte Carlo returns, not a
bootstrapped max over next states: no target network is needed.

Each iteration:
1. compile a batch of training modules with the epsilon-greedy policy (greedy on Q, a
   seeded coin flip with probability epsilon, decaying linearly), recording decisions;
2. return G = (r - b_module) * reward_scale, r = 1 - size / size(-Oz), b_module an
   exponential moving average of the module's past rewards starting at 0 (= the -Oz size);
   push (state, action, G) for every decision into the ring buffer;
   With `reward_weighting = "bytes"`, G is multiplied by the module's -Oz bytes over the
   training modules' mean (`env.byte_weights`), so Q counts bytes rather than modules;
3. `updates_per_iteration` minibatch Adam steps on the MSE between Q(s, a) and G.

The learned policy inlines iff Q(s, inline) >= Q(s, no): exported as an InliningPolicy whose
logit is Q(inline) - Q(no), so `P(inline) >= 0.5` exactly when Q says inline.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from pymlgo.policy.inlining import InliningPolicy
from pymlgo.train.config import DQNConfig
from pymlgo.train.env import TrainEnv, inputs, size_change
from pymlgo.train.nets import logit_params_from_q, q_from_logit_params, tensor
from pymlgo.train.policies import EpsilonGreedy


class DQN:
    def __init__(self, cfg: DQNConfig, policy: InliningPolicy, seed: int,
                 weighting: str = "default") -> None:
        self.cfg = cfg
        self.by_bytes = weighting == "bytes"
        self.template = policy.greedy()
        self.q = q_from_logit_params(policy.params)  # keeps the warm start's decisions
        self.opt = torch.optim.Adam(self.q.parameters(), lr=cfg.learning_rate)
        self.rng = np.random.default_rng(seed)
        self.moving: dict[str, float] = {}
        dim = policy.vocab.input_dim
        self.buf_x = np.zeros((cfg.buffer_size, dim), dtype=np.float32)
        self.buf_a = np.zeros(cfg.buffer_size, dtype=np.int64)
        self.buf_g = np.zeros(cfg.buffer_size, dtype=np.float32)
        self.buf_len = 0  # filled entries
        self.buf_pos = 0  # next write position (oldest entries are overwritten first)

    def policy(self) -> InliningPolicy:
        return self.template.with_params(logit_params_from_q(self.q))

    def epsilon(self, iteration: int) -> float:
        cfg = self.cfg
        frac = min(1.0, (iteration - 1) / max(cfg.epsilon_decay_iterations, 1))
        return cfg.epsilon_start + frac * (cfg.epsilon_end - cfg.epsilon_start)

    def iterate(self, env: TrainEnv, iteration: int) -> dict[str, float]:
        cfg = self.cfg
        modules = env.sample_modules(self.rng, cfg.modules_per_iteration)
        eps = self.epsilon(iteration)
        explorer = EpsilonGreedy(self.policy(), eps, seed=int(self.rng.integers(0, 2**62)))
        episodes = env.run([explorer], modules, record=True)
        ok = [e for e in episodes if e.ok]
        weights = env.byte_weights() if self.by_bytes else {}
        for e in ok:
            assert e.actions is not None
            base = self.moving.get(e.module, 0.0) if cfg.per_module_baseline else 0.0
            g = (e.reward - base) * cfg.reward_scale * weights.get(e.module, 1.0)
            vocab = self.template.vocab
            self._push(vocab.normalize(inputs(vocab.raw_features, e)),
                       e.actions, g)
            d = cfg.moving_average_decay
            self.moving[e.module] = d * self.moving.get(e.module, 0.0) + (1 - d) * e.reward

        losses = self._learn()
        head = max(1, len(losses) // 10)
        return {
            "reward/train": float(np.mean([e.reward for e in ok])) if ok else 0.0,
            "size_change/train": size_change(ok),  # of the exploring policy
            "dqn/epsilon": eps,
            "dqn/buffer": float(self.buf_len),
            "dqn/loss_start": float(np.mean(losses[:head])) if losses else float("nan"),
            "dqn/loss": float(np.mean(losses[-head:])) if losses else float("nan"),
        }

    def _push(self, x: np.ndarray, actions: np.ndarray, g: float) -> None:
        cap = self.cfg.buffer_size
        x, actions = x[-cap:], actions[-cap:]
        idx = (self.buf_pos + np.arange(len(actions))) % cap
        self.buf_x[idx], self.buf_a[idx], self.buf_g[idx] = x, actions, g
        self.buf_pos = (self.buf_pos + len(actions)) % cap
        self.buf_len = min(self.buf_len + len(actions), cap)

    def _learn(self) -> list[float]:
        if self.buf_len == 0:
            return []
        losses = []
        for _ in range(self.cfg.updates_per_iteration):
            idx = self.rng.integers(0, self.buf_len, size=min(self.cfg.batch_size, self.buf_len))
            q = self.q(tensor(self.buf_x[idx]))
            q_taken = q.gather(1, torch.from_numpy(self.buf_a[idx]).view(-1, 1))[:, 0]
            loss = F.mse_loss(q_taken, tensor(self.buf_g[idx]))
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            losses.append(loss.item())
        return losses

    def state_dict(self) -> dict[str, Any]:
        n = self.buf_len  # only the filled part: checkpoints stay small early on
        return {"q": self.q.state_dict(), "opt": self.opt.state_dict(),
                "rng": self.rng.bit_generator.state, "moving": dict(self.moving),
                "buffer": (self.buf_x[:n].copy(), self.buf_a[:n].copy(), self.buf_g[:n].copy()),
                "buf_pos": self.buf_pos}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.q.load_state_dict(state["q"])
        self.opt.load_state_dict(state["opt"])
        self.rng.bit_generator.state = state["rng"]
        self.moving = dict(state["moving"])
        bx, ba, bg = state["buffer"]
        n = len(ba)
        self.buf_x[:n], self.buf_a[:n], self.buf_g[:n] = bx, ba, bg
        self.buf_len, self.buf_pos = n, int(state["buf_pos"])
