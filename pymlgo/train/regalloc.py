"""Register allocation's training hooks (`hooks.ProblemTraining`).

Eviction (`regalloc-evict`) trains with es or ppo. The measure is the allocator's
block-frequency weighted spill/reload/copy cost (`problems/regalloc`), relative to the
stock advisor's; ES's fitness is -mean log((cost + 4) / (stock + 4)), so a module whose cost
halves counts as much as one whose cost doubles, whatever its size (with `reward_weighting =
"cost"`: the batch's total cost change, each module by its stock cost); ppo learns per machine
function (`heads.EvictionHead`). Only modules with spill code under the stock advisor are
trained and validated on (a relative change of 0 has no meaning). The initial policy is the
stock rule rebuilt from the channel's features (`policy/regalloc.py`), so training learns
where to deviate from it; clang sends no decision of its own, so there is no bc warm start.

`algo = "bc"` clones the decisions of the problem's traced policy (`Problem.trace_policy`:
`heuristic`, `priority:stage-size`; the stock advisors report none on the channel), read
from `traces` (`mlgo trace --problem ...`) or recorded at setup: the new network is fit to
maximize the likelihood its ppo head gives them (`bc.HeadCloning`).

Priority (`regalloc-priority`) trains the same way, with the same measure, fitness and
per-function ppo advantages (`heads.PriorityHead`: a Gaussian over the log2 priority); its
initial policy is the stock rule's coarse order (`policy/priority.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pymlgo.evaluate.trace import load_traces
from pymlgo.policy import priority
from pymlgo.policy.regalloc import EvictionPolicy, init_network
from pymlgo.policy.store import PolicyLoadError, load_policy
from pymlgo.problems.base import CompileJob, ModuleResult, Policy, Problem, Trajectory
from pymlgo.problems.regalloc.compile import COST_KEY
from pymlgo.problems.regalloc.problem import RegallocProblem
from pymlgo.problems.regalloc.reward import log_ratio
from pymlgo.train.config import BCConfig, ConfigError, TrainConfig
from pymlgo.train.env import TrainEnv
from pymlgo.train.hooks import STREAM_INIT, PolicySetup, PPOHead, TrainError
from pymlgo.train.sources import SourceError, Sources, load_trace_source

if TYPE_CHECKING:
    from pathlib import Path

    from pymlgo.corpus.format import Corpus
    from pymlgo.corpus.split import Split
    from pymlgo.toolchain.compiler import Compiler
    from pymlgo.workers.protocol import Executor, WorkSpec

# eviction: per column, the network runs once per candidate of every decision
DEFAULT_HIDDEN = {"evict": (16,), "priority": priority.DEFAULT_HIDDEN}


class CostScoring:
    """The allocator's weighted spill/reload/copy cost; ES fitness: -mean log ratio, or with
    `reward_weighting = "cost"` minus the batch's total cost change (a module counts by its
    stock cost, as held-out totals count it)."""

    name = "cost"

    def value(self, result: ModuleResult) -> float | None:
        return float(result.extra[COST_KEY]) if result.ok and COST_KEY in result.extra else None

    def fitness(self, values: Mapping[str, Sequence[float | None]], common: Sequence[str],
                baselines: Mapping[str, float], weighting: str) -> tuple[np.ndarray, float]:
        members = len(values[common[0]])
        cost = {m: [float(v or 0.0) for v in values[m]] for m in common}
        base = sum(baselines[m] for m in common)
        totals = np.array([sum(cost[m][k] for m in common) for k in range(members)])
        if weighting == "cost":
            fitness = -(totals / base - 1.0) if base else np.zeros(members)
        else:
            fitness = np.array([-np.mean([log_ratio(cost[m][k], baselines[m])
                                          for m in common]) for k in range(members)])
        return fitness, float(totals[0] / base - 1.0) if base else 0.0


# (key, its default, what to say) of TrainConfig keys that are inlining's alone
_INLINING_ONLY = (
    ("partial_rewards", "none", "per-decision rewards from IR2Native size estimates"),
    ("ir2native_model", "", "an IR2Native model"),
    ("vocab", "", "a quantile vocab (eviction inputs are normalized by LLVM already)"),
    ("out_of_range", "clip", "vocab extrapolation"),
)


class RegallocTraining:
    bc_warmstart = False
    scoring = CostScoring()
    keep_baseline_results = True  # ppo's per-function rewards need the stock costs

    def __init__(self, problem: RegallocProblem) -> None:
        self.problem = problem
        self.default_hidden = DEFAULT_HIDDEN[problem.advisor]
        # il clones what search finds, and only a choice among registers can be searched
        self.algorithms: tuple[str, ...] = ("es", "ppo", "bc", *(
            ("il",) if problem.search_moves else ()))

    def check(self, config: TrainConfig) -> None:
        name = self.problem.name
        if config.algo not in self.algorithms:
            trains = "algo = " + " or ".join(repr(a) for a in self.algorithms)
            raise ConfigError(f"problem {name!r} trains with {trains}, not algo = "
                              f"{config.algo!r}")
        if config.algo == "il" and config.il.moves not in self.problem.search_moves:
            moves = " or ".join(repr(m) for m in self.problem.search_moves)
            raise ConfigError(f"il.moves = {config.il.moves!r}: problem {name!r} searches with "
                              f"moves = {moves}")
        if config.warmstart == "bc" and config.algo != "bc":
            raise ConfigError(
                f"problem {name!r} has no bc warm start (clang sends no decision of its own "
                f"to imitate; a new policy starts as the stock rule): set warmstart = '' "
                f"(--warmstart none) or a saved {name} policy directory")
        for key, default, what in _INLINING_ONLY:
            if getattr(config, key) != default:
                raise ConfigError(f"{key} ({what}) applies to problem 'inlining' only, not "
                                  f"{name!r}")
        if config.reward_weighting == "bytes":
            raise ConfigError(f"reward_weighting = 'bytes' weighs modules by their -Oz bytes, "
                              f"an inlining measure; {name!r} weighs by stock cost: 'cost'")
        if config.reward_weighting == "cost" and config.algo != "es":
            raise ConfigError(f"reward_weighting = 'cost' is es's total-cost fitness; algo = "
                              f"{config.algo!r} has no cost weighting (leave it out)")
        if config.policy.features is not None or config.policy.quantiles is not None:
            raise ConfigError(f"policy.features and policy.quantiles apply to problem "
                              f"'inlining' only: {name!r} reads a fixed set of inputs")
        if config.policy.ir2vec_vocab is not None:
            raise ConfigError(f"policy.ir2vec_vocab (IR2Vec embeddings, clang's inliner sends "
                              f"them) applies to problem 'inlining' only, not {name!r}")
        if config.policy.window:
            raise ConfigError(f"policy.window (a shift rule around clang's inline threshold) "
                              f"applies to problem 'inlining' only, not {name!r}")
        if config.policy.differences is not None:
            raise ConfigError(f"policy.differences (derived quantile inputs) applies to "
                              f"problem 'inlining' only, not {name!r}")
        if config.policy.languages:
            raise ConfigError(f"policy.languages (clang decides the inlining of other "
                              f"languages) applies to problem 'inlining' only, not {name!r}")
        if config.traces and config.algo != "bc":
            raise ConfigError(f"traces are only used by behaviour cloning (algo = 'bc') for "
                              f"{name!r}: its setup records no decisions otherwise")
        if config.bc.teacher != BCConfig().teacher:
            raise ConfigError(f"bc.teacher applies to problem 'inlining' only: {name!r} "
                              f"clones the policy its trace recorded")

    def load_sources(self, config: TrainConfig, corpus: Corpus, compiler: Compiler) -> Sources:
        traces = load_trace_source(config, corpus, compiler.version)
        spec = config.policy_warmstart
        if spec is None:
            return Sources(None, None, traces)
        try:
            policy = load_policy(spec, problem=self.problem)
        except PolicyLoadError as exc:
            raise SourceError(f"warm start: {exc}") from exc
        # load_policy refuses a policy of the other advisor; a built-in has no network
        if not isinstance(policy, (EvictionPolicy, priority.PriorityPolicy)):
            raise SourceError(f"warm start {spec!r} is not a saved {self.problem.name} policy "
                              f"(give the directory of one, e.g. OTHER_RUN/best)")
        if config.policy.hidden is not None and tuple(config.policy.hidden) != policy.hidden:
            raise SourceError(f"[policy] hidden = {list(config.policy.hidden)} conflicts with "
                              f"the warm-start policy {spec} (it has {list(policy.hidden)}): "
                              f"leave the key out to train its network as it is")
        return Sources(policy.greedy(), None, traces)

    def compile_options(self, out: Path, sources: Sources | None) -> None:
        return None  # the problem's own flags are all it needs

    def rebind(self, policy: EvictionPolicy, options: object) -> EvictionPolicy:
        return policy  # it keeps no path

    def setup(self, config: TrainConfig, split: Split, baselines: Mapping[str, float],
              jobs: Mapping[str, CompileJob], executor: Executor, spec: WorkSpec,
              sources: Sources, say: Callable[[str], None]) -> PolicySetup:
        initial: Policy
        if sources.warm is not None:
            initial = sources.warm
        elif self.problem.advisor == "priority":
            rng = np.random.default_rng([config.seed, STREAM_INIT])
            initial = priority.PriorityPolicy(priority.init_network(rng, config.hidden),
                                              name=f"mlgo-{config.algo}")
        else:
            rng = np.random.default_rng([config.seed, STREAM_INIT])
            initial = EvictionPolicy(init_network(rng, config.hidden),
                                     name=f"mlgo-{config.algo}")
        spilling = {m: int(cost > 0) for m, cost in baselines.items()}
        say(f"{sum(spilling.values())} of {len(baselines)} modules have spill code under "
            f"the {self.problem.baseline_label} advisor")
        demos: tuple[object, object] = (None, None)
        if config.algo == "bc":
            demos = self._demonstrations(split, baselines, jobs, executor, spec, sources, say,
                                         initial)
        return PolicySetup(spilling, demos[0], demos[1], initial, {})

    def _demonstrations(self, split: Split, baselines: Mapping[str, float],
                        jobs: Mapping[str, CompileJob], executor: Executor, spec: WorkSpec,
                        sources: Sources, say: Callable[[str], None], learner: Policy
                        ) -> tuple[object, object]:
        """The traced policy's decisions on the training and validation modules, as the
        ppo head's demonstration arrays for `learner` (read from the trace, else recorded
        now)."""
        usable = sorted(m for m in (*split.train, *split.validation) if m in baselines)
        traced = self.problem.trace_policy
        trajectories: dict[str, Trajectory] = {}
        if sources.traces is not None:
            source = sources.traces
            say(f"{traced}'s decisions on {len(usable)} modules from {source.directory}")
            for m in usable:
                row = source.rows.get(m)
                cost = None if row is None else row.baseline_extra.get(COST_KEY)
                if cost is not None and not math.isclose(cost, baselines[m], rel_tol=1e-9,
                                                         abs_tol=1e-9):
                    raise SourceError(
                        f"{source.directory} was traced from other bitcode, flags or "
                        f"compiler: {m} costs {cost} under the stock advisor there, "
                        f"{baselines[m]} here; trace this corpus again")
            wanted = set(usable)
            trajectories = {m: t for m, t, _ in load_traces(source.directory) if m in wanted}
        else:
            say(f"recording {traced}'s decisions on {len(usable)} modules")
            env = TrainEnv(executor, spec, jobs, baselines)
            policy = load_policy(traced, problem=self.problem)
            for e in env.run([policy], usable, record=True):
                if e.ok and e.result is not None and e.result.trajectory is not None:
                    trajectories[e.module] = e.result.trajectory
        head = self.ppo_head()
        train = head.demonstrations(  # type: ignore[attr-defined]
            [trajectories[m] for m in sorted(split.train) if m in trajectories], learner)
        validation = head.demonstrations(  # type: ignore[attr-defined]
            [trajectories[m] for m in sorted(split.validation) if m in trajectories], learner)
        if not len(train[0]):
            raise TrainError(f"no training module has a decision of {traced} to clone")
        say(f"behaviour cloning {len(train[0])} decisions")
        return train, validation

    def ppo_head(self) -> PPOHead:
        from pymlgo.train.heads import EvictionHead, PriorityHead

        return PriorityHead() if self.problem.advisor == "priority" else EvictionHead()

    def behaviour_cloning(self, config: TrainConfig, demos_train: Any,
                          demos_validation: Any, initial: Any, seed: int) -> Any:
        from pymlgo.train.bc import HeadCloning

        return HeadCloning(config.bc, initial, demos_train, demos_validation, seed,
                           self.ppo_head())

    def imitation(self, config: TrainConfig, initial: Any) -> Any:
        from pymlgo.train.bc import HeadImitator

        return HeadImitator(config.il, initial, self.ppo_head())


def training(problem: Problem) -> RegallocTraining:
    assert isinstance(problem, RegallocProblem)
    return RegallocTraining(problem)
