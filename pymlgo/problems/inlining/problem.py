"""Inlining for size, as a `Problem`: clang's ML inliner on -Oz compiles, reward in bytes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pymlgo.problems.base import (
    CompileJob,
    CompileSettings,
    Measure,
    ModuleResult,
    Policy,
    problem_by_name,
)
from pymlgo.problems.inlining.compile import SIZE_STOP_KEY
from pymlgo.protocol.tensor_spec import TensorSpec
from pymlgo.toolchain.compiler import Compiler

if TYPE_CHECKING:  # numpy only, but most compiles never need it
    from pymlgo.ir2native.model import IR2NativeModel


@dataclass(frozen=True)
class InliningOptions:
    """Inlining's `CompileSettings.options`: with an IR2Native `estimator`, every result's
    `extra` holds per-function size estimates and a recorded trajectory the caller of each
    decision (partial rewards). With an IR2Vec vocabulary file `ir2vec_vocab`, compiles with
    a policy make clang send `callee_embedding` and `caller_embedding` (float[dim])."""

    estimator: IR2NativeModel | None = None
    ir2vec_vocab: Path | None = None


def estimator_of(options: Any) -> IR2NativeModel | None:
    return options.estimator if isinstance(options, InliningOptions) else None


def ir2vec_vocab_of(options: Any) -> Path | None:
    return options.ir2vec_vocab if isinstance(options, InliningOptions) else None


@dataclass(frozen=True)
class InliningProblem:
    name: str = "inlining"
    aliases: tuple[str, ...] = ()
    summary: str = ("inlining: -Oz with POLICY answering clang's inliner; reward: the "
                    "object's bytes vs plain -Oz")
    baseline_label: str = "-Oz"
    opt_level: str = "-Oz"
    measures: tuple[Measure, ...] = ()
    counters: tuple[str, ...] = (SIZE_STOP_KEY,)  # call sites refused past the size stop
    policy_codec: str = "pymlgo.policy.store"
    training: str = "pymlgo.train.inlining"
    traces: bool = True
    trace_advice: TensorSpec = TensorSpec("inlining_decision", "int64_t", (1,))
    always_asks: bool = True  # a header and a context even without a call site
    trace_policy: str = "default"  # clang's heuristic through the channel: behaviour cloning
    search_moves: tuple[str, ...] = ("single", "callee")

    def compile(self, compiler: Compiler, job: CompileJob, policy: Policy | None,
                settings: CompileSettings) -> ModuleResult:
        from pymlgo.problems.inlining import compile as inl

        estimator = estimator_of(settings.options)
        if policy is None:
            return inl.compile_baseline(compiler, job, settings, estimator=estimator)
        return inl.compile_with_policy(compiler, job, policy, settings, estimator=estimator,
                                       ir2vec_vocab=ir2vec_vocab_of(settings.options))

    def cache_extra(self, result: ModuleResult) -> Mapping[str, float]:
        return {}  # estimates depend on the estimator, which the cache key does not hold

    def search_answers(self, features: Mapping[str, np.ndarray], chosen: int
                       ) -> tuple[int, ...]:
        return (0,) if chosen else (1,)  # a call site is inlined or not

    def decision_weights(self, result: ModuleResult) -> np.ndarray | None:
        return None  # any call site can change the object's bytes

    def reward(self, baseline: ModuleResult, result: ModuleResult) -> float:
        """MLGO's 1 - size/baseline; a module without code (0 bytes) is no change."""
        if result.size is None or baseline.size is None:
            raise ValueError(f"{result.module}: a failed compile has no reward")
        return 1.0 - result.size / baseline.size if baseline.size else 0.0

    def check_trace_policy(self, policy: Policy) -> None:
        pass  # every inlining policy answers the channel

    def reproduces_baseline(self, policy: Policy) -> bool:
        from pymlgo.problems.inlining.policies import HeuristicPolicy

        return isinstance(policy, HeuristicPolicy)  # the inliner's own: its object is -Oz

    def stands_for_baseline(self, result: ModuleResult) -> bool:
        # past the ML advisor's size stop clang refuses call sites its heuristic would inline
        return not result.extra.get(SIZE_STOP_KEY)

    def __reduce__(self) -> tuple[Any, ...]:
        return problem_by_name, (self.name,)


INLINING = InliningProblem()
