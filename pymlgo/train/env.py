"""The training environment: compile modules with policies, get episodes and rewards back.

One episode is one module compiled with one policy; its reward arrives at the end, as in
MLGO: `1 - size / baseline`, with the module's -Oz size as the baseline. What "size" is
comes from the problem's `Scoring` (`hooks.py`): the object's bytes (`BYTES`, inlining),
or another measure (register allocation: the allocator's weighted spill cost). Torch-free,
so ES runs without torch installed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from pymlgo.corpus.format import package_of
from pymlgo.corpus.sample import sample_by_package, sample_by_weight, sample_uniformly
from pymlgo.ir2native.estimates import from_extra
from pymlgo.problems.base import CompileJob, ModuleResult, Policy
from pymlgo.problems.inlining.problem import estimator_of
from pymlgo.train.hooks import Scoring
from pymlgo.train.policies import PolicyBatch, tag_job, untag
from pymlgo.workers.protocol import Executor, WorkSpec


@dataclass(frozen=True, eq=False)
class Episode:
    """One module compiled by one member policy (`member` indexes the batch)."""

    module: str
    member: int
    baseline: float  # the baseline's measure: -Oz bytes (inlining), stock cost (regalloc)
    size: float | None  # the compile's measure (`Scoring.value`); None when it failed
    decisions: int
    # recorded compiles only: every feature the compiler sent, name -> (n, 1), and the
    # (n,) 0/1 decisions taken
    features: Mapping[str, np.ndarray] | None = None
    actions: np.ndarray | None = None
    error: str | None = None
    # partial rewards only (the env's spec has an IR2Native estimator): the caller of each
    # decision (None if unknown) and every function's estimated bytes
    callers: tuple[str, ...] | None = None
    estimates: Mapping[str, float] | None = None
    result: ModuleResult | None = None  # the compile's own result (trajectory, extra)

    @property
    def ok(self) -> bool:
        return self.error is None and self.size is not None

    @property
    def reward(self) -> float:
        """1 - size/baseline: positive when the policy beats -Oz on this module."""
        assert self.size is not None, "a failed episode has no reward"
        return 1.0 - self.size / self.baseline


def feature_matrix(features: Sequence[str], recorded: Mapping[str, np.ndarray],
                   n: int) -> np.ndarray:
    """Raw matrix of `n` recorded call sites (name -> (n, 1) arrays, or (n, dim) for an
    IR2Vec embedding, which spans `dim` columns), columns in `features` order."""
    cols = [np.asarray(recorded[f]).reshape(n, -1) for f in features] if n else []
    return np.concatenate(cols, axis=1) if cols else np.zeros((n, len(features)))


def inputs(features: Sequence[str], episode: Episode) -> np.ndarray:
    """Raw matrix of a recorded episode's call sites, columns in `features` order."""
    if episode.features is None or episode.actions is None:
        raise ValueError(f"episode {episode.module} was not recorded")
    return feature_matrix(features, episode.features, len(episode.actions))


def size_change(episodes: Sequence[Episode]) -> float:
    """Total size over total -Oz size, minus 1, over the successful episodes (0 if none)."""
    ok = [e for e in episodes if e.ok]
    base = sum(e.baseline for e in ok)
    return sum(e.size or 0 for e in ok) / base - 1.0 if base else 0.0


def package_mean_change(episodes: Sequence[Episode]) -> float:
    """The mean over packages (a module name's first component) of each package's own
    total change vs the baseline, over the successful episodes (0 if none): every package
    counts the same, however much of the total it holds."""
    totals: dict[str, list[float]] = {}
    for e in episodes:
        if e.ok:
            t = totals.setdefault(package_of(e.module), [0.0, 0.0])
            t[0] += e.size or 0
            t[1] += e.baseline
    changes = [size / base - 1.0 for size, base in totals.values() if base]
    return sum(changes) / len(changes) if changes else 0.0


