"""How much a register allocation compile saves by running the code generator only.

Every regalloc compile reads its module's cached middle-end output
(`problems/regalloc/optimized.py`). This compiles demo modules at -O2 with a policy
answering the eviction advisor three ways: in full (the recorded command, middle-end
included), codegen-only with a cold cache (the middle-end run once, then the code
generator), and codegen-only with a warm cache (what every later compile of a training run
costs). It checks that all three give the same weighted cost and allocated bytes, and prints
JSON: seconds per way, the warm speed-up, and the cache's size.

    python benchmarks/regalloc_codegen_only.py                 # all 63 demo modules
    python benchmarks/regalloc_codegen_only.py --modules brotli/c/enc/backward_references
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from pymlgo.corpus.demo import ensure_demo_corpus
from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.problems.base import CompileJob, CompileSettings, ModuleResult
from pymlgo.problems.regalloc import compile as regalloc_compile
from pymlgo.problems.regalloc import optimized
from pymlgo.problems.regalloc.compile import COST_KEY, OPT_LEVEL, compile_with_policy
from pymlgo.problems.regalloc.policies import builtin_policy
from pymlgo.toolchain.compiler import Compiler, find_compiler


def timed(compiler: Compiler, jobs: list[CompileJob], policy_name: str,
          codegen_job: object) -> tuple[float, list[ModuleResult]]:
    """Seconds to compile every job with the policy, `codegen_job` standing in for the
    cache lookup."""
    saved = regalloc_compile.codegen_job
    regalloc_compile.codegen_job = codegen_job  # type: ignore[assignment]
    try:
        policy = builtin_policy(policy_name)
        start = time.perf_counter()
        results = [compile_with_policy(compiler, job, policy, CompileSettings()) for job in jobs]
        return time.perf_counter() - start, results
    finally:
        regalloc_compile.codegen_job = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", nargs="+", default=None, help="demo modules (default: all)")
    ap.add_argument("--policy", default="heuristic", help="a built-in eviction policy")
    args = ap.parse_args()
    compiler = find_compiler(None)
    jobs = corpus_jobs(load_corpus(ensure_demo_corpus(level=OPT_LEVEL)), args.modules)
    with tempfile.TemporaryDirectory(prefix="mlgo-codegen-only-") as tmp:
        cache = Path(tmp)

        def cached(compiler: Compiler, job: CompileJob, opt_level: str,
                   settings: CompileSettings = CompileSettings()) -> CompileJob | None:
            return optimized.codegen_job(compiler, job, opt_level, settings, cache_dir=cache)

        full_s, full = timed(compiler, jobs, args.policy, lambda *a, **k: None)
        cold_s, cold = timed(compiler, jobs, args.policy, cached)
        warm_s, warm = timed(compiler, jobs, args.policy, cached)
        cache_bytes = sum(p.stat().st_size for p in cache.rglob("*.bc"))

    def figures(results: list[ModuleResult]) -> list[tuple[object, ...]]:
        return [(r.module, r.size, r.extra.get(COST_KEY), r.error) for r in results]

    same = figures(full) == figures(cold) == figures(warm)
    print(json.dumps({
        "modules": len(jobs),
        "policy": args.policy,
        "failed": sum(not r.ok for r in full),
        "same_cost_and_bytes": same,
        "full_seconds": round(full_s, 2),
        "codegen_only_cold_seconds": round(cold_s, 2),
        "codegen_only_warm_seconds": round(warm_s, 2),
        "warm_speedup": round(full_s / warm_s, 2) if warm_s else None,
        "cache_bytes": cache_bytes,
        "corpus_bitcode_bytes": sum(len(j.bitcode) for j in jobs),
    }, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
