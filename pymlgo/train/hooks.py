"""What the one trainer (`trainer.py`) and its algorithms need of a problem.

The loop, checkpoints, resume, logging and the algorithms (`es.py`, `ppo.py`, ...) are
written once; each problem supplies a `ProblemTraining` (named by `Problem.training`):
which algorithms apply, how a compile is scored, the one-time setup (demonstrations, the
initial policy) and, for ppo, the torch mirror of its policy. Torch-free: ppo's head is
imported only when asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pymlgo.problems.base import CompileJob, ModuleResult, Policy, Problem, Trajectory

if TYPE_CHECKING:
    from pathlib import Path

    from pymlgo.corpus.format import Corpus
    from pymlgo.corpus.split import Split
    from pymlgo.toolchain.compiler import Compiler
    from pymlgo.train.config import TrainConfig
    from pymlgo.train.env import Demonstrations, Episode, TrainEnv
    from pymlgo.train.sources import Sources
    from pymlgo.workers.protocol import Executor, WorkSpec

class TrainError(RuntimeError):
    """The run cannot start or continue (say, the output directory holds another run)."""


# Independent random streams per purpose, all derived from the run's one seed.
STREAM_INIT, STREAM_WARMSTART, STREAM_ALGO, STREAM_TRAIN_CHECK = 1, 2, 3, 4


def stream_seed(seed: int, stream: int) -> int:
    """The seed of one purpose's random stream (`STREAM_*`) of a run seeded with `seed`."""
    return int(np.random.default_rng([seed, stream]).integers(0, 2**62))


class Scoring(Protocol):
    """How one compile is scored against the baseline: the measure (lower is better) and
    the ES fitness of a batch of members."""

    @property
    def name(self) -> str:
        """What is measured, in scalar names (`{name}_change/validation`) and messages."""
        ...

    def value(self, result: ModuleResult) -> float | None:
        """The measure of a successful compile (None: not measured)."""
        ...

    def fitness(self, values: Mapping[str, Sequence[float]], common: Sequence[str],
                baselines: Mapping[str, float], weighting: str) -> tuple[np.ndarray, float]:
        """(fitness of every member, higher is better; member 0's total change vs the
        baseline) from `values[module][member]` on the `common` modules, modules counting
        as the run's `reward_weighting` says."""
        ...


@dataclass(frozen=True, eq=False)
class PolicySetup:
    """The problem's part of the one-time setup (`trainer.Setup`)."""

    # decisions per module (inlining: the call sites clang asks about); training compiles
    # only modules with > 0, those a policy can change
    decisions: Mapping[str, int]
    demos_train: Demonstrations | None
    demos_validation: Demonstrations | None
    initial: Policy
    warmstart_scalars: Mapping[str, float]
    # a network drawn at random (no warm start, no saved policy, no built-in rule): its
    # validation says nothing learned, so the trainer never offers it as best/
    initial_is_random: bool = False


class PPOHead(Protocol):
    """The torch side of a problem's policy for ppo (`ppo.py` runs the clipped update)."""

    def net(self, policy: Any) -> Any:
        """The torch module mirroring `policy`'s parameters."""
        ...

    def policy(self, template: Any, net: Any) -> Policy:
        """`template` (greedy) with the parameters of `net`."""
        ...

    def batch(self, ppo: Any, env: TrainEnv, episodes: list[Episode], behaviour: Any
              ) -> tuple[Any, np.ndarray, np.ndarray, dict[str, float]] | None:
        """(decisions, log pi_old of the actions taken, advantages, scalars) from the
        sampled episodes of one iteration; None if nothing can be learned from them."""
        ...

    def log_prob_entropy(self, net: Any, batch: Any, idx: Any) -> tuple[Any, Any]:
        """(log pi(a|s), entropy) of decisions `idx` of `batch` under `net`."""
        ...


class Imitator(Protocol):
    """The cloner `il` fits to the best trajectories search finds (`il.py`)."""

    def policy(self) -> Policy:
        """The policy of the network as fitted so far (greedy)."""
        ...

    def encode(self, trajectory: Trajectory) -> tuple[np.ndarray, ...]:
        """The rows `fit` learns from one trajectory (its decisions, as arrays)."""
        ...

    def fit(self, rows: Sequence[tuple[np.ndarray, ...]], epochs: int,
            rng: np.random.Generator) -> dict[str, float]:
        """`epochs` passes over every trajectory's `rows` together, minibatches shuffled by
        `rng`; `il/loss` and `il/dataset_decisions` (and where the decision is a yes or no,
        `il/agreement`: greedy decisions vs the rows')."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class ProblemTraining(Protocol):
    """One problem's hooks for the trainer (see the module docstring)."""

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The `algo` values this problem trains with."""
        ...

    @property
    def bc_warmstart(self) -> bool:
        """Whether clang sends its own decision to imitate (`warmstart = "bc"`)."""
        ...

    @property
    def scoring(self) -> Scoring: ...

    @property
    def default_hidden(self) -> tuple[int, ...]:
        """The hidden layers of a new policy when `[policy] hidden` is left out."""
        ...

    @property
    def keep_baseline_results(self) -> bool:
        """Whether training needs the baseline compiles' results, not only their measure
        (saved in the setup; `TrainEnv.references`)."""
        ...

    def check(self, config: TrainConfig) -> None:
        """ConfigError if `config` asks for what this problem has not."""
        ...

    def load_sources(self, config: TrainConfig, corpus: Corpus, compiler: Compiler) -> Sources:
        """The warm start (and vocab, traces) from outside the run; SourceError if unusable."""
        ...

    def compile_options(self, out: Path, sources: Sources | None) -> Any:
        """The problem's options of every compile of the run (`WorkSpec.options`), from
        what the run keeps in its output directory `out`. `sources` is given when the run is
        set up now (the problem may copy from them into `out`), None when it resumes."""
        ...

    def rebind(self, policy: Any, options: Any) -> Policy:
        """`policy`, as an earlier process saved it (setup.pkl, checkpoint.pkl), made to
        compile with this run's `options` (the output directory may have moved since);
        TrainError if it cannot."""
        ...

    def setup(self, config: TrainConfig, split: Split, baselines: Mapping[str, float],
              jobs: Mapping[str, CompileJob], executor: Executor, spec: WorkSpec,
              sources: Sources, say: Callable[[str], None]) -> PolicySetup:
        """Demonstrations and the initial policy (warm start included); `spec` has the
        run's `compile_options`."""
        ...

    def ppo_head(self) -> PPOHead:
        """ppo's torch head (imports torch)."""
        ...

    def behaviour_cloning(self, config: TrainConfig, demos_train: Any,
                          demos_validation: Any, initial: Any, seed: int) -> Any:
        """The `algo = "bc"` algorithm (imports torch), fitting `initial` to the setup's
        demonstrations."""
        ...

    def imitation(self, config: TrainConfig, initial: Any) -> Imitator:
        """`algo = "il"`'s cloner (imports torch), starting from `initial`."""
        ...


def training_of(problem: Problem) -> ProblemTraining:
    """The training hooks of `problem` (`Problem.training` names their module)."""
    module = importlib.import_module(problem.training)
    return module.training(problem)  # type: ignore[no-any-return]
