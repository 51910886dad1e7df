"""Behaviour cloning: imitate clang's inlining heuristic from its -Oz decisions
(`BehaviourCloning`), or, for a problem whose ppo head gives decisions a likelihood,
imitate a traced policy's decisions (`HeadCloning`: register allocation).

The MLGO RFC's bootstrap step: the `default` policy answers every call site through the
channel, the trace records each call site's features and the heuristic's own decision
(`inlining_default`), and the MLP is fit to predict that decision (binary cross-entropy).
The result decides almost like -Oz and is the warm start for ppo, es and dqn.

One iteration = `epochs_per_iteration` passes over the training decisions in shuffled
minibatches. Reported: loss, and accuracy against the heuristic on training and
validation decisions (the fraction of call sites where the policy agrees with clang).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from pymlgo.policy.inlining import InliningPolicy
from pymlgo.problems.base import Trajectory
from pymlgo.train.config import BCConfig, ILConfig
from pymlgo.train.env import Demonstrations, TrainEnv, feature_matrix
from pymlgo.train.nets import MLP, tensor


class _Cloning:
    """What every cloner shares: `fit` epochs per iteration (no compiles: the
    demonstrations were recorded once, before training) and its state for checkpoints."""

    cfg: BCConfig
    net: torch.nn.Module
    opt: torch.optim.Optimizer
    rng: np.random.Generator
    schedule: torch.optim.lr_scheduler.LambdaLR | None = None

    def _anneal(self, rows: int) -> None:
        """With `cfg.lr_anneal_epochs`, the learning rate falls linearly to 0 over that many
        passes over `rows` decisions (one scheduler step per minibatch)."""
        if self.cfg.lr_anneal_epochs <= 0:
            return
        steps = self.cfg.lr_anneal_epochs * max(1, -(-rows // self.cfg.batch_size))
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda step: max(0.0, 1.0 - step / steps))

    def fit(self, epochs: int) -> dict[str, float]:
        raise NotImplementedError

    def iterate(self, env: TrainEnv, iteration: int) -> dict[str, float]:
        """No compiles: the demonstrations were recorded once, before training."""
        return self.fit(self.cfg.epochs_per_iteration)

    def state_dict(self) -> dict[str, Any]:
        state = {"net": self.net.state_dict(), "opt": self.opt.state_dict(),
                 "rng": self.rng.bit_generator.state}
        if self.schedule is not None:
            state["schedule"] = self.schedule.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.opt.load_state_dict(state["opt"])
        self.rng.bit_generator.state = state["rng"]
        if self.schedule is not None:
            self.schedule.load_state_dict(state["schedule"])


class BehaviourCloning(_Cloning):
    def __init__(
        self,
        cfg: BCConfig,
        policy: InliningPolicy,
        train: Demonstrations,
        validation: Demonstrations | None,
        seed: int,
    ) -> None:
        self.cfg = cfg
        self.template = policy.greedy()
        self.net = MLP.from_params(policy.params)
        self.opt = torch.optim.Adam(
            self.net.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay
        )
        self.rng = np.random.default_rng(seed)
        # Normalize once: inputs never change, only the network does.
        self.x = tensor(policy.vocab.normalize(train.x))
        self.y = tensor(train.y)
        self.val: tuple[torch.Tensor, torch.Tensor] | None = None
        if validation is not None and len(validation):
            self.val = tensor(policy.vocab.normalize(validation.x)), tensor(validation.y)
        self._anneal(len(self.y))

    def policy(self) -> InliningPolicy:
        return self.template.with_params(self.net.to_params())

    def fit(self, epochs: int) -> dict[str, float]:
        """`epochs` passes over the demonstrations; mean minibatch loss of each pass."""
        losses = fit_epochs(self.net, self.opt, self.x, self.y, self.cfg.batch_size, epochs,
                            self.rng, self.schedule)
        scalars = {"bc/loss": losses[-1] if losses else float("nan"),
                   "bc/loss_first_epoch": losses[0] if losses else float("nan")}
        if self.schedule is not None:
            scalars["bc/learning_rate"] = self.schedule.get_last_lr()[0]
        scalars |= self.accuracy()
        return scalars

    @torch.no_grad()
    def accuracy(self) -> dict[str, float]:
        """Agreement with the heuristic (greedy: inline iff logit >= 0, as workers decide)."""
        out = {"bc/accuracy_train": agreement(self.net, self.x, self.y),
               "bc/inline_rate_heuristic": float(self.y.mean()) if len(self.y) else 0.0}
        if self.val is not None:
            out["bc/accuracy_validation"] = agreement(self.net, *self.val)
        return out


def minibatch_epochs(opt: torch.optim.Optimizer, n: int, batch_size: int, epochs: int,
                     rng: np.random.Generator,
                     loss_of: Callable[[torch.Tensor], torch.Tensor],
                     schedule: torch.optim.lr_scheduler.LRScheduler | None = None
                     ) -> list[float]:
    """`epochs` passes over `n` rows in minibatches shuffled by `rng`, one optimizer step
    (and one `schedule` step) on `loss_of(row indices)` (a mean over the minibatch) each;
    the mean loss of each pass."""
    losses = []
    for _ in range(epochs):
        order = torch.from_numpy(rng.permutation(n))
        total = 0.0
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            loss = loss_of(idx)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if schedule is not None:
                schedule.step()
            total += loss.item() * len(idx)
        losses.append(total / max(n, 1))
    return losses


def fit_epochs(net: MLP, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               batch_size: int, epochs: int, rng: np.random.Generator,
               schedule: torch.optim.lr_scheduler.LRScheduler | None = None) -> list[float]:
    """`epochs` passes of binary cross-entropy (logit vs 0/1 label) over (x, y) in
    minibatches shuffled by `rng`; the mean loss of each pass."""
    return minibatch_epochs(
        opt, len(y), batch_size, epochs, rng,
        lambda idx: F.binary_cross_entropy_with_logits(net(x[idx])[:, 0], y[idx]), schedule)


def fit_head_epochs(head: Any, net: torch.nn.Module, opt: torch.optim.Optimizer,
                    data: tuple[torch.Tensor, ...], batch_size: int, epochs: int,
                    rng: np.random.Generator,
                    schedule: torch.optim.lr_scheduler.LRScheduler | None = None
                    ) -> list[float]:
    """`epochs` passes of the negative log-likelihood a ppo head (`hooks.PPOHead`) gives the
    recorded decisions `data` under `net`, in minibatches shuffled by `rng`; the mean loss
    of each pass."""

    def nll(idx: torch.Tensor) -> torch.Tensor:
        logp, _ = head.log_prob_entropy(net, data, idx)
        return -logp.mean()

    return minibatch_epochs(opt, len(data[0]), batch_size, epochs, rng, nll, schedule)


@torch.no_grad()
def agreement(net: MLP, x: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of labels the greedy network matches (inline iff logit >= 0, as workers
    decide)."""
    if not len(y):
        return float("nan")
    decided = (net(x)[:, 0] >= 0).float()
    return float((decided == y).float().mean())


