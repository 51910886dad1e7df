"""Evaluate a policy on a corpus: per module its bytes (and whatever else the problem
measures, e.g. regalloc's weighted spill cost) vs the problem's baseline, and the totals."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pymlgo.corpus.format import Corpus, package_of
from pymlgo.evaluate.baseline import baseline_results
from pymlgo.evaluate.spread import DRAWS, LEVEL, largest_share, package_interval
from pymlgo.problems.base import CompileJob, Measure, ModuleResult, Policy
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
    # the problem's measures (`Problem.measures`) and counters, by `extra` key
    baseline_extra: Mapping[str, float] = field(default_factory=dict)
    policy_extra: Mapping[str, float] = field(default_factory=dict)

    @property
    def change(self) -> float | None:
        if self.error or not self.baseline_bytes or self.policy_bytes is None:
            return None
        return self.policy_bytes / self.baseline_bytes - 1.0

    def measured(self, measure: Measure) -> tuple[float | None, float | None]:
        """(baseline, policy) value of `measure`; None on a side that failed."""
        if self.error:
            return None, None
        return self.baseline_extra.get(measure.key), self.policy_extra.get(measure.key)

    def measure_change(self, measure: Measure) -> float | None:
        base, pol = self.measured(measure)
        if base is None or pol is None:
            return None
        if not base:
            return 0.0 if not pol else None
        return pol / base - 1.0

    def to_json(self, measures: Sequence[Measure] = (),
                counters: Sequence[str] = ()) -> dict[str, Any]:
        def detail(sizes: ObjectSize | None) -> dict[str, Any] | None:
            return None if sizes is None else {"groups": sizes.groups(),
                                               "metrics": sizes.metrics(), "bss": sizes.bss}

        out = {"name": self.name, "baseline_bytes": self.baseline_bytes,
               "policy_bytes": self.policy_bytes, "decisions": self.decisions,
               "error": self.error, "baseline": detail(self.baseline_sizes),
               "policy": detail(self.policy_sizes)}
        for m in measures:
            out[f"baseline_{m.field}"], out[f"policy_{m.field}"] = self.measured(m)
            out[f"{m.field}_change"] = self.measure_change(m)
        for c in counters:
            out[c] = int(self.policy_extra.get(c, 0))
        return out


@dataclass(frozen=True)
class EvalReport:
    problem: str
    policy: str
    compiler: dict[str, str]
    modules: tuple[ModuleRow, ...]
    size_metric: str = DEFAULT_SIZE_METRIC  # what `*_bytes` count (`toolchain.size`)
    measures: tuple[Measure, ...] = ()  # what the problem measures besides bytes
    counters: tuple[str, ...] = ()
    baseline_label: str = "-Oz"

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

    def _package_rows(self) -> list[tuple[str, list[ModuleRow]]]:
        """The modules that succeeded by package: a module name's first component (`mlgo
        corpus snapshot` and `mlgo corpus debian` name modules PKG/...)."""
        rows: dict[str, list[ModuleRow]] = {}
        for m in self.ok_modules:
            rows.setdefault(package_of(m.name), []).append(m)
        return sorted(rows.items())

    def by_package(self) -> dict[str, dict[str, Any]]:
        """Totals per package (`_package_rows`)."""
        out = {}
        for pkg, ms in self._package_rows():
            b = sum(m.baseline_bytes or 0 for m in ms)
            p = sum(m.policy_bytes or 0 for m in ms)
            out[pkg] = {"modules": len(ms), "baseline_bytes": b, "policy_bytes": p,
                        "change": _change(b, p)}
        return out

    def largest_growth(self, min_baseline_bytes: int = 0) -> ModuleRow | None:
        """The module of at least `min_baseline_bytes` (-Oz) that the policy grew most, by
        relative change; None when there is none."""
        rows = [m for m in self.ok_modules if m.baseline_bytes and m.policy_bytes is not None
                and m.baseline_bytes >= min_baseline_bytes]
        return max(rows, key=lambda m: m.change or 0.0, default=None)

    def largest_big_growth(self) -> dict[str, Any] | None:
        """`largest_growth` among the modules of the last size bucket (>= 64 KB at the
        baseline: issue 24's limit, no such module may grow by more than 0.5%), for JSON."""
        big = self.largest_growth(SIZE_BUCKETS[-1][1])
        return None if big is None else {
            "module": big.name, "baseline_bytes": big.baseline_bytes,
            "policy_bytes": big.policy_bytes, "change": big.change}

    def measure_totals(self, measure: Measure,
                       rows: Sequence[ModuleRow] | None = None) -> tuple[float, float]:
        """(baseline, policy) sums of `measure` over the modules that succeeded (or `rows`)."""
        pairs = [m.measured(measure) for m in (self.ok_modules if rows is None else rows)]
        return sum(b or 0.0 for b, _ in pairs), sum(p or 0.0 for _, p in pairs)

    def measure_summary(self, measure: Measure,
                        rows: Sequence[ModuleRow] | None = None) -> dict[str, float]:
        """`measure` summed at the baseline and with the policy, and its relative change."""
        base, pol = self.measure_totals(measure, rows)
        return {"baseline": base, "policy": pol, "change": pol / base - 1.0 if base else 0.0}

    def measure_by_package(self, measure: Measure) -> dict[str, dict[str, float]]:
        """`measure_summary` per package (`_package_rows`)."""
        return {pkg: self.measure_summary(measure, ms) for pkg, ms in self._package_rows()}

    def package_totals(self, measure: Measure | None = None) -> dict[str, tuple[float, float]]:
        """(baseline, policy) sums per package: of `measure`, or of bytes when None."""
        if measure is not None:
            return {pkg: self.measure_totals(measure, ms) for pkg, ms in self._package_rows()}
        return {pkg: (float(t["baseline_bytes"]), float(t["policy_bytes"]))
                for pkg, t in self.by_package().items()}

    def figures(self) -> list[tuple[str, Measure | None]]:
        """What the report totals, by name: the bytes (None), then each of the problem's
        measures."""
        return [("bytes", None), *((m.field, m) for m in self.measures)]

    def package_intervals(self) -> dict[str, list[float] | None]:
        """`spread.package_interval` of each of `figures`, by name."""
        out: dict[str, list[float] | None] = {}
        for key, measure in self.figures():
            interval = package_interval(self.package_totals(measure))
            out[key] = None if interval is None else list(interval)
        return out

    def to_json(self) -> dict[str, Any]:
        total: dict[str, Any] = {
            "baseline_bytes": self.baseline_total,
            "policy_bytes": self.policy_total,
            "change": self.change,
            "guarded_bytes": self.guarded_total,
            "guarded_change": _change(self.baseline_total, self.guarded_total),
            "by_group": self.by_group(),
            "by_metric": self.by_metric(),
            "by_size_bucket": self.by_bucket(),
            "package_interval": self.package_intervals(),
        }
        for m in self.measures:
            summary = self.measure_summary(m)
            total.update({f"{side}_{m.field}": summary[side] for side in ("baseline", "policy")})
            total[f"{m.field}_change"] = summary["change"]
        for c in self.counters:
            total[c] = sum(int(m.policy_extra.get(c, 0)) for m in self.ok_modules)
        return {
            "problem": self.problem,
            "policy": self.policy,
            "size_metric": self.size_metric,
            "compiler": dict(self.compiler),
            "modules": [m.to_json(self.measures, self.counters) for m in self.modules],
            "total": total,
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
    """Compile every job with the baseline of `spec.problem` (cached) and with `policy`.

    A module whose compile fails on either side gets `error` and is left out of the
    totals; the run goes on.
    """
    base = spec if spec is not None else WorkSpec(clang=None)
    problem = base.problem
    wanted = {m.key for m in problem.measures} | set(problem.counters)

    def keep(res: ModuleResult) -> ModuleResult:
        # Results stream through: per module only the few fields of its row are kept.
        extra = {k: v for k, v in res.extra.items() if k in wanted}
        return ModuleResult(res.module, res.size, decisions=res.decisions, error=res.error,
                            extra=extra, sizes=res.sizes)

    baselines: dict[str, ModuleResult] = {}
    for res in baseline_results(executor, jobs, compiler, spec=base):
        baselines[res.module] = keep(res)
        if on_result:
            on_result(res)
    results: dict[str, ModuleResult] = {}
    for res in executor.run(replace(base, policy=policy, record=False), jobs):
        results[res.module] = keep(res)
        if on_result:
            on_result(res)
    rows = []
    for module in sorted(job.module for job in jobs):
        b, p = baselines.get(module), results.get(module)
        errors = [f"baseline: {b.error if b else 'no result'}" if b is None or b.error else None,
                  f"policy: {p.error if p else 'no result'}" if p is None or p.error else None]
        rows.append(ModuleRow(
            name=module,
            baseline_bytes=b.size if b else None,
            policy_bytes=p.size if p else None,
            decisions=p.decisions if p else 0,
            error="; ".join(e for e in errors if e) or None,
            baseline_sizes=b.sizes if b else None,
            policy_sizes=p.sizes if p else None,
            baseline_extra=b.extra if b else {},
            policy_extra=p.extra if p else {},
        ))
    return EvalReport(problem.name, policy.name, compiler.describe(), tuple(rows),
                      size_metric=base.size_metric, measures=problem.measures,
                      counters=problem.counters, baseline_label=problem.baseline_label)


def _delta(base: ObjectSize | None, pol: ObjectSize | None, group: str) -> str:
    if base is None or pol is None:
        return ""
    return f"{getattr(pol, group) - getattr(base, group):+d}"


def _pct(change: float | None) -> str:
    return "n/a" if change is None else f"{change * 100:+.2f}%"


def format_table(report: EvalReport) -> str:
    """Per-module table (bytes by the report's metric; code and unwind-table deltas; the
    problem's measures vs its baseline), the totals, and the totals by section group, by
    metric and by module size, for the terminal."""
    width = max([len(m.name) for m in report.modules] + [6])
    label = report.baseline_label
    measures = "".join(f"  {label + ' ' + m.field:>12}  {'policy ' + m.field:>12}  {'change':>8}"
                       for m in report.measures)
    lines = [f"size metric: {report.size_metric} ({METRIC_MEANING[report.size_metric]})"
             + "".join(f"; {m.field}: {m.label}" for m in report.measures),
             f"{'module':<{width}}  {label:>9}  {'policy':>9}  {'change':>8}  {'code':>7}  "
             f"{'unwind':>7}  {'decisions':>9}{measures}"]
    for m in report.modules:
        if m.error:
            lines.append(f"{m.name:<{width}}  error: {m.error[:120]}")
            continue
        lines.append(
            f"{m.name:<{width}}  {m.baseline_bytes:>9}  {m.policy_bytes:>9}  "
            f"{(m.change or 0.0) * 100:>+7.2f}%  "
            f"{_delta(m.baseline_sizes, m.policy_sizes, 'code'):>7}  "
            f"{_delta(m.baseline_sizes, m.policy_sizes, 'unwind'):>7}  {m.decisions:>9}"
            + "".join(f"  {m.measured(x)[0] or 0.0:>12.1f}  {m.measured(x)[1] or 0.0:>12.1f}  "
                      f"{_pct(m.measure_change(x)):>8}" for x in report.measures)
        )
    failed = len(report.modules) - len(report.ok_modules)
    totals = [report.measure_totals(x) for x in report.measures]
    counted = {c: sum(int(m.policy_extra.get(c, 0)) for m in report.ok_modules)
               for c in report.counters}
    lines.append(
        f"{'TOTAL':<{width}}  {report.baseline_total:>9}  {report.policy_total:>9}  "
        f"{report.change * 100:>+7.2f}%  {'':>7}  {'':>7}  "
        f"{sum(m.decisions for m in report.ok_modules):>9}"
        + "".join(f"  {b:>12.1f}  {p:>12.1f}  {_pct(p / b - 1.0 if b else 0.0):>8}"
                  for b, p in totals)
        + (f"   ({failed} module(s) failed, left out)" if failed else "")
        + "".join(f"   ({n} {c.replace('_', ' ')})" for c, n in counted.items() if n)
    )
    guarded = report.guarded_total
    lines.append(f"guarded (per module the smaller of policy and {label}): {guarded} bytes, "
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
    for name, measure in report.figures():
        lines += _package_lines(report, name, measure)
    return "\n".join(lines)


PACKAGES_SHOWN = 8


def _package_lines(report: EvalReport, name: str, measure: Measure | None) -> list[str]:
    """Per package the change of `name` (the largest packages first), and how far the
    total's change rests on which packages are in the corpus (`spread`)."""
    totals = report.package_totals(measure)
    interval = package_interval(totals)
    if interval is None:
        return []
    whole = sum(b for b, _ in totals.values())
    ranked = sorted(totals, key=lambda k: (-totals[k][0], k))
    shown = [f"{k} {_pct(totals[k][1] / totals[k][0] - 1.0 if totals[k][0] else None)} "
             f"({totals[k][0] / whole:.0%})" for k in ranked[:PACKAGES_SHOWN]]
    more = len(ranked) - PACKAGES_SHOWN
    share = largest_share(totals)
    lo, hi = interval
    return [f"by package ({name}, share of the {report.baseline_label} total): "
            + ", ".join(shown) + (f", {more} more" if more > 0 else ""),
            f"package bootstrap: the total {name} change lies in {_pct(lo)} .. {_pct(hi)} "
            f"in {LEVEL:.0%} of {DRAWS:,} resamplings of the {len(totals)} packages"
            + (f"; {share[0]} holds {share[1]:.0%} of it" if share else "")]
