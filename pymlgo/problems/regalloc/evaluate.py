"""Evaluate a regalloc policy on a corpus against the stock advisor (cached), for `mlgo eval
--problem regalloc` and the benchmarks: the eval JSON schema plus the weighted-cost fields.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pymlgo.evaluate.baseline import baseline_key, cache_root
from pymlgo.problems.base import CompileJob, ModuleResult, Policy
from pymlgo.problems.regalloc.compile import CORRECTED_KEY, COST_KEY
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.files import write_atomic
from pymlgo.toolchain.size import DEFAULT_SIZE_METRIC, ObjectSize
from pymlgo.workers.protocol import Executor, WorkSpec

PROBLEM = "regalloc"


class RegallocBaselineCache:
    """Stock-advisor results (bytes and every remark figure), one JSON file per key
    (`evaluate.baseline.baseline_key`); atomic writes, so parallel runs can share it."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or cache_root()) / "regalloc-baselines"

    def get(self, key: str, module: str) -> ModuleResult | None:
        try:
            d = json.loads((self.root / f"{key}.json").read_text())
            return ModuleResult(module, int(d["size"]),
                                extra={**{k: float(v) for k, v in d["extra"].items()},
                                       "cached": 1.0},
                                sizes=ObjectSize.from_json(d["sizes"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def put(self, key: str, result: ModuleResult) -> None:
        doc = {"size": result.size, "extra": dict(result.extra),
               "sizes": result.sizes.to_json() if result.sizes else None}
        write_atomic(self.root / f"{key}.json", json.dumps(doc).encode())


def baseline_results(
    executor: Executor,
    jobs: Sequence[CompileJob],
    compiler: Compiler,
    *,
    spec: WorkSpec | None = None,
    cache: RegallocBaselineCache | None = None,
) -> Iterator[ModuleResult]:
    """Stock-advisor result per job: cached ones first, the rest compiled on `executor`.
    Failures are yielded (with `error`) but never cached."""
    s = spec or WorkSpec(problem=PROBLEM)
    base = WorkSpec(problem=PROBLEM, clang=s.clang, policy=None, timeout=s.timeout,
                    edits=s.edits, size_metric=s.size_metric)
    cache = cache or RegallocBaselineCache()
    keys = {job.module: baseline_key(compiler, base, job) for job in jobs}
    missing = []
    for job in jobs:
        hit = cache.get(keys[job.module], job.module)
        if hit is None:
            missing.append(job)
        else:
            yield hit
    if missing:
        for res in executor.run(base, missing):
            if res.ok and res.sizes is not None and res.module in keys:
                cache.put(keys[res.module], res)
            yield res


@dataclass(frozen=True)
class RegallocRow:
    name: str
    baseline_bytes: int | None
    policy_bytes: int | None
    baseline_cost: float | None
    policy_cost: float | None
    decisions: int
    invalid_advice: int
    error: str | None

    @property
    def cost_change(self) -> float | None:
        if self.error or self.baseline_cost is None or self.policy_cost is None:
            return None
        if not self.baseline_cost:
            return 0.0 if not self.policy_cost else None
        return self.policy_cost / self.baseline_cost - 1.0


@dataclass(frozen=True)
class RegallocReport:
    policy: str
    compiler: dict[str, str]
    modules: tuple[RegallocRow, ...]
    problem: str = PROBLEM
    size_metric: str = DEFAULT_SIZE_METRIC  # what the bytes count (`toolchain.size`)

    @property
    def ok_modules(self) -> tuple[RegallocRow, ...]:
        return tuple(m for m in self.modules if m.error is None)

    def _sum(self, attr: str) -> float:
        return sum(getattr(m, attr) or 0 for m in self.ok_modules)

    @property
    def change(self) -> float:
        base = self._sum("baseline_bytes")
        return self._sum("policy_bytes") / base - 1.0 if base else 0.0

    @property
    def cost_change(self) -> float:
        base = self._sum("baseline_cost")
        return self._sum("policy_cost") / base - 1.0 if base else 0.0

    def to_json(self) -> dict[str, Any]:
        """`mlgo eval`'s schema (bytes at -O2, by `size_metric`) plus the remark cost
        fields."""
        return {
            "problem": self.problem,
            "size_metric": self.size_metric,
            "policy": self.policy,
            "compiler": dict(self.compiler),
            "modules": [
                {"name": m.name, "baseline_bytes": m.baseline_bytes,
                 "policy_bytes": m.policy_bytes, "decisions": m.decisions, "error": m.error,
                 "baseline_cost": m.baseline_cost, "policy_cost": m.policy_cost,
                 "cost_change": m.cost_change, "invalid_advice": m.invalid_advice}
                for m in self.modules
            ],
            "total": {
                "baseline_bytes": int(self._sum("baseline_bytes")),
                "policy_bytes": int(self._sum("policy_bytes")),
                "change": self.change,
                "baseline_cost": self._sum("baseline_cost"),
                "policy_cost": self._sum("policy_cost"),
                "cost_change": self.cost_change,
                "invalid_advice": int(self._sum("invalid_advice")),
            },
        }


def evaluate_regalloc(
    executor: Executor,
    compiler: Compiler,
    jobs: Sequence[CompileJob],
    policy: Policy,
    *,
    spec: WorkSpec | None = None,
    on_result: Callable[[ModuleResult], None] | None = None,
) -> RegallocReport:
    """Compile every job with the stock advisor (cached) and with `policy`; a module that
    fails on either side gets `error` and is left out of the totals."""
    s = spec or WorkSpec(problem=PROBLEM)
    baselines: dict[str, ModuleResult] = {}
    for res in baseline_results(executor, jobs, compiler, spec=s):
        baselines[res.module] = res
        if on_result:
            on_result(res)
    pol_spec = WorkSpec(problem=PROBLEM, clang=s.clang, policy=policy, timeout=s.timeout,
                        edits=s.edits, size_metric=s.size_metric)
    results: dict[str, ModuleResult] = {}
    for res in executor.run(pol_spec, list(jobs)):
        results[res.module] = res
        if on_result:
            on_result(res)
    rows = []
    for job in sorted(jobs, key=lambda j: j.module):
        b, p = baselines.get(job.module), results.get(job.module)
        errors = [f"baseline: {b.error}" if b is None or b.error else None,
                  f"policy: {p.error}" if p is None or p.error else None]
        err = "; ".join(e for e in errors if e) or None
        rows.append(RegallocRow(
            name=job.module,
            baseline_bytes=b.size if b else None,
            policy_bytes=p.size if p else None,
            baseline_cost=b.extra.get(COST_KEY) if b and b.ok else None,
            policy_cost=p.extra.get(COST_KEY) if p and p.ok else None,
            decisions=p.decisions if p else 0,
            invalid_advice=int(p.extra.get(CORRECTED_KEY, 0)) if p else 0,
            error=err,
        ))
    return RegallocReport(policy.name, compiler.describe(), tuple(rows),
                          size_metric=s.size_metric)


def format_table(report: RegallocReport) -> str:
    """Per-module weighted cost and bytes (by the report's size metric) vs the stock
    advisor, plus totals."""
    width = max([len(m.name) for m in report.modules] + [6])
    lines = [f"{'module':<{width}}  {'stock cost':>12}  {'policy cost':>12}  {'change':>8}  "
             f"{'bytes':>8}  {'decisions':>9}   (bytes: {report.size_metric})"]
    for m in report.modules:
        if m.error:
            lines.append(f"{m.name:<{width}}  error: {m.error[:120]}")
            continue
        change = m.cost_change
        lines.append(
            f"{m.name:<{width}}  {m.baseline_cost:>12.1f}  {m.policy_cost:>12.1f}  "
            f"{'n/a' if change is None else f'{change * 100:+.2f}%':>8}  "
            f"{(m.policy_bytes or 0) - (m.baseline_bytes or 0):>+8}  {m.decisions:>9}"
        )
    t = report.to_json()["total"]
    failed = len(report.modules) - len(report.ok_modules)
    lines.append(
        f"{'TOTAL':<{width}}  {t['baseline_cost']:>12.1f}  {t['policy_cost']:>12.1f}  "
        f"{t['cost_change'] * 100:>+7.2f}%  {t['policy_bytes'] - t['baseline_bytes']:>+8}  "
        f"{sum(m.decisions for m in report.ok_modules):>9}"
        + (f"   ({failed} module(s) failed, left out)" if failed else "")
        + (f"   ({t['invalid_advice']} invalid answer(s) corrected)"
           if t["invalid_advice"] else "")
    )
    return "\n".join(lines)
