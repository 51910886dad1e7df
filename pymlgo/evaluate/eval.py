"""Evaluate a policy on a corpus: per-module size vs the -Oz baseline, and the total."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pymlgo.corpus.format import Corpus
from pymlgo.evaluate.baseline import baseline_results
from pymlgo.problems.base import CompileJob, ModuleResult, Policy
from pymlgo.toolchain.compiler import Compiler
from pymlgo.workers.protocol import Executor, WorkSpec


@dataclass(frozen=True)
class ModuleRow:
    name: str
    baseline_bytes: int | None
    policy_bytes: int | None
    decisions: int
    error: str | None

    @property
    def change(self) -> float | None:
        if self.error or not self.baseline_bytes or self.policy_bytes is None:
            return None
        return self.policy_bytes / self.baseline_bytes - 1.0


@dataclass(frozen=True)
class EvalReport:
    problem: str
    policy: str
    compiler: dict[str, str]
    modules: tuple[ModuleRow, ...]

    @property
    def ok_modules(self) -> tuple[ModuleRow, ...]:
        return tuple(m for m in self.modules if m.error is None)

    @property
    def baseline_total(self) -> int:
        return sum(m.baseline_bytes or 0 for m in self.ok_modules)

    @property
    def policy_total(self) -> int:
        return sum(m.policy_bytes or 0 for m in self.ok_modules)

    @property
    def change(self) -> float:
        base = self.baseline_total
        return self.policy_total / base - 1.0 if base else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "problem": self.problem,
            "policy": self.policy,
            "compiler": dict(self.compiler),
            "modules": [
                {
                    "name": m.name,
                    "baseline_bytes": m.baseline_bytes,
                    "policy_bytes": m.policy_bytes,
                    "decisions": m.decisions,
                    "error": m.error,
                }
                for m in self.modules
            ],
            "total": {
                "baseline_bytes": self.baseline_total,
                "policy_bytes": self.policy_total,
                "change": self.change,
            },
        }


def corpus_jobs(corpus: Corpus, names: Sequence[str] | None = None) -> list[CompileJob]:
    """One job per module (all, or `names`), reading its bitcode only when it compiles:
    the jobs of a corpus of any size cost a path each, not the corpus."""
    wanted = None if names is None else set(names)
    return [
        CompileJob.from_file(m.name, m.bc_path, m.cmd)
        for m in corpus.modules
        if wanted is None or m.name in wanted
    ]


def evaluate(
    executor: Executor,
    compiler: Compiler,
    jobs: Sequence[CompileJob],
    policy: Policy,
    *,
    spec: WorkSpec | None = None,
    on_result: Callable[[ModuleResult], None] | None = None,
) -> EvalReport:
    """Compile every job with the baseline (cached) and with `policy`.

    A module whose compile fails on either side gets `error` and is left out of the
    totals; the run goes on.
    """
    base = spec if spec is not None else WorkSpec(clang=None)
    # Results stream through: per module only the few fields of its row are kept.
    baselines: dict[str, tuple[int | None, str | None]] = {}
    for res in baseline_results(executor, jobs, compiler, spec=base):
        baselines[res.module] = (res.size, res.error)
        if on_result:
            on_result(res)
    pol_spec = replace(base, policy=policy, record=False)
    results: dict[str, tuple[int | None, int, str | None]] = {}
    for res in executor.run(pol_spec, jobs):
        results[res.module] = (res.size, res.decisions, res.error)
        if on_result:
            on_result(res)
    rows = []
    for module in sorted(job.module for job in jobs):
        b, p = baselines.get(module), results.get(module)
        errors = [f"baseline: {b[1] if b else 'no result'}" if b is None or b[1] else None,
                  f"policy: {p[2] if p else 'no result'}" if p is None or p[2] else None]
        err = "; ".join(e for e in errors if e) or None
        rows.append(ModuleRow(
            name=module,
            baseline_bytes=b[0] if b else None,
            policy_bytes=p[0] if p else None,
            decisions=p[1] if p else 0,
            error=err,
        ))
    return EvalReport(base.problem, policy.name, compiler.describe(), tuple(rows))


def format_table(report: EvalReport) -> str:
    """Per-module table plus the total, for the terminal."""
    width = max([len(m.name) for m in report.modules] + [6])
    lines = [f"{'module':<{width}}  {'-Oz':>9}  {'policy':>9}  {'change':>8}  {'decisions':>9}"]
    for m in report.modules:
        if m.error:
            lines.append(f"{m.name:<{width}}  error: {m.error[:120]}")
            continue
        lines.append(
            f"{m.name:<{width}}  {m.baseline_bytes:>9}  {m.policy_bytes:>9}  "
            f"{(m.change or 0.0) * 100:>+7.2f}%  {m.decisions:>9}"
        )
    failed = len(report.modules) - len(report.ok_modules)
    lines.append(
        f"{'TOTAL':<{width}}  {report.baseline_total:>9}  {report.policy_total:>9}  "
        f"{report.change * 100:>+7.2f}%  {sum(m.decisions for m in report.ok_modules):>9}"
        + (f"   ({failed} module(s) failed, left out)" if failed else "")
    )
    return "\n".join(lines)
