"""Worker-side policy wrappers used during training (numpy only: workers forbid torch).

An executor runs one batch with one policy, so algorithms that compare several policies
in one iteration (ES perturbations, PPO's repeated samples) tag each job's module name
with a member index (`name#k`) and ship a `PolicyBatch` that routes by the tag.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pymlgo.policy.inlining import InliningPolicy
from pymlgo.problems.base import CompileJob, Decide, Policy
from pymlgo.problems.inlining.policies import for_language, module_seed

TAG = "#"


def tag_job(job: CompileJob, k: int) -> CompileJob:
    """The same compile, named `module#k` so results say which policy/sample made them."""
    return CompileJob(f"{job.module}{TAG}{k}", job.bitcode, job.cmd)


def untag(name: str) -> tuple[str, int]:
    """`module#k` -> (module, k); corpus module names are paths and never contain '#'."""
    module, _, k = name.rpartition(TAG)
    return module, int(k)


@dataclass(frozen=True, eq=False)
class PolicyBatch:
    """Several policies in one executor run: job `module#k` is compiled with `members[k]`.

    Member k sees the untagged module name, so a sampling member draws the same stream
    it would draw alone.
    """

    members: tuple[Policy, ...]
    name: str = "batch"

    @property
    def required_features(self) -> tuple[str, ...]:
        return self.members[0].required_features

    @property
    def ir2vec_vocab(self) -> Path | None:
        """The members' IR2Vec vocabulary (one batch compiles with one)."""
        return getattr(self.members[0], "ir2vec_vocab", None)

    def for_language(self, language: str | None) -> PolicyBatch:
        """Every member as it decides this language (`policies.for_language`)."""
        return PolicyBatch(tuple(for_language(m, language) for m in self.members), self.name)

    def for_module(self, module: str) -> Decide:
        base, k = untag(module)
        return self.members[k].for_module(base)


@dataclass(frozen=True, eq=False)
class EpsilonGreedy:
    """The greedy policy's decision, replaced by a coin flip with probability `epsilon`.

    The stream of random choices depends on (seed, module) only, like every stochastic
    policy here, so results do not depend on which worker compiled the module.
    """

    policy: InliningPolicy
    epsilon: float
    seed: int = 0
    name: str = "epsilon-greedy"

    @property
    def required_features(self) -> tuple[str, ...]:
        return self.policy.required_features

    @property
    def ir2vec_vocab(self) -> Path | None:
        return self.policy.ir2vec_vocab

    def for_module(self, module: str) -> Callable[[Mapping[str, np.ndarray]], int]:
        greedy = self.policy.greedy().for_module(module)
        rng = random.Random(module_seed(self.seed, module))
        eps = self.epsilon

        def decide(features: Mapping[str, np.ndarray]) -> int:
            explore, coin = rng.random() < eps, rng.random() < 0.5  # two draws, always
            return int(coin) if explore else greedy(features)

        return decide
