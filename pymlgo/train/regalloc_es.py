"""Evolution strategies for the learned eviction policy (numpy only).

`train/es.py` optimizes the inlining policy against .text size; register allocation needs
another policy type and another fitness, the allocator's weighted spill/reload/copy cost
from its remarks (`problems/regalloc`), so it has this compact loop of its own. Each
iteration:

1. sample `modules_per_iteration` training modules (among those where the advisor is
   asked at all) and `population` Gaussian directions eps_i;
2. compile every module with the greedy policy at theta, theta + sigma*eps_i and
   theta - sigma*eps_i, all in one executor batch (`PolicyBatch`, jobs tagged `module#k`);
3. fitness of a member = -mean over modules of log((cost + 4) / (stock cost + 4)), so every
   module counts whatever its size (`reward.log_ratio`);
4. g = sum_i (F(+eps_i) - F(-eps_i)) eps_i / (2 * population * sigma) on centered ranks;
5. one Adam ascent step.

The policy starts as the stock rule rebuilt from the channel's features
(`policy/regalloc.py`), so training learns where to deviate from it. The result is the
iterate with the best validation fitness (the initial one if nothing beat it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pymlgo.policy.regalloc import DEFAULT_HIDDEN, EvictionPolicy, initial_policy
from pymlgo.problems.base import CompileJob
from pymlgo.problems.regalloc.evaluate import PROBLEM, baseline_results
from pymlgo.problems.regalloc.reward import log_ratio, module_cost
from pymlgo.toolchain.compiler import Compiler
from pymlgo.train.es import _centered_ranks
from pymlgo.train.policies import PolicyBatch, tag_job, untag
from pymlgo.workers.protocol import Executor, WorkSpec

_ADAM_EPS = 1e-8


@dataclass(frozen=True)
class RegallocESConfig:
    iterations: int = 12
    population: int = 6  # antithetic pairs: 2 * population + 1 compiles per module
    sigma: float = 0.2
    learning_rate: float = 0.05
    modules_per_iteration: int = 8
    hidden: tuple[int, ...] = DEFAULT_HIDDEN
    seed: int = 0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    timeout: float = 300.0
    time_budget_s: float | None = None  # stop starting iterations after this long


@dataclass
class RegallocESResult:
    policy: EvictionPolicy  # greedy; the best on validation
    history: list[dict[str, float]] = field(default_factory=list)
    best_iteration: int = 0


def _fitness(costs: dict[str, float], baselines: dict[str, float]) -> float:
    return -float(np.mean([log_ratio(costs[m], baselines[m]) for m in costs]))


def _evaluate(executor: Executor, members: Sequence[EvictionPolicy],
              jobs: Sequence[CompileJob], spec: WorkSpec) -> list[dict[str, float]]:
    """Weighted cost per module for each member; a module any member failed on is dropped
    for all (members are compared on the same modules)."""
    tagged = [tag_job(job, k) for k in range(len(members)) for job in jobs]
    batch = PolicyBatch(tuple(members), name="regalloc-es")
    run_spec = WorkSpec(problem=PROBLEM, clang=spec.clang, policy=batch, timeout=spec.timeout,
                        edits=spec.edits)
    costs: list[dict[str, float]] = [{} for _ in members]
    failed: set[str] = set()
    for res in executor.run(run_spec, tagged):
        module, k = untag(res.module)
        if res.ok:
            costs[k][module] = module_cost(res)
        else:
            failed.add(module)
    common = {j.module for j in jobs if j.module not in failed and
              all(j.module in c for c in costs)}
    return [{m: c[m] for m in sorted(common)} for c in costs]


def train_regalloc_es(
    executor: Executor,
    compiler: Compiler,
    train_jobs: Sequence[CompileJob],
    validation_jobs: Sequence[CompileJob],
    config: RegallocESConfig = RegallocESConfig(),
    *,
    init: EvictionPolicy | None = None,
    spec: WorkSpec | None = None,
    log: Callable[[dict[str, float]], None] | None = None,
) -> RegallocESResult:
    """Train the eviction policy; `validation_jobs` pick the returned iterate."""
    started = time.monotonic()
    spec = spec or WorkSpec(problem=PROBLEM, timeout=config.timeout)
    rng = np.random.default_rng(config.seed)
    policy = (init or initial_policy(config.seed, config.hidden)).greedy()
    network = policy.network
    theta = network.flat().astype(np.float64)  # float64 master copy for small Adam steps
    m1, m2 = np.zeros_like(theta), np.zeros_like(theta)

    def at(flat: np.ndarray) -> EvictionPolicy:
        return policy.with_network(network.with_flat(flat))

    all_jobs = list({j.module: j for j in [*train_jobs, *validation_jobs]}.values())
    baselines = {r.module: module_cost(r) for r in baseline_results(executor, all_jobs,
                                                                    compiler, spec=spec)
                 if r.ok}
    # Modules where the advisor is never asked (or the stock advisor has no spill code to
    # improve on) carry no signal: leave them out of the sampling.
    first = _evaluate_with_decisions(executor, policy, list(train_jobs), spec)
    pool = [j for j in train_jobs
            if first.get(j.module, 0) > 0 and baselines.get(j.module, 0.0) > 0.0]
    if not pool:
        raise ValueError("no training module has eviction decisions and spill code")
    val = [j for j in validation_jobs if j.module in baselines]

    def validate(flat: np.ndarray) -> float:
        costs = _evaluate(executor, [at(flat)], val, spec)[0]
        return _fitness(costs, baselines) if costs else 0.0

    best_flat, best_val = theta.copy(), validate(theta) if val else 0.0
    result = RegallocESResult(at(best_flat))
    entry: dict[str, float] = {"iteration": 0.0, "validation_fitness": best_val,
                               "seconds": time.monotonic() - started}
    result.history.append(entry)
    if log:
        log(entry)
    for it in range(1, config.iterations + 1):
        if config.time_budget_s is not None and time.monotonic() - started > config.time_budget_s:
            break
        n = min(config.modules_per_iteration, len(pool))
        jobs = [pool[i] for i in rng.choice(len(pool), size=n, replace=False)]
        eps = rng.standard_normal((config.population, theta.size))
        members = [at(theta)]
        for e in eps:
            members += [at(theta + config.sigma * e), at(theta - config.sigma * e)]
        costs = _evaluate(executor, members, jobs, spec)
        if not costs[0]:
            continue
        fitness = np.array([_fitness(c, baselines) for c in costs])
        shaped = _centered_ranks(fitness[1:])
        grad = ((shaped[0::2] - shaped[1::2]) @ eps) / (2 * config.population * config.sigma)
        m1 = config.adam_beta1 * m1 + (1 - config.adam_beta1) * grad
        m2 = config.adam_beta2 * m2 + (1 - config.adam_beta2) * grad * grad
        m_hat = m1 / (1 - config.adam_beta1**it)
        v_hat = m2 / (1 - config.adam_beta2**it)
        theta = theta + config.learning_rate * m_hat / (np.sqrt(v_hat) + _ADAM_EPS)
        val_fit = validate(theta) if val else float(fitness[0])
        if val_fit > best_val:
            best_flat, best_val, result.best_iteration = theta.copy(), val_fit, it
        entry = {
            "iteration": float(it),
            "train_fitness": float(fitness[0]),
            "train_fitness_best_member": float(fitness[1:].max()),
            "antithetic_spread": float(np.abs(fitness[1::2] - fitness[2::2]).mean()),
            "grad_norm": float(np.linalg.norm(grad)),
            "modules": float(len(costs[0])),
            "validation_fitness": val_fit,
            "seconds": time.monotonic() - started,
        }
        result.history.append(entry)
        if log:
            log(entry)
    result.policy = _stamp(at(best_flat), config, result)
    return result


def _evaluate_with_decisions(executor: Executor, policy: EvictionPolicy,
                             jobs: list[CompileJob], spec: WorkSpec) -> dict[str, int]:
    run_spec = WorkSpec(problem=PROBLEM, clang=spec.clang, policy=policy, timeout=spec.timeout,
                        edits=spec.edits)
    out: dict[str, int] = {}
    for res in executor.run(run_spec, jobs):
        if res.ok:
            out[res.module] = res.decisions
    return out


def _stamp(policy: EvictionPolicy, config: RegallocESConfig,
           result: RegallocESResult) -> EvictionPolicy:
    hyper: dict[str, Any] = {
        "algorithm": "es", "iterations": config.iterations, "population": config.population,
        "sigma": config.sigma, "learning_rate": config.learning_rate,
        "modules_per_iteration": config.modules_per_iteration, "seed": config.seed,
        "hidden": list(config.hidden), "best_iteration": result.best_iteration,
    }
    return EvictionPolicy(policy.network, hyperparameters=hyper, name="regalloc-es")


