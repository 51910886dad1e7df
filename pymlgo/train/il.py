"""Imitation learning from search: clone the best decisions `mlgo search` finds, repeat.

The method behind ml-compiler-opt's inlining-for-size v1.2 policy, on pymlgo's pieces, for
every problem that search can search (`Problem.search_moves`):

1. Search (`evaluate.search`): starting from the current policy's own decisions on a
   batch of training modules, change decisions and keep what improves the problem's reward
   (never worse than the policy's own compile), `budget` compiles per module.
2. Aggregate: every searched module's best trajectory joins the dataset; a module
   searched again replaces its earlier trajectory only when the new one measures less
   (fewer bytes; a lower allocator cost): the dataset keeps the best decisions seen for
   each module, whatever policy found them, as DAgger keeps its earlier data.
3. Clone: `epochs_per_iteration` passes over the dataset's decisions with the problem's
   cloner (`ProblemTraining.imitation`): binary cross-entropy on the call sites for
   inlining (the same loss and loop as `bc`); the likelihood the ppo head gives the
   register evicted for regalloc-evict (as its `bc`).

Each iteration searches from the policy the previous one cloned, so search starts closer
to the optimum every time and spends its budget further along. The warm start gives the
first search a sensible start (inlining: `bc` on clang's -Oz decisions; regalloc-evict: the
stock rule's network); held-out modules are never searched (only the training split is)
and validation only picks `best/`.

Deterministic for a seed: the modules of an iteration are drawn from a seeded generator,
search is deterministic for its seed whatever the number of workers, and the minibatch
order comes from the same generator.

Scalars: `il/start_change` (also as `{measure}_change/train`, e.g. `size_change/train`) and
`il/search_change` (the measure's total change vs the baseline of the iteration's modules
with the current policy, and at the end of search), `il/dataset_modules`,
`il/dataset_decisions`, `il/loss`, `il/search_compiles`, and for inlining `il/agreement`
(greedy policy vs the dataset's decisions after the fit).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pymlgo.evaluate.search import ModuleSearch, search
from pymlgo.problems.base import Problem
from pymlgo.train.config import ILConfig
from pymlgo.train.env import TrainEnv
from pymlgo.train.hooks import Imitator
from pymlgo.workers.task import compiler_for


def best_measure(problem: Problem, found: ModuleSearch) -> float | None:
    """The best compile's measure, lower is better (inlining: bytes; regalloc: its cost)."""
    if problem.measures:
        return found.best_extra.get(problem.measures[0].key)
    return None if found.best_bytes is None else float(found.best_bytes)


class ImitationLearning:
    def __init__(self, cfg: ILConfig, imitator: Imitator, seed: int) -> None:
        self.cfg = cfg
        self.imitator = imitator
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        # module -> (best measure found, the cloner's rows of its best trajectory)
        self.dataset: dict[str, tuple[float, tuple[np.ndarray, ...]]] = {}

    def policy(self) -> Any:
        return self.imitator.policy()

    def iterate(self, env: TrainEnv, iteration: int) -> dict[str, float]:
        modules = env.sample_modules(self.rng, self.cfg.modules_per_iteration or len(env.names))
        problem = env.spec.problem
        report = search(
            env.executor, compiler_for(env.spec.clang), [env.jobs[m] for m in modules],
            self.policy(), budget=self.cfg.budget, seed=self.seed * 1_000_003 + iteration,
            batch=self.cfg.search_batch, spec=env.spec, moves=self.cfg.moves,
            answers=self.cfg.answers)
        totals = report.totals()
        env.stats.compiles += totals["compiles"]
        env.stats.failures += totals["failed"]
        for m in report.ok_modules:
            measure = best_measure(problem, m)
            if m.trajectory is None or measure is None:
                continue
            held = self.dataset.get(m.module)
            if held is None or measure < held[0]:
                self.dataset[m.module] = (measure, self.imitator.encode(m.trajectory))
        rows = [self.dataset[m][1] for m in sorted(self.dataset)]  # the same order on resume
        fitted = self.imitator.fit(rows, self.cfg.epochs_per_iteration, self.rng)
        stem = problem.measures[0].field if problem.measures else "bytes"
        base = totals[f"baseline_{stem}"]
        start_change = totals[f"start_{stem}"] / base - 1.0 if base else 0.0
        search_change = totals[f"best_{stem}"] / base - 1.0 if base else 0.0
        return {
            # the batch's measure at the policy the iteration started from, as es and ppo
            # report theirs; without it the trainer compiled every training module after
            # each iteration (3,181 modules of the broad corpus: longer than the iteration)
            f"{env.scoring.name}_change/train": start_change,
            "reward/train": -start_change,
            "il/start_change": start_change,
            "il/search_change": search_change,
            "il/search_compiles": float(totals["compiles"]),
            "il/dataset_modules": float(len(self.dataset)),
            **fitted,
        }

    def state_dict(self) -> dict[str, Any]:
        return {**self.imitator.state_dict(), "rng": self.rng.bit_generator.state,
                "dataset": dict(self.dataset)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.imitator.load_state_dict(state)
        self.rng.bit_generator.state = state["rng"]
        self.dataset = dict(state["dataset"])
