"""How fast the allocator's remark YAML is parsed (the regalloc reward), on real output.

Compiles demo modules at -O2 with `-opt-record-file F -opt-record-passes regalloc` (stock
advisor), then parses each file repeatedly with `remarks.read_remarks`. Prints JSON:
records, bytes, parse seconds, records per second, and the compile time for scale.

    python benchmarks/regalloc_remarks.py [--modules zstd/lib/compress/zstd_compress ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pymlgo.corpus.demo import ensure_demo_corpus
from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.problems.compile import compile_argv
from pymlgo.problems.regalloc.compile import OPT_LEVEL, remark_flags
from pymlgo.problems.regalloc.remarks import read_remarks, remark_file
from pymlgo.toolchain import run
from pymlgo.toolchain.compiler import find_compiler

DEFAULT_MODULES = ("zstd/lib/compress/zstd_compress", "brotli/c/enc/encode",
                   "zstd/lib/decompress/zstd_decompress_block")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", nargs="+", default=list(DEFAULT_MODULES))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    compiler = find_compiler(None)
    jobs = corpus_jobs(load_corpus(ensure_demo_corpus()), args.modules)
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for job in jobs:
            work = tmp / job.module.replace("/", "__")
            work.mkdir()
            argv = compile_argv(compiler, job, work, OPT_LEVEL, remark_flags(remark_file(work)))
            t0 = time.perf_counter()
            res = run.run(argv, cwd=work, timeout=600)
            compile_s = time.perf_counter() - t0
            if res.returncode != 0:
                print(f"{job.module}: compile failed: {res.stderr[-400:]}", file=sys.stderr)
                return 1
            path = remark_file(work)
            text = path.read_text()
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                report = read_remarks(path)
                times.append(time.perf_counter() - t0)
            records = sum(1 for line in text.splitlines() if line.startswith("--- "))
            best = min(times)
            rows.append({"module": job.module, "bytes": len(text), "records": records,
                         "functions": len(report.functions), "loops": len(report.loops),
                         "parse_seconds": best, "records_per_second": records / best,
                         "mb_per_second": len(text) / best / 1e6, "compile_seconds": compile_s})
            shutil.rmtree(work)
    total_records = sum(r["records"] for r in rows)
    total_s = sum(r["parse_seconds"] for r in rows)
    print(json.dumps({"modules": rows, "total": {
        "records": total_records, "parse_seconds": total_s,
        "records_per_second": total_records / total_s if total_s else None,
        "compile_seconds": sum(r["compile_seconds"] for r in rows)}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
