"""A training run's report: markdown tables and a PNG of per-module size change vs -Oz,
in the bytes of the size metric in force (`toolchain.size`).

matplotlib is used through its object API with the Agg canvas (no pyplot, no display, no
global state), so reports can be written from any process, headless.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pymlgo.evaluate.eval import EvalReport
from pymlgo.toolchain.size import DEFAULT_SIZE_METRIC

REPORT_FILE, PLOT_FILE = "report.md", "size_change.png"


@dataclass(frozen=True)
class SplitResult:
    """One split's evaluation, under the name the report shows (e.g. "held-out")."""

    name: str
    report: EvalReport


def size_metric(results: Sequence[SplitResult]) -> str:
    """The size metric the splits were measured by (one run measures all by one)."""
    return results[0].report.size_metric if results else DEFAULT_SIZE_METRIC


def summary_table(results: Sequence[SplitResult]) -> str:
    """Totals per split by the metric in force, with the executable-only change beside."""
    metric = size_metric(results)
    lines = [f"| split | modules | -Oz bytes ({metric}) | policy bytes | change | "
             "change, code only |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        rep = r.report
        failed = len(rep.modules) - len(rep.ok_modules)
        count = f"{len(rep.ok_modules)}" + (f" ({failed} failed)" if failed else "")
        text = rep.by_metric()["text"]["change"]
        lines.append(f"| {r.name} | {count} | {rep.baseline_total:,} | {rep.policy_total:,} | "
                     f"**{rep.change:+.2%}** | {text:+.2%} |")
    return "\n".join(lines)


def group_table(results: Sequence[SplitResult]) -> str:
    """Where the bytes went: -Oz and policy bytes per section group and split."""
    lines = ["| split | group | -Oz bytes | policy bytes | difference |",
             "| --- | --- | ---: | ---: | ---: |"]
    for r in results:
        for group, t in r.report.by_group().items():
            lines.append(f"| {r.name} | {group} | {t['baseline_bytes']:,} | "
                         f"{t['policy_bytes']:,} | {t['policy_bytes'] - t['baseline_bytes']:+,} |")
    return "\n".join(lines)


def module_table(report: EvalReport) -> str:
    """Per-module rows, largest saving first; failed modules last, with their error."""
    ok = sorted(report.ok_modules, key=lambda m: (m.change or 0.0, m.name))
    lines = ["| module | -Oz bytes | policy bytes | change | decisions |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for m in ok:
        change = f"{m.change:+.2%}" if m.change is not None else "n/a (0 bytes)"
        lines.append(f"| `{m.name}` | {m.baseline_bytes:,} | {m.policy_bytes:,} | {change} | "
                     f"{m.decisions} |")
    for m in report.modules:
        if m.error:
            lines.append(f"| `{m.name}` | | | failed: {m.error[:80]} | |")
    return "\n".join(lines)


def axis_label(metric: str) -> str:
    """The plot's label for a change in `metric`'s bytes; the bars follow the metric in
    force, so the label names it (the default counts unwind tables, not `.text` alone)."""
    return f"size change vs -Oz, {metric} bytes (%)"


def write_plot(path: Path, results: Sequence[SplitResult],
               curve: Sequence[Mapping[str, float]] = ()) -> Path:
    """Horizontal bars of per-module size change for each split (modules with a change
    only; the total as the last bar), plus the validation curve when `curve` has one."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [r for r in results if r.report.ok_modules]
    points = [(row["iteration"], row["size_change/validation"]) for row in curve
              if "size_change/validation" in row]
    heights = [max(2.5, 0.22 * (len(_bars(r.report)) + 2)) for r in panels]
    if points:
        heights.append(2.6)
    fig = Figure(figsize=(8.0, sum(heights) + 0.6 * len(heights)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(heights), 1, gridspec_kw={"height_ratios": heights},
                        squeeze=False)[:, 0]
    for ax, r in zip(axes, panels, strict=False):
        bars = _bars(r.report)
        labels = [name for name, _ in bars]
        values = [100.0 * v for _, v in bars]
        colors = ["#2a9d8f" if v < 0 else "#e76f51" for v in values]
        colors[-1] = "#264653"  # the total
        ax.barh(range(len(values)), values, color=colors)
        ax.set_yticks(range(len(values)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.set_xlabel(axis_label(r.report.size_metric))
        ax.set_title(f"{r.name}: total {r.report.change:+.2%} "
                     f"({len(r.report.ok_modules)} modules, policy {r.report.policy})",
                     fontsize=9)
    if points:
        ax = axes[-1]
        ax.plot([p[0] for p in points], [100.0 * p[1] for p in points], marker="o",
                markersize=3)
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xlabel("training iteration")
        ax.set_ylabel("validation change (%)")
        ax.set_title(f"validation during training: {axis_label(size_metric(results))}",
                     fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _bars(report: EvalReport) -> list[tuple[str, float]]:
    changed = [(m.name, m.change) for m in report.ok_modules
               if m.change is not None and m.policy_bytes != m.baseline_bytes]
    changed.sort(key=lambda nv: nv[1])
    return [*changed, ("TOTAL", report.change)]


def write_report(
    out_dir: Path,
    results: Sequence[SplitResult],
    *,
    title: str,
    details: Mapping[str, str] | None = None,
    curve: Sequence[Mapping[str, float]] = (),
) -> Path:
    """`out_dir/report.md` (summary, run details, per-module tables) and the PNG plot."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_plot(out_dir / PLOT_FILE, results, curve)
    metric = size_metric(results)
    parts = [f"# {title}", "", summary_table(results), "",
             f"Change = policy bytes / -Oz bytes − 1 by size metric `{metric}` "
             "(`allocated`: every allocated section of the object — code, read-only data, "
             "unwind and exception tables, data); negative is smaller. \"Code only\" counts "
             "executable sections alone, which miss the unwind tables inlining moves.", "",
             group_table(results), ""]
    if details:
        parts += ["| | |", "| --- | --- |"]
        parts += [f"| {k} | {v} |" for k, v in details.items()]
        parts.append("")
    parts += [f"![per-module size change]({PLOT_FILE})", ""]
    for r in results:
        parts += [f"## {r.name} modules", "", module_table(r.report), ""]
    path = out_dir / REPORT_FILE
    path.write_text("\n".join(parts))
    return path
