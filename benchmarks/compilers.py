"""The demo corpus built with each compiler of the test matrix, and what the inlining policies
do there.

For every compiler of `tests/compilers.py`'s MATRIX (the bundled clang, Debian's clang-19,
the clangs in the `zig` of older ziglang wheels), builds the demo corpus with that compiler
(cached per compiler version), then evaluates with it, as `mlgo eval --clang` does: plain
-Oz (the baseline), `default` (clang's own decisions through the channel), `never` and the
shipped `pretrained:inlining-oz`. Prints JSON: per compiler the modules, the -Oz bytes (the
allocated metric), per policy the change, how many modules have -Oz's bytes in every section
group, the call sites the ML advisor refused after its size stop (per module), and the error
of a policy the compiler cannot run (e.g. a feature its header lacks). A compiler that is
not installed (see `python -m tests.compilers`) is skipped with the reason; nothing is
downloaded but the demo sdists, once.

    python benchmarks/compilers.py > compilers.json
    python benchmarks/compilers.py --compilers debian-clang-19,zig-0.12.1-clang-17
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests/compilers.py holds the compiler matrix

from pymlgo.corpus.demo import ensure_demo_corpus  # noqa: E402
from pymlgo.corpus.format import CorpusError, load_corpus  # noqa: E402
from pymlgo.evaluate.eval import EvalReport, corpus_jobs, evaluate  # noqa: E402
from pymlgo.policy.store import load_policy  # noqa: E402
from pymlgo.problems.inlining.compile import SIZE_STOP_KEY  # noqa: E402
from pymlgo.problems.inlining.heuristic_check import check_heuristic  # noqa: E402
from pymlgo.protocol.features import FeatureMismatchError  # noqa: E402
from pymlgo.toolchain.compiler import CompilerError, find_compiler  # noqa: E402
from pymlgo.workers import make_executor  # noqa: E402
from pymlgo.workers.protocol import WorkSpec  # noqa: E402
from tests.compilers import MATRIX, MatrixEntry, clang_for  # noqa: E402

POLICIES = ("default", "never", "pretrained:inlining-oz")


def _percent(change: float) -> float:
    return round(100.0 * change, 3)


def policy_summary(report: EvalReport) -> dict[str, Any]:
    """The totals of one policy's report, and the modules where it refused call sites after
    the ML advisor's size stop (-ml-advisor-size-increase-threshold)."""
    ok = report.ok_modules
    refused = {m.name: int(m.policy_extra.get(SIZE_STOP_KEY, 0)) for m in ok
               if m.policy_extra.get(SIZE_STOP_KEY)}
    return {
        "bytes": report.policy_total,
        "change_percent": _percent(report.change),
        "modules_equal_to_oz": sum(1 for m in ok if m.policy_sizes is not None
                                   and m.policy_sizes == m.baseline_sizes),
        "decisions": sum(m.decisions for m in ok),
        "calls_refused_after_size_stop": sum(refused.values()),
        "size_stop_modules": refused,
        "failed": {m.name: m.error for m in report.modules if m.error is not None},
    }


def compiler_report(entry: MatrixEntry, workers: int) -> dict[str, Any]:
    out: dict[str, Any] = {"name": entry.name, "major": entry.major}
    try:
        clang = clang_for(entry, fetch=False)  # this benchmark downloads no compiler
        compiler = find_compiler(clang)
    except (RuntimeError, CompilerError) as exc:
        return {**out, "skipped": str(exc)}
    started = time.monotonic()
    out.update({"path": str(compiler.path), "version": compiler.version})
    try:
        corpus = ensure_demo_corpus(progress=False, clang=clang)
        jobs = corpus_jobs(load_corpus(corpus, clang=clang))
    except (CorpusError, CompilerError, OSError) as exc:
        return {**out, "error": f"demo corpus: {exc}"}
    # where clang's own decision arrives (LLVM 17-20 displace it; `default` reads it there)
    out.update({"corpus": str(corpus), "modules": len(jobs),
                "heuristic_feature": check_heuristic(compiler).feature,
                "corpus_seconds": round(time.monotonic() - started, 1)})
    spec = WorkSpec(clang=None if compiler.bundled else str(compiler.path))
    policies: dict[str, Any] = {}
    oz: int | None = None
    with make_executor(None, workers) as executor:
        for name in POLICIES:
            try:
                report = evaluate(executor, compiler, jobs, load_policy(name), spec=spec)
            except FeatureMismatchError as exc:  # the compiler cannot run this policy
                policies[name] = {"error": str(exc)}
                continue
            oz = report.baseline_total
            policies[name] = policy_summary(report)
    out.update({"oz_bytes": oz, "policies": policies,
                "seconds": round(time.monotonic() - started, 1)})
    return out


def main() -> int:
    names = [e.name for e in MATRIX]
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="compilers: " + ", ".join(names))
    ap.add_argument("--compilers", default=",".join(names), metavar="NAMES",
                    help="comma-separated compilers of the matrix (default: all)")
    ap.add_argument("--workers", type=int, default=2, help="compile processes (default: 2)")
    args = ap.parse_args()
    if args.workers < 1:
        ap.error("--workers must be >= 1")
    chosen = [n for n in args.compilers.split(",") if n]
    unknown = [n for n in chosen if n not in names]
    if unknown:
        ap.error(f"unknown compiler(s) {unknown}: expected some of {', '.join(names)}")
    started = time.monotonic()
    reports = []
    for entry in (e for e in MATRIX if e.name in chosen):
        reports.append(compiler_report(entry, args.workers))
        print(json.dumps(reports[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"size_metric": "allocated", "baseline": "-Oz", "compilers": reports,
                      "seconds": round(time.monotonic() - started, 1)}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
