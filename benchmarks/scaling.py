"""Throughput of the executors: modules/s for 1 and 2 local workers, Ray-local vs local,
and a shared pool (`pool:NAME`) vs local, on the same machine and corpus.

Prints JSON. Every configuration compiles the corpus with the `default` policy through the
channel (the training path). The configurations take turns: each of `--repeats` rounds
starts every executor afresh, warms it up (a few untimed jobs per worker: processes
started, policy shipped), times one full pass and closes it, in an order that reverses
every round. A shared 2-core machine drifts by tens of percent over minutes (measured);
taking turns makes that drift hit every configuration alike. The fastest pass counts;
every pass is reported. Sizes must agree across executors and passes.

    python benchmarks/scaling.py [--corpus DIR|demo] [--repeats 3] [--no-ray] [--no-pool]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pymlgo.cli.common import resolve_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.problems.base import CompileJob
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.workers import Executor, WorkSpec, make_executor

TARGET_SPEEDUP_2 = 1.8  # 2 workers vs 1, on 2 cores
TARGET_RAY_RATIO = 0.9  # Ray-local vs the local pool
WARMUP_JOBS_PER_WORKER = 2
REPO = Path(__file__).resolve().parents[1]
Around = contextlib.AbstractContextManager[None]  # what a configuration runs inside


def load_jobs(corpus: str) -> tuple[str, list[CompileJob]]:
    """The jobs of `corpus` ("demo" or a corpus dir)."""
    return corpus, corpus_jobs(resolve_corpus(corpus))


@contextlib.contextmanager
def shared_pool(workers: int) -> Iterator[None]:
    """`mlgo pool serve --name bench` for the duration."""
    with tempfile.TemporaryDirectory(prefix="mlgo-bench-run-") as run_dir:
        saved = os.environ.get("MLGO_RUNTIME_DIR")
        os.environ["MLGO_RUNTIME_DIR"] = run_dir
        server = subprocess.Popen([sys.executable, "-m", "pymlgo.cli.pool", "serve",
                                   "--name", "bench", "--workers", str(workers)], cwd=REPO,
                                  stderr=subprocess.DEVNULL)
        try:
            from pymlgo.workers.pool import wait_for_pool

            wait_for_pool("bench", timeout=60)
            yield
        finally:
            server.terminate()
            server.wait(timeout=30)
            if saved is None:
                os.environ.pop("MLGO_RUNTIME_DIR", None)
            else:
                os.environ["MLGO_RUNTIME_DIR"] = saved


def timed_pass(make: Callable[[], Executor], spec: WorkSpec,
               jobs: list[CompileJob]) -> tuple[float, int, dict[str, int | None]]:
    """(seconds of one full pass, workers, sizes) on a freshly started, warmed executor."""
    with make() as ex:
        wait_ready = getattr(ex, "wait_ready", None)
        if wait_ready is not None:
            wait_ready()
        list(ex.run(spec, jobs[: WARMUP_JOBS_PER_WORKER * ex.num_workers]))
        started = time.perf_counter()
        sizes = {r.module: r.size for r in ex.run(spec, jobs)}
        return time.perf_counter() - started, ex.num_workers, sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="demo")
    ap.add_argument("--repeats", type=int, default=3, help="rounds (default: 3)")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--no-pool", action="store_true")
    args = ap.parse_args(argv)

    name, jobs = load_jobs(args.corpus)
    spec = WorkSpec(policy=builtin_policy("default"))
    configs: dict[str, tuple[Callable[[], Executor], Callable[[], Around]]] = {
        "local_1": (lambda: make_executor(None, 1), contextlib.nullcontext),
        "local_2": (lambda: make_executor(None, 2), contextlib.nullcontext),
    }
    if not args.no_pool:
        configs["shared_pool_2"] = (lambda: make_executor("pool:bench"),
                                    lambda: shared_pool(2))
    if not args.no_ray:
        configs["ray_local_2"] = (lambda: make_executor("ray-local", 2),
                                  contextlib.nullcontext)

    passes: dict[str, list[float]] = {k: [] for k in configs}
    workers: dict[str, int] = {}
    errors: dict[str, str] = {}
    reference: dict[str, int | None] | None = None
    mismatched: set[str] = set()
    for round_ in range(args.repeats):
        order = list(configs) if round_ % 2 == 0 else list(reversed(configs))
        for key in order:
            if key in errors:
                continue
            make, around = configs[key]
            try:
                with around():
                    seconds, workers[key], sizes = timed_pass(make, spec, jobs)
            except Exception as exc:  # e.g. Ray not installed: report, keep the rest
                errors[key] = f"{type(exc).__name__}: {exc}"
                continue
            passes[key].append(round(seconds, 3))
            if reference is None:
                reference = sizes
            mismatched |= {m for m in reference if reference[m] != sizes.get(m)}

    report: dict[str, object] = {"benchmark": "scaling", "corpus": name, "modules": len(jobs),
                                 "policy": "default", "cores": os.cpu_count(),
                                 "rounds": args.repeats}
    rate: dict[str, float] = {}
    for key in configs:
        if key in errors:
            report[key] = {"error": errors[key]}
            continue
        best = min(passes[key])
        rate[key] = len(jobs) / best
        report[key] = {"workers": workers[key], "seconds": best,
                       "modules_per_s": round(rate[key], 2), "passes": passes[key]}
    ok = "local_1" in rate and "local_2" in rate
    if ok:
        speedup = rate["local_2"] / rate["local_1"]
        report.update(speedup_2_vs_1=round(speedup, 3), target_speedup_2_vs_1=TARGET_SPEEDUP_2)
        ok = speedup >= TARGET_SPEEDUP_2
    if "shared_pool_2" in rate and "local_2" in rate:
        report["shared_pool_vs_local"] = round(rate["shared_pool_2"] / rate["local_2"], 3)
    if not args.no_ray:
        if "ray_local_2" in rate and "local_2" in rate:
            ratio = rate["ray_local_2"] / rate["local_2"]
            report.update(ray_vs_local=round(ratio, 3), target_ray_vs_local=TARGET_RAY_RATIO)
            ok = ok and ratio >= TARGET_RAY_RATIO
        else:
            ok = False
    report["size_mismatches"] = sorted(mismatched)
    report["meets_targets"] = ok
    print(json.dumps(report, indent=2))
    return 0 if not mismatched else 1


if __name__ == "__main__":
    sys.exit(main())
