"""What every problem shares: the compile job, its result, the policy interface, and the
`Problem` interface every layer above `problems/` works through (`problems.registry`)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pymlgo.corpus.command import FlagEdits
from pymlgo.protocol.tensor_spec import TensorSpec
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.size import DEFAULT_SIZE_METRIC, ObjectSize

# features of one observation, by name -> advice value (int for decisions, float for scores)
Decide = Callable[[Mapping[str, np.ndarray]], "int | float | np.ndarray"]


class Policy(Protocol):
    """A decision rule the compile path can run without torch.

    `for_module` is called once per compiled module; a stochastic policy seeds its
    generator from (seed, module name) there, so results do not depend on which
    worker compiled which module, or in which order.
    """

    @property
    def name(self) -> str: ...

    @property
    def opt_level(self) -> str:
        """The cc1 `-O` level the problem compiles every module at (`-Oz`, `-O2`)."""
        ...

    @property
    def required_features(self) -> tuple[str, ...]: ...

    def for_module(self, module: str) -> Decide: ...


@dataclass(frozen=True)
class CompileJob:
    """One module to compile: its name, cc1 command and bitcode.

    `CompileJob(module, data, cmd)` holds the bitcode; `CompileJob.from_file` holds only
    its path and reads the file whenever `bitcode` is asked for, so a job list costs a
    path per module, not the corpus, until each job compiles. An executor whose workers
    have no shared filesystem ships `loaded()` jobs.
    """

    module: str
    data: bytes | None = field(repr=False)
    cmd: tuple[str, ...]
    path: Path | None = None

    def __post_init__(self) -> None:
        if (self.data is None) == (self.path is None):
            raise ValueError(f"job {self.module!r}: give either the bitcode or its path")

    @classmethod
    def from_file(cls, module: str, path: Path, cmd: tuple[str, ...]) -> CompileJob:
        return cls(module, None, cmd, path)

    @property
    def bitcode(self) -> bytes:
        """The module's bitcode; read from `path` on every call (never kept) if not held."""
        if self.data is not None:
            return self.data
        assert self.path is not None
        return self.path.read_bytes()

    def loaded(self) -> CompileJob:
        """This job holding its bitcode (OSError if the file cannot be read)."""
        return self if self.data is not None else CompileJob(self.module, self.bitcode,
                                                             self.cmd)

    def input_digest(self) -> str:
        """sha256 of what a compile of this job reads: its command and bitcode (OSError if
        the file cannot be read). Search and trace directories key finished modules by it."""
        h = hashlib.sha256("\0".join(self.cmd).encode())
        h.update(b"\0")
        h.update(self.bitcode)
        return h.hexdigest()


@dataclass(frozen=True)
class Trajectory:
    """Every decision of one compile: features stacked on axis 0, plus the advice given."""

    contexts: tuple[str, ...]  # context name of each decision
    features: Mapping[str, np.ndarray]  # name -> array of shape (n, *spec.shape)
    advice: np.ndarray  # shape (n, *advice_spec.shape)

    def __len__(self) -> int:
        return len(self.advice)


@dataclass(frozen=True)
class ModuleResult:
    """Outcome of compiling one module with one policy."""

    module: str
    size: int | None  # problem's measure: the object's bytes by the run's size metric
    decisions: int = 0
    seconds: float = 0.0
    error: str | None = None
    trajectory: Trajectory | None = None
    extra: Mapping[str, float] = field(default_factory=dict)
    sizes: ObjectSize | None = None  # the object's bytes by section group, when measured

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class CompileSettings:
    """How to compile, whatever the problem (a worker's `WorkSpec` minus problem and policy).

    `options` is the problem's own payload (e.g. inlining's IR2Native estimator): carried
    as it is by every layer above `problems/`, read only by the problem.
    """

    timeout: float = 300.0
    record: bool = False  # keep every decision's features (a trajectory)
    edits: FlagEdits = FlagEdits()
    memory_mb: int | None = None  # address-space limit of the compiler (None: unlimited)
    size_metric: str = DEFAULT_SIZE_METRIC
    options: Any = None


@dataclass(frozen=True)
class Measure:
    """A figure a problem measures besides bytes, from `ModuleResult.extra[key]`: reports
    show it as `baseline_FIELD`, `policy_FIELD` and `FIELD_change` (lower is better)."""

    key: str
    field: str
    label: str


