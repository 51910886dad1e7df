"""Throughput of the executors: modules/s for 1 and 2 local workers, Ray-local vs local,
and a shared pool (`pool:NAME`) vs local, on the same machine and corpus.

Prints JSON. Every configuration compiles the corpus with the `default` policy through the
channel (the training path); workers are started and warmed up (one untimed pass) before
`--repeats` timed passes, of which the fastest counts. Sizes must agree across executors.

    python benchmarks/scaling.py [--corpus DIR|demo] [--repeats 3] [--no-ray] [--no-pool]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pymlgo.cli.common import resolve_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.problems.base import CompileJob
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.workers import Executor, WorkSpec, make_executor

TARGET_SPEEDUP_2 = 1.8  # 2 workers vs 1, on 2 cores
TARGET_RAY_RATIO = 0.9  # Ray-local vs the local pool
REPO = Path(__file__).resolve().parents[1]


def load_jobs(corpus: str) -> tuple[str, list[CompileJob]]:
    """The jobs of `corpus` ("demo" or a corpus dir)."""
    return corpus, corpus_jobs(resolve_corpus(corpus))


def measure(make: Callable[[], Executor], spec: WorkSpec, jobs: list[CompileJob],
            repeats: int) -> tuple[dict[str, float], dict[str, int | None]]:
    with make() as ex:
        wait_ready = getattr(ex, "wait_ready", None)
        if wait_ready is not None:
            wait_ready()
        sizes = {r.module: r.size for r in ex.run(spec, jobs)}  # warm-up, untimed
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            for r in ex.run(spec, jobs):
                if r.size != sizes[r.module]:
                    raise SystemExit(f"{r.module}: size changed between runs")
            times.append(time.perf_counter() - started)
    best = min(times)
    return {
        "workers": float(ex.num_workers),
        "seconds": round(best, 3),
        "modules_per_s": round(len(jobs) / best, 2),
    }, sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="demo")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--no-pool", action="store_true")
    args = ap.parse_args(argv)

    name, jobs = load_jobs(args.corpus)
    spec = WorkSpec(policy=builtin_policy("default"))
    report: dict[str, object] = {"benchmark": "scaling", "corpus": name, "modules": len(jobs),
                                 "policy": "default", "cores": os.cpu_count()}
    local1, sizes = measure(lambda: make_executor(None, 1), spec, jobs, args.repeats)
    local2, sizes2 = measure(lambda: make_executor(None, 2), spec, jobs, args.repeats)
    mismatched = sorted(m for m in sizes if sizes[m] != sizes2.get(m))
    speedup = local2["modules_per_s"] / local1["modules_per_s"]
    report.update(local_1=local1, local_2=local2, speedup_2_vs_1=round(speedup, 3),
                  target_speedup_2_vs_1=TARGET_SPEEDUP_2)
    ok = speedup >= TARGET_SPEEDUP_2

    if not args.no_pool:
        with tempfile.TemporaryDirectory(prefix="mlgo-bench-run-") as run_dir:
            os.environ["MLGO_RUNTIME_DIR"] = run_dir
            server = subprocess.Popen([sys.executable, "-m", "pymlgo.cli.pool", "serve",
                                       "--name", "bench", "--workers", "2"], cwd=REPO,
                                      stderr=subprocess.DEVNULL)
            try:
                from pymlgo.workers.pool import wait_for_pool

                wait_for_pool("bench", timeout=60)
                pool, sizes_p = measure(lambda: make_executor("pool:bench"), spec, jobs,
                                        args.repeats)
            finally:
                server.terminate()
                server.wait(timeout=30)
        mismatched += sorted(m for m in sizes if sizes[m] != sizes_p.get(m))
        report.update(shared_pool_2=pool, shared_pool_vs_local=round(
            pool["modules_per_s"] / local2["modules_per_s"], 3))

    if not args.no_ray:
        try:
            ray_local, sizes_r = measure(lambda: make_executor("ray-local", 2), spec, jobs,
                                         args.repeats)
        except Exception as exc:  # e.g. Ray not installed: report, do not fail the rest
            report["ray_local_2"] = {"error": f"{type(exc).__name__}: {exc}"}
            ok = False
        else:
            mismatched += sorted(m for m in sizes if sizes[m] != sizes_r.get(m))
            ratio = ray_local["modules_per_s"] / local2["modules_per_s"]
            report.update(ray_local_2=ray_local, ray_vs_local=round(ratio, 3),
                          target_ray_vs_local=TARGET_RAY_RATIO)
            ok = ok and ratio >= TARGET_RAY_RATIO

    report["size_mismatches"] = sorted(set(mismatched))
    report["meets_targets"] = ok
    print(json.dumps(report, indent=2))
    return 0 if not mismatched else 1


if __name__ == "__main__":
    sys.exit(main())