def selection_score(episodes: Sequence[Episode], select_by: str) -> float:
    """What picks the best policy on validation (`TrainConfig.select_by`): lower is better."""
    if select_by == "total":
        return size_change(episodes)
    if select_by == "package":
        return package_mean_change(episodes)
    raise ValueError(f"unknown select_by {select_by!r}: use total or package")


def byte_weights(baselines: Mapping[str, int], modules: Sequence[str]) -> dict[str, float]:
    """Module -> its -Oz bytes over the mean -Oz bytes of `modules` (mean weight 1).

    With modules drawn uniformly, the mean of `weight * reward` over a batch estimates the
    relative bytes saved on all of `modules` together: sum(b - s) / sum(b). A fixed
    denominator (not the batch's) keeps the scale of rewards the same in every batch.
    """
    sizes = [baselines[m] for m in modules if baselines.get(m, 0) > 0]
    mean = sum(sizes) / len(sizes) if sizes else 1.0
    return {m: baselines[m] / mean for m in modules if baselines.get(m, 0) > 0}


def objective(episodes: Sequence[Episode], weighting: str,
              weights: Mapping[str, float] | None = None) -> float:
    """What training maximizes on a batch of episodes (failed ones left out).

    "module": mean of 1 - size/-Oz (every module counts the same, whatever its bytes);
    "bytes": mean of weight * (1 - size/-Oz) with `weights` from `byte_weights` (default:
    the batch's own, so the result is then the batch's total relative saving).
    """
    ok = [e for e in episodes if e.ok]
    if not ok:
        return 0.0
    if weighting == "module":
        return float(np.mean([e.reward for e in ok]))
    if weighting != "bytes":
        raise ValueError(f"unknown weighting {weighting!r}")
    if weights is None:
        weights = byte_weights({e.module: e.baseline for e in ok}, [e.module for e in ok])
    return float(np.mean([weights[e.module] * e.reward for e in ok]))


@dataclass(frozen=True, eq=False)
class Demonstrations:
    """Decisions of clang's own heuristic: raw features and the decision it took."""

    x: np.ndarray  # (n, f) raw features, columns in the vocab's input order
    y: np.ndarray  # (n,) 0/1: `inlining_default`

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class RunStats:
    """Counters for the scalars: reset by the trainer every iteration."""

    compiles: int = 0
    failures: int = 0
    decisions: int = 0
    seconds: float = 0.0

    def __add__(self, other: RunStats) -> RunStats:
        return RunStats(self.compiles + other.compiles, self.failures + other.failures,
                        self.decisions + other.decisions, self.seconds + other.seconds)

    def as_scalars(self) -> dict[str, float]:
        return {
            "compiles": float(self.compiles),
            "failures": float(self.failures),
            "decisions_per_second": self.decisions / self.seconds if self.seconds else 0.0,
        }


class ByteScoring:
    """The object's bytes by the run's size metric; ES fitness: minus the total size change
    (or, per module, the mean of 1 - size / -Oz size)."""

    name = "size"

    def value(self, result: ModuleResult) -> float | None:
        return result.size

    def fitness(self, values: Mapping[str, Sequence[float | None]], common: Sequence[str],
                baselines: Mapping[str, float], weighting: str) -> tuple[np.ndarray, float]:
        members = len(values[common[0]])
        base = sum(baselines[m] for m in common)
        sizes = np.array([sum(values[m][k] or 0 for m in common) for k in range(members)],
                         dtype=np.float64)
        if weighting == "module":
            fitness = np.array([np.mean([1.0 - (values[m][k] or 0) / baselines[m]
                                         for m in common]) for k in range(members)])
        else:
            fitness = -(sizes / base - 1.0)
        return fitness, float(sizes[0] / base - 1.0)


BYTES = ByteScoring()


