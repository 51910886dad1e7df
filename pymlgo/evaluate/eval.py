"""Evaluate a policy on a corpus: per-module size vs the -Oz baseline, and the total."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pymlgo.corpus.format import Corpus
from pymlgo.evaluate.baseline import baseline_results
from pymlgo.problems.base import CompileJob, ModuleResult, Policy
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.size import DEFAULT_SIZE_METRIC, METRIC_MEANING, ObjectSize, total
from pymlgo.workers.protocol import Executor, WorkSpec

# Module-size buckets of the reports, by the -Oz size in the metric in force: big single
# translation units (amalgamations, unity builds) behave unlike small ones.
SIZE_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("<4KB", 0, 4096), ("4-16KB", 4096, 16384), ("16-64KB", 16384, 65536),
    (">=64KB", 65536, None))


def _change(base: int, new: int) -> float:
    return new / base - 1.0 if base else 0.0


def _compared(base: Mapping[str, int], pol: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    return {k: {"baseline_bytes": base[k], "policy_bytes": pol[k],
                "change": _change(base[k], pol[k])} for k in base}


@dataclass(frozen=True)
class ModuleRow:
    name: str
    baseline_bytes: int | None  # by the report's size metric
    policy_bytes: int | None
    decisions: int
    error: str | None
    baseline_sizes: ObjectSize | None = None  # by section group
    policy_sizes: ObjectSize | None = None

    @property
    def change(self) -> float | None:
        if self.error or not self.baseline_bytes or self.policy_bytes is None:
            return None
        return self.policy_bytes / self.baseline_bytes - 1.0

    def to_json(self) -> dict[str, Any]:
        def detail(sizes: ObjectSize | None) -> dict[str, Any] | None:
            return None if sizes is None else {"groups": sizes.groups(),
                                               "metrics": sizes.metrics(), "bss": sizes.bss}

        return {"name": self.name, "baseline_bytes": self.baseline_bytes,
                "policy_bytes": self.policy_bytes, "decisions": self.decisions,
                "error": self.error, "baseline": detail(self.baseline_sizes),
                "policy": detail(self.policy_sizes)}


@dataclass(frozen=True)
class EvalReport:
    problem: str
    policy: str
    compiler: dict[str, str]
    modules: tuple[ModuleRow, ...]
    size_metric: str = DEFAULT_SIZE_METRIC  # what `*_bytes` count (`toolchain.size`)

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
        return _change(self.baseline_total, self.policy_total)

    @property
    def guarded_total(self) -> int:
        """Per module the smaller of policy and -Oz (what a compile that keeps the smaller
        object would give a user)."""
        return sum(min(m.policy_bytes or 0, m.baseline_bytes or 0) for m in self.ok_modules)

    def _measured(self) -> tuple[ModuleRow, ...]:
        return tuple(m for m in self.ok_modules
                     if m.baseline_sizes is not None and m.policy_sizes is not None)

    def _sums(self) -> tuple[ObjectSize, ObjectSize]:
        """-Oz and policy bytes by group, summed over the modules measured on both sides."""
        rows = self._measured()
        return (total(m.baseline_sizes for m in rows if m.baseline_sizes),
                total(m.policy_sizes for m in rows if m.policy_sizes))

    def by_group(self) -> dict[str, dict[str, Any]]:
        """Totals per section group (modules measured by group on both sides)."""
        base, pol = self._sums()
        return _compared(base.groups(), pol.groups())

    def by_metric(self) -> dict[str, dict[str, Any]]:
        """Totals by every size metric, whichever is in force."""
        base, pol = self._sums()
        return _compared(base.metrics(), pol.metrics())

    def by_bucket(self) -> dict[str, dict[str, Any]]:
        """Totals per module-size bucket (SIZE_BUCKETS, by -Oz bytes of the metric)."""
        out = {}
        for name, lo, hi in SIZE_BUCKETS:
            rows = [m for m in self.ok_modules if m.baseline_bytes is not None
                    and m.baseline_bytes >= lo and (hi is None or m.baseline_bytes < hi)]
            b = sum(m.baseline_bytes or 0 for m in rows)
            p = sum(m.policy_bytes or 0 for m in rows)
            out[name] = {"modules": len(rows), "baseline_bytes": b, "policy_bytes": p,
                         "change": _change(b, p)}
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "problem": self.problem,
            "policy": self.policy,
            "size_metric": self.size_metric,
            "compiler": dict(self.compiler),
            "modules": [m.to_json() for m in self.modules],
            "total": {
                "baseline_bytes": self.baseline_total,
                "policy_bytes": self.policy_total,
                "change": self.change,
                "guarded_bytes": self.guarded_total,
                "guarded_change": _change(self.baseline_total, self.guarded_total),
                "by_group": self.by_group(),
                "by_metric": self.by_metric(),
                "by_size_bucket": self.by_bucket(),
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
    baselines: dict[str, tuple[int | None, str | None, ObjectSize | None]] = {}
    for res in baseline_results(executor, jobs, compiler, spec=base):
        baselines[res.module] = (res.size, res.error, res.sizes)
        if on_result:
            on_result(res)
    pol_spec = replace(base, policy=policy, record=False)
    results: dict[str, tuple[int | None, int, str | None, ObjectSize | None]] = {}
    for res in executor.run(pol_spec, jobs):
        results[res.module] = (res.size, res.decisions, res.error, res.sizes)
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
            baseline_sizes=b[2] if b else None,
            policy_sizes=p[3] if p else None,
        ))
    return EvalReport(base.problem, policy.name, compiler.describe(), tuple(rows),
                      size_metric=base.size_metric)


def _delta(base: ObjectSize | None, pol: ObjectSize | None, group: str) -> str:
    if base is None or pol is None:
        return ""
    return f"{getattr(pol, group) - getattr(base, group):+d}"


def format_table(report: EvalReport) -> str:
    """Per-module table (bytes by the report's metric; code and unwind-table deltas), the
    total, and the totals by section group, by metric and by module size, for the terminal."""
    width = max([len(m.name) for m in report.modules] + [6])
    lines = [f"size metric: {report.size_metric} ({METRIC_MEANING[report.size_metric]})",
             f"{'module':<{width}}  {'-Oz':>9}  {'policy':>9}  {'change':>8}  {'code':>7}  "
             f"{'unwind':>7}  {'decisions':>9}"]
    for m in report.modules:
        if m.error:
            lines.append(f"{m.name:<{width}}  error: {m.error[:120]}")
            continue
        lines.append(
            f"{m.name:<{width}}  {m.baseline_bytes:>9}  {m.policy_bytes:>9}  "
            f"{(m.change or 0.0) * 100:>+7.2f}%  "
            f"{_delta(m.baseline_sizes, m.policy_sizes, 'code'):>7}  "
            f"{_delta(m.baseline_sizes, m.policy_sizes, 'unwind'):>7}  {m.decisions:>9}"
        )
    failed = len(report.modules) - len(report.ok_modules)
    lines.append(
        f"{'TOTAL':<{width}}  {report.baseline_total:>9}  {report.policy_total:>9}  "
        f"{report.change * 100:>+7.2f}%  {'':>7}  {'':>7}  "
        f"{sum(m.decisions for m in report.ok_modules):>9}"
        + (f"   ({failed} module(s) failed, left out)" if failed else "")
    )
    guarded = report.guarded_total
    lines.append(f"guarded (per module the smaller of policy and -Oz): {guarded} bytes, "
                 f"{_change(report.baseline_total, guarded) * 100:+.2f}%")
    if report.ok_modules and len(report._measured()) == len(report.ok_modules):
        lines.append("by section group: " + ", ".join(
            f"{g} {t['baseline_bytes']}->{t['policy_bytes']}"
            for g, t in report.by_group().items()))
        lines.append("by size metric:   " + ", ".join(
            f"{k} {t['change'] * 100:+.2f}%" for k, t in report.by_metric().items()))
    lines.append("by module size:   " + ", ".join(
        f"{k} ({t['modules']}) {t['change'] * 100:+.2f}%"
        for k, t in report.by_bucket().items() if t["modules"]))
    return "\n".join(lines)