class HeadCloning(_Cloning):
    """Behaviour cloning through a problem's ppo head (`hooks.PPOHead`, plus its
    `demonstrations`): the network is fit to maximize the log-likelihood the head gives the
    recorded decisions (regalloc: the column evicted, the log2 priority given).

    Reported: `bc/loss` (mean negative log-likelihood of the last pass),
    `bc/loss_first_epoch`, `bc/loss_validation`, `bc/decisions`.
    """

    def __init__(self, cfg: BCConfig, policy: Any, train: tuple[np.ndarray, ...],
                 validation: tuple[np.ndarray, ...] | None, seed: int, head: Any) -> None:
        self.cfg = cfg
        self.head = head
        self.template = policy.greedy()
        self.net = head.net(policy)
        self.opt = torch.optim.Adam(
            self.net.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay
        )
        self.rng = np.random.default_rng(seed)
        self.train = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in train)
        self.val = (None if validation is None or not len(validation[0])
                    else tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in validation))
        self._anneal(len(self.train[0]))

    def policy(self) -> Any:
        return self.head.policy(self.template, self.net)

    def fit(self, epochs: int) -> dict[str, float]:
        n = len(self.train[0])
        losses = fit_head_epochs(self.head, self.net, self.opt, self.train,
                                 self.cfg.batch_size, epochs, self.rng, self.schedule)
        scalars = {"bc/loss": losses[-1] if losses else float("nan"),
                   "bc/loss_first_epoch": losses[0] if losses else float("nan"),
                   "bc/decisions": float(n)}
        if self.val is not None:
            with torch.no_grad():
                idx = torch.arange(len(self.val[0]))
                logp, _ = self.head.log_prob_entropy(self.net, self.val, idx)
                scalars["bc/loss_validation"] = float(-logp.mean())
        return scalars


