"""What tracing clang's own decisions costs with a cold baseline cache, two ways.

- `trace`: `trace_corpus` with the default policy, as `mlgo trace` runs it: each module
  compiles once, through the channel, and that object is its -Oz baseline too.
- `baselines_then_trace`: plain -Oz of every module first (what every trace did before the
  heuristic's objects stood for the baselines), then the same trace, which now only checks
  its objects against those baselines.

Each way gets a cold baseline cache of its own and the same worker pool; the traces must
come out identical. The two run alternately `--repeats` times (the machine is shared, so
the load moves). Prints JSON.

    python benchmarks/trace_cost.py                            # the demo corpus
    python benchmarks/trace_cost.py --corpus DIR --workers 2 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pymlgo.corpus.demo import ensure_demo_corpus
from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.baseline import BaselineCache, baseline_results
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.evaluate.trace import trace_corpus
from pymlgo.problems.inlining.policies import HeuristicPolicy
from pymlgo.toolchain.compiler import find_compiler
from pymlgo.workers import make_executor


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, default=None, help="corpus directory (default: demo)")
    p.add_argument("--workers", type=int, default=None, help="local workers (default: cores)")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    root = args.corpus or ensure_demo_corpus(progress=False)
    jobs = corpus_jobs(load_corpus(root))
    compiler = find_compiler(None)
    runs: dict[str, list[float]] = {"trace": [], "baselines_then_trace": []}
    with tempfile.TemporaryDirectory(prefix="trace-cost-") as tmp, \
            make_executor(None, args.workers) as executor:
        trees: dict[str, dict[str, bytes]] = {}
        for k in range(args.repeats):
            for way in runs:
                out = Path(tmp) / f"{way}{k}"
                cache = BaselineCache(out / "cache")
                load = os.getloadavg()[0]
                started = time.monotonic()
                if way == "baselines_then_trace":
                    for _ in baseline_results(executor, jobs, compiler, cache=cache):
                        pass
                trace_corpus(executor, compiler, jobs, HeuristicPolicy(), out / "trace",
                             cache=cache, metadata={"corpus": str(root)})
                runs[way].append(time.monotonic() - started)
                print(f"trace_cost: {way} #{k}: {runs[way][-1]:.1f} s (load {load:.1f})",
                      file=sys.stderr, flush=True)
                tree = _tree(out / "trace")
                if trees.setdefault("first", tree) != tree:
                    raise SystemExit(f"trace_cost: {way} #{k} wrote another trace")
    result: dict[str, Any] = {
        "corpus": str(root),
        "modules": len(jobs),
        "workers": args.workers,
        "compiles": {"trace": len(jobs), "baselines_then_trace": 2 * len(jobs)},
        "seconds": {way: [round(s, 1) for s in times] for way, times in runs.items()},
        "best_ratio": round(min(runs["trace"]) / min(runs["baselines_then_trace"]), 3),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
