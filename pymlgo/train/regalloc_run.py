"""Train the learned eviction policy (`mlgo train --problem regalloc`): es or ppo.

The loop: stock-advisor baselines (cached), then iterations of the algorithm, each followed
by a validation compile of the greedy policy; the iterate with the best validation fitness
(mean log cost ratio vs the stock advisor, so every module counts) is kept. With an output
directory: `best/` and `final/` policy directories (`mlgo eval --problem regalloc --policy
DIR`), `scalars.jsonl`, one JSON line per iteration, and TensorBoard event files
(`tensorboard/`, when wanted and installed). Same seed, same corpus, same config: same
policy bytes (compiles are deterministic; every random draw is seeded; ppo's torch runs
deterministic, one thread). No checkpoint yet: a stopped run starts again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from pymlgo.evaluate.baseline import baseline_results
from pymlgo.policy.regalloc import (
    DEFAULT_HIDDEN,
    EvictionPolicy,
    initial_policy,
    load_eviction_policy,
    save_policy,
)
from pymlgo.problems.base import CompileJob
from pymlgo.problems.regalloc.problem import REGALLOC_EVICT
from pymlgo.problems.regalloc.reward import module_cost
from pymlgo.toolchain.compiler import Compiler
from pymlgo.train.regalloc_env import RegallocEnv
from pymlgo.train.regalloc_es import RegallocES, RegallocESConfig
from pymlgo.train.trainer import ScalarLog
from pymlgo.workers.protocol import Executor, WorkSpec

RegallocAlgo = Literal["es", "ppo"]
REGALLOC_ALGOS: tuple[RegallocAlgo, ...] = ("es", "ppo")
SCALARS_FILE = "scalars.jsonl"


@dataclass(frozen=True)
class RegallocTrainConfig:
    algo: RegallocAlgo = "es"
    seed: int = 0
    iterations: int = 10
    time_budget_s: float | None = None  # stop starting iterations after this long
    hidden: tuple[int, ...] = DEFAULT_HIDDEN
    warmstart: str | None = None  # a saved regalloc policy directory to start from
    es: RegallocESConfig = field(default_factory=RegallocESConfig)
    ppo_options: dict[str, float] = field(default_factory=dict)  # RegallocPPOConfig fields


class RegallocAlgorithm(Protocol):
    def policy(self) -> EvictionPolicy: ...

    def iterate(self, env: RegallocEnv, iteration: int) -> dict[str, float]: ...


@dataclass
class RegallocTrainResult:
    best: EvictionPolicy
    final: EvictionPolicy
    best_iteration: int
    best_validation: dict[str, float]
    history: list[dict[str, float]]


def make_algorithm(config: RegallocTrainConfig, initial: EvictionPolicy) -> RegallocAlgorithm:
    seed = int(np.random.default_rng([config.seed, 1]).integers(0, 2**62))
    if config.algo == "es":
        return RegallocES(config.es, initial, seed)
    if config.algo == "ppo":
        from pymlgo.train.nets import make_deterministic
        from pymlgo.train.regalloc_ppo import RegallocPPO, RegallocPPOConfig

        make_deterministic(config.seed)  # same seed, same bytes, as for inlining

        names = {f.name for f in dataclasses.fields(RegallocPPOConfig)}
        unknown = set(config.ppo_options) - names
        if unknown:
            raise ValueError(f"unknown ppo option(s) {sorted(unknown)}: use {sorted(names)}")
        typed = {f.name: type(getattr(RegallocPPOConfig(), f.name))(config.ppo_options[f.name])
                 for f in dataclasses.fields(RegallocPPOConfig) if f.name in config.ppo_options}
        return RegallocPPO(RegallocPPOConfig(**typed), initial, seed)
    raise ValueError(f"unknown regalloc algorithm {config.algo!r}: use es or ppo")


def train_regalloc(
    executor: Executor,
    compiler: Compiler,
    train_jobs: Sequence[CompileJob],
    validation_jobs: Sequence[CompileJob],
    config: RegallocTrainConfig = RegallocTrainConfig(),
    *,
    spec: WorkSpec | None = None,
    output_dir: Path | None = None,
    log: Callable[[dict[str, float]], None] | None = None,
    tensorboard: bool = False,
) -> RegallocTrainResult:
    """Train on `train_jobs`; `validation_jobs` (else the training modules) pick the best."""
    started = time.monotonic()
    spec = spec or WorkSpec(problem=REGALLOC_EVICT)
    jobs = {j.module: j for j in [*train_jobs, *validation_jobs]}
    baselines = {r.module: r for r in baseline_results(executor, list(jobs.values()), compiler,
                                                       spec=spec) if r.ok}
    # A module without spill code under the stock advisor cannot get cheaper.
    pool = tuple(sorted(j.module for j in train_jobs
                        if j.module in baselines and module_cost(baselines[j.module]) > 0))
    if not pool:
        raise ValueError("no training module has spill code under the stock advisor")
    env = RegallocEnv(executor, spec, jobs, baselines, pool)
    val = [j.module for j in validation_jobs if j.module in baselines] or list(pool)
    initial = (load_eviction_policy(Path(config.warmstart)) if config.warmstart
               else initial_policy(config.seed, config.hidden)).greedy()
    algo = make_algorithm(config, initial)
    # scalars.jsonl (started afresh) and, if wanted and installed, TensorBoard: as for inlining
    scalar_log = None
    if output_dir is not None:
        output_dir.mkdir(parents=True, exist_ok=True)
        scalar_log = ScalarLog(output_dir, -1, tensorboard)

    def record(entry: dict[str, float]) -> None:
        history.append(entry)
        if log:
            log(entry)
        if scalar_log is not None:
            scalar_log.write(int(entry["iteration"]),
                             {k: v for k, v in entry.items() if k != "iteration"})

    hyper = {"algorithm": config.algo, "seed": config.seed, "iterations": config.iterations,
             "hidden": list(config.hidden), "es": dataclasses.asdict(config.es),
             "ppo": dict(config.ppo_options)}

    def stamped(policy: EvictionPolicy, iteration: int) -> EvictionPolicy:
        return EvictionPolicy(policy.network, name=f"regalloc-{config.algo}",
                              hyperparameters={**hyper, "iteration": iteration})

    history: list[dict[str, float]] = []
    try:
        best = algo.policy()
        best_val = env.evaluate(best, val)
        best_iteration = 0
        record({"iteration": 0.0, **{f"validation/{k}": v for k, v in best_val.items()},
                "seconds": time.monotonic() - started})
        for it in range(1, config.iterations + 1):
            budget = config.time_budget_s
            if budget is not None and time.monotonic() - started > budget:
                break
            scalars = algo.iterate(env, it)
            current = algo.policy()
            v = env.evaluate(current, val)
            if v["fitness"] > best_val["fitness"]:
                best, best_val, best_iteration = current, v, it
                if output_dir is not None:  # saved at once: an interrupted run keeps its best
                    save_policy(stamped(best, it), output_dir / "best")
            record({"iteration": float(it), **scalars,
                    **{f"validation/{k}": x for k, x in v.items()},
                    "seconds": time.monotonic() - started})
    finally:
        if scalar_log is not None:
            scalar_log.close()
    best = stamped(best, best_iteration)
    final = stamped(algo.policy(), len(history) - 1)
    if output_dir is not None:
        save_policy(best, output_dir / "best")
        save_policy(final, output_dir / "final")
    return RegallocTrainResult(best, final, best_iteration, best_val, history)
