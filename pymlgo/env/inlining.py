"""`pymlgo/Inlining-v0`: answer clang's inliner, call site by call site, on -Oz compiles.

Observation: every feature of the compiler's header except `inlining_default` (a `Dict` of
`Box`es, raw values); that one is `info["default_action"]`, clang's own decision, so an
agent can imitate or deviate from it. Action: `Discrete(2)`, 1 = inline. The final reward
is MLGO's `1 - size / baseline` in bytes of `EnvConfig.size_metric` (default: every
allocated section), the baseline being the module's plain -Oz size (the same cached number
`mlgo eval` compares with).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from pymlgo.env.base import CompilerEnv
from pymlgo.env.session import CompilerSession
from pymlgo.evaluate.baseline import BaselineCache, baseline_result
from pymlgo.problems.base import CompileJob
from pymlgo.problems.compile import compile_argv
from pymlgo.problems.inlining.compile import OPT_LEVEL, channel_flags
from pymlgo.problems.inlining.problem import INLINING
from pymlgo.protocol.log import Header, Observation
from pymlgo.toolchain.size import object_size
from pymlgo.workers.protocol import WorkSpec

DEFAULT_FEATURE = "inlining_default"
_ALL_VALID = np.ones(2, dtype=np.int8)


class InliningEnv(CompilerEnv):
    hidden_features = (DEFAULT_FEATURE,)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._baselines: dict[str, int] = {}
        super().__init__(*args, **kwargs)
        self._cache = BaselineCache()
        self._spec = WorkSpec(problem=INLINING,
                              clang=None if self.compiler.bundled else str(self.compiler.path),
                              timeout=self.config.timeout, size_metric=self.config.size_metric)

    def command(self, job: CompileJob, session: CompilerSession) -> list[str]:
        return compile_argv(self.compiler, job, session.tmp, OPT_LEVEL,
                            channel_flags(session.base))

    def make_action_space(self, header: Header) -> spaces.Discrete:
        return spaces.Discrete(2)

    def action_mask(self, obs: Observation | None) -> np.ndarray:
        return _ALL_VALID.copy()

    def default_action(self, obs: Observation) -> int | None:
        at = self._at.get(DEFAULT_FEATURE)
        return None if at is None else int(obs.tensors[at].reshape(-1)[0] != 0)

    def to_advice(self, action: int, obs: Observation) -> tuple[int, bool]:
        if action not in (0, 1):
            raise ValueError(f"inlining action must be 0 or 1, got {action}")
        return action, False

    def baseline_size(self, job: CompileJob) -> int:
        """The module's plain -Oz bytes by the configured size metric (disk cache shared
        with `mlgo eval`)."""
        if job.module not in self._baselines:
            res = baseline_result(self.compiler, self._spec, job, self._cache)
            self._baselines[job.module] = int(res.size or 0)
        return self._baselines[job.module]

    def final_info(self, job: CompileJob, session: CompilerSession) -> tuple[float, dict[str, Any]]:
        size = object_size(session.tmp / "module.o").metric(self.config.size_metric)
        baseline = self.baseline_size(job)
        # A module without code (only data) is 0 bytes either way: no change.
        change = size / baseline - 1.0 if baseline else 0.0
        return -change, {"size": size, "baseline_size": baseline, "size_change": change}
