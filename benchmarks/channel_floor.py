"""The channel's cost with a near-zero-cost host: a tiny C program answering
`inlining_default`, vs plain -Oz. What remains is the compiler's own ML-advisor work and the
per-decision round trips — the floor under `channel_overhead.py`'s Python host.

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
from pymlgo.problems.inlining.compile import OPT_LEVEL, channel_flags
from pymlgo.protocol.channel import make_fifos, remove_fifos
from pymlgo.toolchain.compiler import find_compiler
from pymlgo.toolchain.elf import text_size

HOST_SOURCE = Path(__file__).parent / "c" / "channel_host.c"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="demo")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    compiler = find_compiler(None)
    jobs = corpus_jobs(resolve_corpus(args.corpus))
    plain_s = channel_s = 0.0
    mismatched = []
    with tempfile.TemporaryDirectory(prefix="mlgo-floor-") as tmp:
        d = Path(tmp)
        host = d / "host"
        subprocess.run([*compiler.cc_argv, "-O2", str(HOST_SOURCE), "-o", str(host)], check=True)
        for job in jobs:
            bc = d / "module.bc"
            bc.write_bytes(job.bitcode)
            plain = [*compiler.clang_argv, *recompile_args(
                job.cmd, input_bc=str(bc), output_obj=str(d / "plain.o"), opt_level=OPT_LEVEL)]
            best_plain = best_channel = float("inf")
            for _ in range(args.repeats):
                t = time.perf_counter()
                subprocess.run(plain, check=True)
                best_plain = min(best_plain, time.perf_counter() - t)
                base = make_fifos(d)
                channel = [*compiler.clang_argv, *recompile_args(
                    job.cmd, input_bc=str(bc), output_obj=str(d / "channel.o"),
                    opt_level=OPT_LEVEL), *channel_flags(base)]
                t = time.perf_counter()
                with subprocess.Popen(channel) as cc, subprocess.Popen([str(host), str(base)]):
                    pass  # both waited for on exit
                best_channel = min(best_channel, time.perf_counter() - t)
                remove_fifos(base)
                if cc.returncode != 0:
                    raise SystemExit(f"{job.module}: the channel compile failed")
            if text_size(d / "plain.o") != text_size(d / "channel.o"):
                mismatched.append(job.module)
            plain_s += best_plain
            channel_s += best_channel
    print(json.dumps({
        "benchmark": "channel_floor",
        "corpus": args.corpus,
        "modules": len(jobs),
        "repeats": args.repeats,
        "plain_oz_seconds": round(plain_s, 3),
        "c_host_channel_seconds": round(channel_s, 3),
        "ratio": round(channel_s / plain_s, 4),
        "size_mismatches": mismatched,
    }, indent=2))
    return 0 if not mismatched else 1


if __name__ == "__main__":
    sys.exit(main())