@dataclass
class TrainEnv:
    """Training modules, their -Oz sizes, and a way to compile them with policies."""

    executor: Executor
    spec: WorkSpec  # compiler, timeout, flag edits; the policy is filled in per run
    jobs: Mapping[str, CompileJob]  # every module the env may compile, by name
    baselines: Mapping[str, float]  # baseline measure per module (none: skipped)
    stats: RunStats = field(default_factory=RunStats)
    # "package": batches spread evenly over packages; "baseline": a module's chance grows
    # with its baseline measure
    sample_by: str = "module"
    scoring: Scoring = BYTES
    # the baseline compiles' results, for problems whose rewards need more than their
    # measure (`ProblemTraining.keep_baseline_results`)
    references: Mapping[str, ModuleResult] = field(default_factory=dict)

    def byte_weights(self) -> dict[str, float]:
        """Module -> -Oz bytes over the mean of the training modules' (`byte_weights`)."""
        return byte_weights(self.baselines, self.names)

    @property
    def names(self) -> tuple[str, ...]:
        """Modules usable for training: sorted, so sampling from them is reproducible."""
        # a module with no .text (0 bytes at -Oz) has no relative size change
        return tuple(sorted(n for n in self.jobs if self.baselines.get(n, 0) > 0))

    def sample_modules(self, rng: np.random.Generator, n: int) -> list[str]:
        """`n` distinct modules (all of them if there are fewer), in sorted order."""
        if self.sample_by == "package":
            return sample_by_package(self.names, n, rng)
        if self.sample_by == "baseline":
            return sample_by_weight({m: self.baselines[m] for m in self.names}, n, rng)
        return sample_uniformly(self.names, n, rng)

    def run(
        self, members: Sequence[Policy], modules: Sequence[str], *, record: bool = False
    ) -> list[Episode]:
        """Compile every module with every member; episodes sorted by (module, member).

        Results arrive in completion order; sorting makes every later computation
        independent of worker timing.
        """
        jobs = [tag_job(self.jobs[m], k) for m in modules for k in range(len(members))]
        spec = replace(self.spec, policy=PolicyBatch(tuple(members)), record=record)
        started = time.monotonic()
        results = sorted(self.executor.run(spec, jobs), key=lambda r: untag(r.module))
        self.stats.seconds += time.monotonic() - started
        episodes = []
        for res in results:
            module, k = untag(res.module)
            features: Mapping[str, np.ndarray] | None = None
            actions = None
            callers: tuple[str, ...] | None = None
            estimates: Mapping[str, float] | None = None
            if estimator_of(self.spec.options) is not None and res.ok:
                estimates = from_extra(res.extra)
                if res.trajectory is not None and all(res.trajectory.contexts):
                    callers = tuple(res.trajectory.contexts)
                elif res.decisions == 0:
                    callers = ()
            if record and res.ok:
                if res.trajectory is not None:
                    features = res.trajectory.features
                    actions = np.asarray(res.trajectory.advice).reshape(-1).astype(np.int64)
                else:  # no inlinable call site: an episode without decisions
                    features, actions = {}, np.zeros(0, dtype=np.int64)
            size = self.scoring.value(res)
            episodes.append(Episode(
                module=module, member=k, baseline=self.baselines[module], size=size,
                decisions=res.decisions, features=features, actions=actions,
                error=res.error or (None if size is not None else "no size"),
                callers=callers, estimates=estimates, result=res,
            ))
            self.stats.compiles += 1
            self.stats.decisions += res.decisions
            self.stats.failures += 0 if episodes[-1].ok else 1
        return episodes

    def evaluate(self, policy: Policy, modules: Sequence[str]) -> float:
        """Total size change vs the baseline of `policy` on `modules` (failures left out)."""
        return size_change(self.run([policy], modules))

    def validate(self, policy: Policy, modules: Sequence[str],
                 select_by: str) -> tuple[float, float, float]:
        """(total change, package mean change, selection score) of `policy` on `modules`
        (failures left out; the score as `selection_score` reads `select_by`)."""
        eps = self.run([policy], modules)
        return size_change(eps), package_mean_change(eps), selection_score(eps, select_by)
