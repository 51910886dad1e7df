"""Evaluate a corpus of many tiny modules and watch the host's memory: it must stay flat.

Builds (once, cached under --work) a corpus of N distinct one-function C modules with the
real bundled clang (one clang driver process per batch of files: -emit-llvm with LLVM
passes disabled, i.e. the pre-optimization bitcode a corpus holds), loads it like every
other command, then runs `evaluate` (baseline + `default` policy on the channel) on a local
worker pool with a fresh baseline cache. Prints JSON: module count, time, failures, and
the resident memory of the host process and of the workers sampled at every 10 % of the
results, plus their peaks.

    python benchmarks/many_modules.py                  # 10,000 modules
    python benchmarks/many_modules.py --modules 1000 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pymlgo.corpus.format import load_corpus, write_corpus_description
from pymlgo.evaluate.eval import corpus_jobs, evaluate
from pymlgo.problems.base import ModuleResult
from pymlgo.problems.inlining.policies import builtin_policy
from pymlgo.toolchain.compiler import find_compiler
from pymlgo.workers.local import LocalPool
from pymlgo.workers.protocol import WorkSpec

SOURCE = """static int step_{i}(int x) {{ return x * {k} + (x >> 3); }}
int entry_{i}(int n) {{ int s = 0; for (int j = 0; j < n; j++) s += step_{i}(j); return s; }}
"""
OVERRIDE = ["-cc1", "-triple", "x86_64-unknown-linux-gnu", "-emit-obj", "-Oz",
            "-mrelocation-model", "pic", "-pic-level", "2", "-target-cpu", "x86-64"]
BATCH = 400  # C files per clang driver process


def rss_kib(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def build_corpus(root: Path, n: int) -> Path:
    corpus = root / f"tiny-{n}"
    if (corpus / "corpus_description.json").is_file():
        return corpus
    compiler = find_compiler(None)
    src = root / f"src-{n}"
    src.mkdir(parents=True, exist_ok=True)
    names = [f"m{i // 1000:02d}/t{i:05d}" for i in range(n)]
    staging = Path(tempfile.mkdtemp(prefix=f".tiny-{n}.", dir=root))
    for start in range(0, n, BATCH):
        files = []
        for i in range(start, min(n, start + BATCH)):
            c = src / f"t{i:05d}.c"
            c.write_text(SOURCE.format(i=i, k=3 + i % 97))
            files.append(str(c))
        out = staging / "bc"
        out.mkdir(exist_ok=True)
        subprocess.run([*compiler.clang_argv, "-c", "-emit-llvm", "-Oz", "-Xclang",
                        "-disable-llvm-passes", "--target=x86_64-linux-gnu", *files],
                       cwd=out, check=True)
        print(f"built {min(n, start + BATCH)}/{n} modules", file=sys.stderr)
    for i, name in enumerate(names):
        dest = staging / (name + ".bc")
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staging / "bc" / f"t{i:05d}.bc", dest)
    (staging / "bc").rmdir()
    write_corpus_description(staging, names, global_command_override=OVERRIDE)
    os.rename(staging, corpus)
    return corpus


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=None, help="default: all cores")
    ap.add_argument("--work", type=Path,
                    default=Path(tempfile.gettempdir()) / "mlgo-bench-many-modules")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    corpus_dir = build_corpus(args.work, args.modules)

    rss_start = rss_kib()
    corpus = load_corpus(corpus_dir)
    jobs = corpus_jobs(corpus)
    rss_loaded = rss_kib()
    cache = tempfile.mkdtemp(prefix="cache-", dir=args.work)
    os.environ["MLGO_CACHE_DIR"] = cache  # a fresh baseline cache: every module compiles
    total = 2 * len(jobs)
    samples: list[dict[str, float]] = []
    done = 0
    started = time.monotonic()
    with LocalPool(args.workers) as pool:
        pool.wait_ready()
        worker_peak = 0

        def on_result(res: ModuleResult) -> None:
            nonlocal done, worker_peak
            done += 1
            if done % max(1, total // 10) == 0 or done == total:
                workers = [rss_kib(p) for p in pool.worker_pids()]
                worker_peak = max([worker_peak, *workers])
                samples.append({"done": done, "host_rss_mib": rss_kib() / 1024,
                                "max_worker_rss_mib": max(workers, default=0) / 1024,
                                "seconds": round(time.monotonic() - started, 1)})

        report = evaluate(pool, find_compiler(None), jobs, builtin_policy("default"),
                          spec=WorkSpec(), on_result=on_result)
    seconds = time.monotonic() - started
    host = [s["host_rss_mib"] for s in samples]
    print(json.dumps({
        "modules": len(jobs),
        "compiles": total,
        "workers": pool.num_workers,
        "seconds": round(seconds, 1),
        "compiles_per_s": round(total / seconds, 1),
        "failed_modules": len(report.modules) - len(report.ok_modules),
        "decisions": sum(m.decisions for m in report.modules),
        "host_rss_mib_at_start": round(rss_start / 1024, 1),
        "host_rss_mib_after_load": round(rss_loaded / 1024, 1),
        "host_rss_mib_samples": [round(h, 1) for h in host],
        "host_rss_growth_first_to_last_sample_mib": round(host[-1] - host[0], 1),
        "host_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "worker_peak_rss_mib": round(worker_peak / 1024, 1),
        "samples": samples,
    }, indent=2))


if __name__ == "__main__":
    main()
