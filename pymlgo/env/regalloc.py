"""`pymlgo/RegallocEviction-v0`: choose which live range the greedy allocator evicts.

Observation: the eviction advisor's features, `[1, N]` tensors over N candidate live
ranges (the last column is the live range being allocated: "evict nothing"). Action:
`Discrete(N)`; `info["action_mask"]` is the compiler's `mask` (1 = may be evicted). An
action outside the mask is never sent (a release-built LLVM trusts its advice): it is
replaced by the safe column, as `mlgo eval` does, and flagged `info["corrected_action"]`.
The final reward is the module's block-frequency weighted spill/reload/copy cost change
against the stock advisor, `-(cost - baseline) / max(baseline, floor)`. The stock
advisor's choice is not sent on the channel, so `info["default_action"]` is None.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from pymlgo.env.base import CompilerEnv
from pymlgo.env.session import CompilerSession
from pymlgo.evaluate.baseline import BaselineCache, baseline_result
from pymlgo.problems.base import CompileJob, ModuleResult
from pymlgo.problems.compile import compile_argv
from pymlgo.problems.regalloc.advice import EVICT_ADVICE, MASK_FEATURE, valid_eviction
from pymlgo.problems.regalloc.compile import COST_KEY, OPT_LEVEL, channel_flags, remark_flags
from pymlgo.problems.regalloc.problem import REGALLOC_EVICT
from pymlgo.problems.regalloc.remarks import read_remarks, remark_file
from pymlgo.problems.regalloc.reward import relative_change
from pymlgo.protocol.features import select_features
from pymlgo.protocol.log import Header, Observation
from pymlgo.toolchain.size import object_size
from pymlgo.workers.protocol import WorkSpec


class RegallocEvictionEnv(CompilerEnv):
    opt_level = OPT_LEVEL  # -O2: the demo corpus it loads is recorded at -O2 too

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._baselines: dict[str, ModuleResult] = {}
        super().__init__(*args, **kwargs)
        if self.header.advice is None or self.header.advice.name != EVICT_ADVICE:
            raise ValueError(f"expected advice {EVICT_ADVICE!r} from the eviction channel")
        self._mask_at = select_features(self.header.features, [MASK_FEATURE])[0]
        self._cache = BaselineCache()
        self._spec = WorkSpec(problem=REGALLOC_EVICT,
                              clang=None if self.compiler.bundled else str(self.compiler.path),
                              timeout=self.config.timeout, size_metric=self.config.size_metric)

    def command(self, job: CompileJob, session: CompilerSession) -> list[str]:
        return compile_argv(self.compiler, job, session.tmp, OPT_LEVEL,
                            [*remark_flags(remark_file(session.tmp)),
                             *channel_flags(REGALLOC_EVICT.advisor, session.base)])

    def make_action_space(self, header: Header) -> spaces.Discrete:
        mask = header.features[select_features(header.features, [MASK_FEATURE])[0]]
        return spaces.Discrete(int(mask.shape[-1]))

    def action_mask(self, obs: Observation | None) -> np.ndarray:
        n = int(self.action_space.n)
        if obs is None:
            return np.zeros(n, dtype=np.int8)
        return (obs.tensors[self._mask_at].reshape(-1) == 1).astype(np.int8)

    def default_action(self, obs: Observation) -> int | None:
        return None

    def to_advice(self, action: int, obs: Observation) -> tuple[int, bool]:
        return valid_eviction(action, obs.tensors[self._mask_at])

    def baseline(self, job: CompileJob) -> ModuleResult:
        """The stock advisor's result (size and remark costs; disk cache shared with
        `mlgo eval --problem regalloc`)."""
        if job.module not in self._baselines:
            self._baselines[job.module] = baseline_result(self.compiler, self._spec, job,
                                                          self._cache)
        return self._baselines[job.module]

    def final_info(self, job: CompileJob, session: CompilerSession) -> tuple[float, dict[str, Any]]:
        size = object_size(session.tmp / "module.o").metric(self.config.size_metric)
        cost = read_remarks(remark_file(session.tmp)).total.weighted_cost()
        base = self.baseline(job)
        base_cost = float(base.extra[COST_KEY])
        return -relative_change(cost, base_cost), {
            "size": size,
            "baseline_size": base.size,
            "weighted_cost": cost,
            "baseline_cost": base_cost,
        }
