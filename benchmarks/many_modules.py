"""Evaluate corpora of many tiny modules and watch memory: it must not grow with the count.

Builds (once, cached under --work) corpora of N distinct one-function C modules with the
real bundled clang (one clang driver process per batch of files: -emit-llvm with LLVM
passes disabled, i.e. the pre-optimization bitcode a corpus holds). Each size is then
measured in a fresh process, as `mlgo eval` runs: start a local worker pool, load the
corpus, make its jobs, `evaluate` (baseline + `default` policy on the channel) with a fresh
baseline cache. A sampler thread reads the resident memory of the driver and of every
worker from before the corpus is loaded to the end; the peaks are the kernel's high-water
marks (VmHWM). Prints JSON: per size the time, failures and memory, and the slope of the
peaks per 1,000 modules between the smallest and the largest size.

    python benchmarks/many_modules.py                        # 1,000 and 10,000 modules
    python benchmarks/many_modules.py --modules 500,2000 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
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


def status_kib(pid: int | str, field: str) -> int:
    """A memory field of /proc/PID/status in KiB (0 once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
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


class Sampler(threading.Thread):
    """Every `every_s`: the driver's RSS and the largest worker's, with a progress mark."""

    def __init__(self, every_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.every_s = every_s
        self.pool: LocalPool | None = None
        self.phase = "start"
        self.done = 0
        self.samples: list[dict[str, object]] = []
        self.worker_hwm_kib: dict[int, int] = {}
        self._halt = threading.Event()
        self._t0 = time.monotonic()

    def sample(self) -> None:
        workers = self.pool.worker_pids() if self.pool is not None else []
        for pid in workers:  # a worker's own high-water mark, read while it is alive
            self.worker_hwm_kib[pid] = max(self.worker_hwm_kib.get(pid, 0),
                                           status_kib(pid, "VmHWM"))
        self.samples.append({
            "s": round(time.monotonic() - self._t0, 1), "phase": self.phase, "done": self.done,
            "driver_rss_mib": round(status_kib("self", "VmRSS") / 1024, 1),
            "max_worker_rss_mib": round(max((status_kib(p, "VmRSS") for p in workers),
                                            default=0) / 1024, 1),
        })

    def run(self) -> None:
        while not self._halt.wait(self.every_s):
            self.sample()

    def stop(self) -> None:
        self._halt.set()
        self.join()
        self.sample()


def measure(corpus_dir: Path, workers: int | None, work: Path) -> dict[str, object]:
    """One size, in this (fresh) process: memory from before loading to the end."""
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=work))
    os.environ["MLGO_CACHE_DIR"] = str(cache)  # a fresh baseline cache: every module compiles
    sampler = Sampler()
    driver_before_kib = status_kib("self", "VmRSS")
    sampler.sample()
    sampler.start()
    started = time.monotonic()
    try:
        with LocalPool(workers) as pool:
            pool.wait_ready()
            sampler.pool = pool
            sampler.phase = "load"
            jobs = corpus_jobs(load_corpus(corpus_dir))
            sampler.phase = "eval"

            def on_result(res: ModuleResult) -> None:
                sampler.done += 1

            report = evaluate(pool, find_compiler(None), jobs, builtin_policy("default"),
                              spec=WorkSpec(), on_result=on_result)
            sampler.phase = "end"
            sampler.stop()  # the last sample, with the workers still alive
            num_workers = pool.num_workers
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    seconds = time.monotonic() - started
    return {
        "modules": len(jobs),
        "compiles": 2 * len(jobs),
        "results_seen": sampler.done,
        "workers": num_workers,
        "seconds": round(seconds, 1),
        "compiles_per_s": round(2 * len(jobs) / seconds, 1),
        "failed_modules": len(report.modules) - len(report.ok_modules),
        "decisions": sum(m.decisions for m in report.modules),
        "driver_rss_mib_before_load": round(driver_before_kib / 1024, 1),
        "driver_peak_rss_mib": round(status_kib("self", "VmHWM") / 1024, 1),
        "worker_peak_rss_mib": round(max(sampler.worker_hwm_kib.values(), default=0) / 1024, 1),
        "samples": sampler.samples[:: max(1, len(sampler.samples) // 40)],
    }


def slope(runs: list[dict[str, object]], key: str) -> float:
    """MiB of peak per 1,000 more modules, smallest size to largest."""
    a, b = runs[0], runs[-1]
    extra = int(b["modules"]) - int(a["modules"])  # type: ignore[call-overload]
    rise = float(b[key]) - float(a[key])  # type: ignore[arg-type]
    return round(rise / extra * 1000, 3) if extra else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", default="1000,10000",
                    help="comma-separated corpus sizes (default: 1000,10000)")
    ap.add_argument("--workers", type=int, default=None, help="default: all cores")
    ap.add_argument("--work", type=Path,
                    default=Path(tempfile.gettempdir()) / "mlgo-bench-many-modules")
    ap.add_argument("--measure", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.measure is not None:  # the child process of one size
        print(json.dumps(measure(args.measure, args.workers, args.work)))
        return
    sizes = sorted({int(n) for n in args.modules.split(",")})
    runs = []
    for n in sizes:
        corpus_dir = build_corpus(args.work, n)
        cmd = [sys.executable, __file__, "--measure", str(corpus_dir), "--work", str(args.work)]
        if args.workers:
            cmd += ["--workers", str(args.workers)]
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        runs.append(json.loads(out))
        print(f"{n} modules: {json.dumps({k: v for k, v in runs[-1].items() if k != 'samples'})}",
              file=sys.stderr)
    print(json.dumps({
        "sizes": sizes,
        "driver_peak_rss_mib": [r["driver_peak_rss_mib"] for r in runs],
        "worker_peak_rss_mib": [r["worker_peak_rss_mib"] for r in runs],
        "driver_peak_mib_per_1000_modules": slope(runs, "driver_peak_rss_mib"),
        "worker_peak_mib_per_1000_modules": slope(runs, "worker_peak_rss_mib"),
        "runs": runs,
    }, indent=2))


if __name__ == "__main__":
    main()
