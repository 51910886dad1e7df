"""A policy that replays recorded decisions: run an env episode's actions through the
ordinary compile path (`compile_with_policy`, `mlgo eval`) and get the same compile."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pymlgo.problems.base import Decide


@dataclass(frozen=True)
class ReplayPolicy:
    """Answers the k-th request of a module with `actions[module][k]`.

    Running out of recorded actions means the compile diverged from the recording (other
    compiler, flags or bitcode): that is an error, not something to paper over.
    """

    actions: Mapping[str, tuple[int, ...]]
    advisor: str = "evict"  # read by the regalloc compile path; the inliner ignores it

    @property
    def name(self) -> str:
        return "replay"

    @property
    def required_features(self) -> tuple[str, ...]:
        return ()

    def for_module(self, module: str) -> Decide:
        recorded = self.actions.get(module)
        if recorded is None:
            raise KeyError(f"no recorded actions for module {module!r}")
        it = iter(recorded)

        def decide(features: Mapping[str, np.ndarray]) -> int:
            try:
                return next(it)
            except StopIteration:
                raise RuntimeError(
                    f"module {module}: the compiler asked more than the {len(recorded)}"
                    " recorded decisions"
                ) from None

        return decide