class _Imitating:
    """What il's cloners keep in a checkpoint: the network and its optimizer (il itself
    keeps the rng and the dataset)."""

    net: torch.nn.Module
    opt: torch.optim.Optimizer

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "opt": self.opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.opt.load_state_dict(state["opt"])


class CallSiteImitator(_Imitating):
    """`il`'s cloner for inlining (`hooks.Imitator`): binary cross-entropy on the call
    sites of the best trajectories, labels their decisions (the same loss as `bc`)."""

    def __init__(self, cfg: ILConfig, policy: InliningPolicy) -> None:
        self.batch_size = cfg.batch_size
        self.template = policy.greedy()
        self.features = policy.vocab.raw_features
        self.net = MLP.from_params(policy.params)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.learning_rate,
                                    weight_decay=cfg.weight_decay)

    def policy(self) -> InliningPolicy:
        return self.template.with_params(self.net.to_params())

    def encode(self, trajectory: Trajectory) -> tuple[np.ndarray, np.ndarray]:
        """Raw features (n, raw_width) in the vocab's column order and the (n,) 0/1
        decisions."""
        n = len(trajectory)
        y = (np.asarray(trajectory.advice).reshape(n, -1)[:, 0] != 0).astype(np.float32)
        return feature_matrix(self.features, trajectory.features, n), y

    def fit(self, rows: Sequence[tuple[np.ndarray, ...]], epochs: int,
            rng: np.random.Generator) -> dict[str, float]:
        if rows:
            raw = np.concatenate([r[0] for r in rows])
            labels = np.concatenate([r[1] for r in rows])
        else:
            raw = np.zeros((0, self.template.vocab.raw_width))
            labels = np.zeros(0, dtype=np.float32)
        x, y = tensor(self.template.vocab.normalize(raw)), tensor(labels)
        losses = (fit_epochs(self.net, self.opt, x, y, self.batch_size, epochs, rng)
                  if len(y) else [])
        return {"il/dataset_decisions": float(len(y)),
                "il/loss": losses[-1] if losses else float("nan"),
                "il/agreement": agreement(self.net, x, y)}


class HeadImitator(_Imitating):
    """`il`'s cloner through a problem's ppo head (`hooks.Imitator`; regalloc-evict: the
    register evicted): the network is fit to maximize the likelihood the head gives the
    best trajectories' decisions, as `HeadCloning` fits a trace's."""

    def __init__(self, cfg: ILConfig, policy: Any, head: Any) -> None:
        self.batch_size = cfg.batch_size
        self.head = head
        self.template = policy.greedy()
        self.net = head.net(policy)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.learning_rate,
                                    weight_decay=cfg.weight_decay)

    def policy(self) -> Any:
        return self.head.policy(self.template, self.net)

    def encode(self, trajectory: Trajectory) -> tuple[np.ndarray, ...]:
        return tuple(self.head.demonstrations([trajectory], self.template))

    def fit(self, rows: Sequence[tuple[np.ndarray, ...]], epochs: int,
            rng: np.random.Generator) -> dict[str, float]:
        empty = self.head.demonstrations([], self.template)
        # a best trajectory with no real choice encodes as `empty`, whose column count is
        # a placeholder: only rows with decisions are stacked
        rows = [r for r in rows if len(r[0])]
        data = tuple(torch.from_numpy(np.ascontiguousarray(np.concatenate(
            [r[k] for r in rows] or [empty[k]]))) for k in range(len(empty)))
        n = len(data[0])
        losses = (fit_head_epochs(self.head, self.net, self.opt, data, self.batch_size,
                                  epochs, rng) if n else [])
        return {"il/dataset_decisions": float(n),
                "il/loss": losses[-1] if losses else float("nan")}