class Problem(Protocol):
    """One optimization problem: what eval, trace, train, workers and the CLI need of it.

    Everything problem-specific (flags and channel, the advice and its checks, how a
    compile is measured, the policy file format) stays behind this interface; code above
    `problems/` never branches on a problem's name. Get one from `problems.registry`.
    """

    @property
    def name(self) -> str: ...

    @property
    def aliases(self) -> tuple[str, ...]: ...

    @property
    def summary(self) -> str:
        """One line for `--help`: what the policy drives and what the reward is."""
        ...

    @property
    def baseline_label(self) -> str:
        """What the baseline is called in tables (e.g. `-Oz`, `stock`)."""
        ...

    @property
    def measures(self) -> tuple[Measure, ...]: ...

    @property
    def counters(self) -> tuple[str, ...]:
        """`extra` keys a report sums over the policy's compiles (e.g. corrected advice)."""
        ...

    @property
    def policy_codec(self) -> str:
        """Module (above `problems/`) with `load_spec(spec, *, seed)` and
        `save_policy(policy, directory)`: this problem's policy names and file format."""
        ...

    @property
    def traces(self) -> bool:
        """Whether `mlgo trace` writes this problem's decisions as training logs."""
        ...

    @property
    def trace_advice(self) -> TensorSpec:
        """The decision as a trace log records it: the last feature of the log's header
        (as LLVM's development-mode logs append their decision spec)."""
        ...

    @property
    def always_asks(self) -> bool:
        """Whether every compile with a policy opens the channel and sends a header (the
        inliner does); if not (regalloc: a module without virtual registers), a policy
        compile without a header is a module without decisions, traced with no log."""
        ...

    @property
    def trace_policy(self) -> str:
        """The policy `mlgo trace` records when none is given."""
        ...

    def check_trace_policy(self, policy: Policy) -> None:
        """ValueError saying why, if a trace cannot record `policy`'s decisions (say, a
        policy that never answers the channel)."""
        ...

    def reproduces_baseline(self, policy: Policy) -> bool:
        """Whether `policy` answering the channel is the baseline compile to the byte
        (clang's own decisions, sent back): a trace then takes each module's traced compile
        as its baseline too, when `stands_for_baseline` says so."""
        ...

    def stands_for_baseline(self, result: ModuleResult) -> bool:
        """For a policy that `reproduces_baseline`: whether this successful traced compile
        is the baseline's object (not, e.g., when the inliner's size stop cut in)."""
        ...

    @property
    def training(self) -> str:
        """Module (above `problems/`) with `training(problem)`, the hooks the one trainer
        and its algorithms need (`train/hooks.py`): scoring, setup, policy heads."""
        ...

    def compile(self, compiler: Compiler, job: CompileJob, policy: Policy | None,
                settings: CompileSettings) -> ModuleResult:
        """Compile `job` with `policy` answering the channel, or with the compiler's own
        heuristic (`policy` None: the baseline); never raises for a bad module."""
        ...

    def cache_extra(self, result: ModuleResult) -> Mapping[str, float]:
        """What of a baseline result's `extra` the baseline cache keeps."""
        ...

    @property
    def search_moves(self) -> tuple[str, ...]:
        """The moves `mlgo search` can make on this problem's decisions (`single`: one
        decision at a time; `callee`: an inlined callee's call sites together); none if its
        advice is not a choice among a few answers (a float)."""
        ...

    def search_answers(self, features: Mapping[str, np.ndarray], chosen: int
                       ) -> tuple[int, ...]:
        """The answers other than `chosen` that a search tries at one recorded decision
        (its features), the most promising first."""
        ...

    def decision_weights(self, result: ModuleResult) -> np.ndarray | None:
        """How much each decision of `result`'s trajectory can change the measure, so that a
        search tries the heavy ones first and skips those at 0 (say, the cost of the
        function it was made in: a function that costs 0 cannot get cheaper); None if all
        can matter alike."""
        ...

    def reward(self, baseline: ModuleResult, result: ModuleResult) -> float:
        """The per-module reward of `result` against `baseline` (higher is better)."""
        ...


def problem_by_name(name: str) -> Problem:
    """`problems.registry.problem`, importable from the problem modules themselves (which
    the registry imports): unpickling a problem resolves it in the receiving process."""
    from pymlgo.problems.registry import problem

    return problem(name)
