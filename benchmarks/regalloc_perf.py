"""Performance of a real program whose library objects were register-allocated by a policy.

Builds a compress/decompress driver (tests/data/regalloc) against the demo libraries twice,
once with the stock eviction advisor (no channel) and once with POLICY answering it, checks
that both print the same result (wrong advice can miscompile), and measures each:
executed instructions under `valgrind --tool=callgrind` (deterministic), wall time, and
`perf stat` cycles / task-clock where available. Prints JSON.

    python benchmarks/regalloc_perf.py --policy /tmp/run/best            # codec: all 63 modules
    python benchmarks/regalloc_perf.py --program lz4 --policy random:1   # lz4 only, quicker
    python benchmarks/regalloc_perf.py --compile-all --policy random:1   # + every module OK?

`--compile-all` also reports that every demo module compiled with POLICY (the build of the
codec program does that already: it links all 63 modules).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from pymlgo.corpus.demo import ensure_demo_corpus
from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.policy.regalloc import load_spec
from pymlgo.problems.base import ModuleResult
from pymlgo.problems.regalloc.policies import builtin_policy
from pymlgo.problems.regalloc.program import (
    BuiltObjects,
    ProgramError,
    build_objects,
    link_program,
    measure,
)
from pymlgo.toolchain.compiler import find_compiler

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "regalloc"
PROGRAMS = {
    # driver, module prefixes it links, argv for timing, argv for callgrind (smaller input)
    "codec": ("codec_bench.c", ("lz4/", "zstd/", "brotli/"), ["4194304"], ["1048576"]),
    "lz4": ("lz4_roundtrip.c", ("lz4/",), ["4194304", "4"], ["1048576", "1"]),
}


def _build(compiler, jobs, policy, out: Path, threads: int, label: str) -> BuiltObjects:
    bar = tqdm(total=len(jobs), desc=f"compile {label}", unit="mod", file=sys.stderr)

    def tick(res: ModuleResult) -> None:
        bar.update(1)

    try:
        return build_objects(compiler, jobs, policy, out, threads=threads, on_result=tick)
    finally:
        bar.close()


def perf_report(policy_spec: str, *, program: str = "codec", repeat: int = 5,
                threads: int = 2, compile_all: bool = False) -> dict[str, object]:
    """Build `program` with the stock advisor and with `policy_spec`; measure both."""
    compiler = find_compiler(None)
    corpus = load_corpus(ensure_demo_corpus())
    driver, prefixes, run_args, cg_args = PROGRAMS[program]
    all_jobs = corpus_jobs(corpus)
    jobs = [j for j in all_jobs if j.module.startswith(prefixes)]
    policy = load_spec(policy_spec, seed=0)
    out: dict[str, object] = {"program": program, "policy": policy_spec,
                              "modules": len(jobs), "input_bytes": int(run_args[0]),
                              "callgrind_input_bytes": int(cg_args[0])}
    with tempfile.TemporaryDirectory(prefix="regalloc-perf-") as tmp_name:
        tmp = Path(tmp_name)
        builds: dict[str, BuiltObjects] = {}
        measured = {}
        for label, pol in (("stock", builtin_policy("default")), ("policy", policy)):
            t0 = time.monotonic()
            built = _build(compiler, jobs, pol, tmp / label, threads, label)
            build_s = time.monotonic() - t0
            exe = link_program(compiler, DATA / driver, built.paths, tmp / f"{label}.exe")
            m = measure([str(exe), *run_args], tmp, repeat=repeat,
                        callgrind_argv=[str(exe), *cg_args])
            builds[label] = built
            measured[label] = m
            out[label] = {**m.to_json(), "build_seconds": build_s,
                          "weighted_cost": built.weighted_cost, "decisions": built.decisions,
                          "invalid_advice": built.invalid_advice,
                          "text_bytes": sum(r.size or 0 for r in built.results)}
        if measured["stock"].output != measured["policy"].output:
            raise ProgramError("the policy's build printed another result than the stock "
                               f"build: {measured['policy'].output!r} vs "
                               f"{measured['stock'].output!r}")
        s, p = measured["stock"], measured["policy"]
        out["same_output"] = True
        out["instructions_change"] = p.instructions / s.instructions - 1.0
        out["wall_median_change"] = p.wall_median_s / s.wall_median_s - 1.0
        out["weighted_cost_change"] = (builds["policy"].weighted_cost
                                       / builds["stock"].weighted_cost - 1.0)
        if compile_all:
            rest = [j for j in all_jobs if not j.module.startswith(prefixes)]
            extra = _build(compiler, rest, policy, tmp / "rest", threads, "rest")
            out["compile_all"] = {"modules": len(all_jobs), "failed": 0,
                                  "decisions": builds["policy"].decisions + extra.decisions}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="random:1",
                    help="regalloc policy: built-in name or saved policy directory")
    ap.add_argument("--program", choices=sorted(PROGRAMS), default="codec")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per build")
    ap.add_argument("--threads", type=int, default=2, help="compiles at once")
    ap.add_argument("--compile-all", action="store_true",
                    help="also compile every demo module with the policy (codec: already)")
    args = ap.parse_args()
    print(json.dumps(perf_report(args.policy, program=args.program, repeat=args.repeat,
                                 threads=args.threads, compile_all=args.compile_all),
                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
