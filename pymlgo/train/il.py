"""Imitation learning from search: clone the best decisions `mlgo search` finds, repeat.

The method behind ml-compiler-opt's inlining-for-size v1.2 policy, on pymlgo's pieces:

1. Search (`evaluate.search`): starting from the current policy's own decisions on a
   batch of training modules, flip decisions and keep what makes the object smaller
   (never larger than the policy's own compile), `budget` compiles per module.
2. Aggregate: every searched module's best trajectory joins the dataset; a module
   searched again replaces its earlier trajectory only when the new one is smaller
   (the dataset keeps the best decisions seen for each module, whatever policy found them,
   as DAgger keeps its earlier data).
3. Clone: `epochs_per_iteration` passes of binary cross-entropy over the dataset's call
   sites, labels = the best trajectory's decisions (the same loss and loop as `bc`).

Each iteration searches from the policy the previous one cloned, so search starts closer
to the optimum every time and spends its budget further along. The warm start (`bc` on
clang's -Oz decisions) gives the first search a sensible start; held-out modules are never
searched (only the training split is) and validation only picks `best/`.

Deterministic for a seed: the modules of an iteration are drawn from a seeded generator,
search is deterministic for its seed whatever the number of workers, and the minibatch
order comes from the same generator.

Scalars: `il/start_change` (also as `size_change/train`) and `il/search_change` (total size
vs -Oz of the iteration's modules with the current policy, and at the end of search),
`il/dataset_modules`, `il/dataset_decisions`, `il/loss`, `il/agreement` (greedy policy vs
the dataset's labels after the fit), `il/search_compiles`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pymlgo.evaluate.search import search
from pymlgo.policy.inlining import InliningPolicy
from pymlgo.problems.base import Trajectory
from pymlgo.train.bc import agreement, fit_epochs
from pymlgo.train.config import ILConfig
from pymlgo.train.env import TrainEnv, feature_matrix
from pymlgo.train.nets import MLP, tensor
from pymlgo.workers.task import compiler_for


def trajectory_inputs(features: tuple[str, ...], traj: Trajectory) -> tuple[np.ndarray,
                                                                            np.ndarray]:
    """Raw features (n, raw_width) in the vocab's column order and the (n,) 0/1 decisions."""
    y = (np.asarray(traj.advice).reshape(len(traj), -1)[:, 0] != 0).astype(np.float32)
    return feature_matrix(features, traj.features, len(traj)), y


class ImitationLearning:
    def __init__(self, cfg: ILConfig, policy: InliningPolicy, seed: int) -> None:
        self.cfg = cfg
        self.template = policy.greedy()
        self.features = policy.vocab.raw_features
        self.net = MLP.from_params(policy.params)
        self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.learning_rate,
                                    weight_decay=cfg.weight_decay)
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        # module -> (best bytes found, raw features, decisions): the cloned dataset
        self.dataset: dict[str, tuple[int, np.ndarray, np.ndarray]] = {}

    def policy(self) -> InliningPolicy:
        return self.template.with_params(self.net.to_params())

    def iterate(self, env: TrainEnv, iteration: int) -> dict[str, float]:
        modules = env.sample_modules(self.rng, self.cfg.modules_per_iteration or len(env.names))
        start = self.policy()
        report = search(
            env.executor, compiler_for(env.spec.clang), [env.jobs[m] for m in modules], start,
            budget=self.cfg.budget, seed=self.seed * 1_000_003 + iteration,
            batch=self.cfg.search_batch, spec=env.spec, moves=self.cfg.moves)
        totals = report.totals()
        env.stats.compiles += totals["compiles"]
        env.stats.failures += totals["failed"]
        for m in report.ok_modules:
            if m.trajectory is None or m.best_bytes is None:
                continue
            held = self.dataset.get(m.module)
            if held is None or m.best_bytes < held[0]:
                x, y = trajectory_inputs(self.features, m.trajectory)
                self.dataset[m.module] = (m.best_bytes, x, y)
        raw, labels = self._stacked()
        x, y = tensor(self.template.vocab.normalize(raw)), tensor(labels)
        losses = fit_epochs(self.net, self.opt, x, y, self.cfg.batch_size,
                            self.cfg.epochs_per_iteration, self.rng) if len(y) else []
        base = totals["baseline_bytes"]
        start_change = totals["start_bytes"] / base - 1.0 if base else 0.0
        return {
            # the batch's size at the policy the iteration started from, as es and ppo report
            # theirs; without it the trainer compiled every training module after each
            # iteration (3,181 modules of the broad corpus: longer than the iteration itself)
            "size_change/train": start_change,
            "reward/train": -start_change,
            "il/start_change": start_change,
            "il/search_change": totals["change"],
            "il/search_compiles": float(totals["compiles"]),
            "il/dataset_modules": float(len(self.dataset)),
            "il/dataset_decisions": float(len(y)),
            "il/loss": losses[-1] if losses else float("nan"),
            "il/agreement": agreement(self.net, x, y),
        }

    def _stacked(self) -> tuple[np.ndarray, np.ndarray]:
        """The dataset's call sites in module order (sorted: the same order on resume)."""
        rows = [self.dataset[m] for m in sorted(self.dataset)]
        if not rows:
            return (np.zeros((0, self.template.vocab.raw_width)),
                    np.zeros(0, dtype=np.float32))
        return (np.concatenate([x for _, x, _ in rows]),
                np.concatenate([y for _, _, y in rows]))

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "opt": self.opt.state_dict(),
                "rng": self.rng.bit_generator.state, "dataset": dict(self.dataset)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.opt.load_state_dict(state["opt"])
        self.rng.bit_generator.state = state["rng"]
        self.dataset = dict(state["dataset"])
