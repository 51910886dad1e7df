"""The channel's cost with a near-zero-cost host: a tiny C program answering
`inlining_default`, vs plain -Oz. What remains is the compiler's own ML-advisor work and the
per-decision round trips — the floor under `channel_overhead.py`'s Python host.

A third mode replays the same decisions to a compiler run without
`-inliner-interactive-include-default`: the cost of a policy that does not read clang's own
decision (clang then skips one inline-cost analysis per call site). A fourth answers with
pymlgo's own host (`serve_channel`, in this process, the `default` policy's answer), so
the Python host is compared with the floor in the same run: a shared machine drifts by
tens of percent between runs, and each module's modes run back to back, their order
rotating every repeat. Every object must equal plain -Oz.

Prints JSON. Each module is compiled `--repeats` times per mode; the fastest run counts.

    python benchmarks/channel_floor.py [--corpus DIR|demo] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pymlgo.cli.common import resolve_corpus
from pymlgo.corpus.command import recompile_args
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.problems.base import CompileJob
from pymlgo.problems.inlining.compile import OPT_LEVEL, channel_flags
from pymlgo.protocol.channel import make_fifos, remove_fifos, serve_channel
from pymlgo.protocol.log import Header, Observation
from pymlgo.toolchain.compiler import find_compiler
from pymlgo.toolchain.size import text_size

HOST_SOURCE = Path(__file__).parent / "c" / "channel_host.c"


def answer_default(context: str, obs: Observation, header: Header) -> int:
    """The `default` policy's answer: clang's own decision, the last feature."""
    return int(obs.tensors[-1].reshape(-1)[0] != 0)


def with_python_host(cmd: list[str], base: Path, module: str) -> float:
    t = time.perf_counter()
    with subprocess.Popen(cmd) as cc:
        serve_channel(base, answer_default, timeout=600,
                      compiler_alive=lambda: cc.poll() is None)
    spent = time.perf_counter() - t
    if cc.returncode != 0:
        raise SystemExit(f"{module}: compile exit {cc.returncode}")
    return spent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="demo")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    compiler = find_compiler(None)
    jobs = corpus_jobs(resolve_corpus(args.corpus))
    seconds = {"plain": 0.0, "channel": 0.0, "replay": 0.0, "python": 0.0}
    mismatched: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="mlgo-floor-") as tmp:
        d = Path(tmp)
        host = d / "host"
        subprocess.run([*compiler.cc_argv, "-O2", str(HOST_SOURCE), "-o", str(host)], check=True)
        decisions = d / "decisions"
        for job in jobs:
            bc = d / "module.bc"
            bc.write_bytes(job.bitcode)

            def compile_args(obj: str, job: CompileJob = job, bc: Path = bc) -> list[str]:
                return [*compiler.clang_argv, *recompile_args(
                    job.cmd, input_bc=str(bc), output_obj=str(d / obj), opt_level=OPT_LEVEL)]

            def with_host(cmd: list[str], host_args: list[str], module: str = job.module
                          ) -> float:
                t = time.perf_counter()
                with subprocess.Popen(cmd) as cc, subprocess.Popen(host_args) as h:
                    pass  # both waited for on exit
                spent = time.perf_counter() - t
                if cc.returncode != 0 or h.returncode != 0:
                    raise SystemExit(f"{module}: compile exit {cc.returncode}, "
                                     f"host exit {h.returncode}")
                return spent

            best = dict.fromkeys(seconds, float("inf"))

            def plain_run(best: dict[str, float] = best) -> None:
                t = time.perf_counter()
                subprocess.run(compile_args("plain.o"), check=True)
                best["plain"] = min(best["plain"], time.perf_counter() - t)

            def c_host_runs(best: dict[str, float] = best) -> None:
                # record, then replay what was recorded: the pair stays in this order
                base = make_fifos(d)
                best["channel"] = min(best["channel"], with_host(
                    [*compile_args("channel.o"), *channel_flags(base)],
                    [str(host), str(base), "record", str(decisions)]))
                remove_fifos(base)
                base = make_fifos(d)
                best["replay"] = min(best["replay"], with_host(
                    [*compile_args("replay.o"), *channel_flags(base, include_default=False)],
                    [str(host), str(base), "replay", str(decisions)]))
                remove_fifos(base)

            def python_host_run(best: dict[str, float] = best, module: str = job.module
                                ) -> None:
                base = make_fifos(d)
                best["python"] = min(best["python"], with_python_host(
                    [*compile_args("python.o"), *channel_flags(base)], base, module))
                remove_fifos(base)

            # the order rotates every repeat, so no mode always runs first or last
            groups = [plain_run, c_host_runs, python_host_run]
            for r in range(args.repeats):
                for run in groups[r % 3:] + groups[:r % 3]:
                    run()
            plain = text_size(d / "plain.o")
            if any(plain != text_size(d / f"{m}.o") for m in ("channel", "replay", "python")):
                mismatched.add(job.module)
            for mode in seconds:
                seconds[mode] += best[mode]
    print(json.dumps({
        "benchmark": "channel_floor",
        "corpus": args.corpus,
        "modules": len(jobs),
        "repeats": args.repeats,
        "plain_oz_seconds": round(seconds["plain"], 3),
        "c_host_channel_seconds": round(seconds["channel"], 3),
        "ratio": round(seconds["channel"] / seconds["plain"], 4),
        "c_host_without_default_seconds": round(seconds["replay"], 3),
        "ratio_without_default": round(seconds["replay"] / seconds["plain"], 4),
        "python_host_channel_seconds": round(seconds["python"], 3),
        "python_host_ratio": round(seconds["python"] / seconds["plain"], 4),
        "size_mismatches": sorted(mismatched),
    }, indent=2))
    return 0 if not mismatched else 1


if __name__ == "__main__":
    sys.exit(main())
