"""IR2Native against the instruction-count line on held-out packages and held-out modules.

Builds the per-function data set of a corpus (`mlgo ir2native dataset`; or reads one with
--dataset), then measures both models on data they were not fitted on:

- by package: leave-one-package-out (fit on the other packages, predict this one);
- by module: K folds of whole modules (seeded shuffles; one evaluation per seed).

Prints JSON: per split the per-fold and pooled MAE (bytes) and R² of IR2Native and of the
baseline, and whether IR2Native's pooled MAE and R² are the better ones. Deterministic:
the same corpus, compiler and seeds give the same numbers.

    python benchmarks/ir2native_quality.py [--corpus demo] [--dataset FILE]
        [--seeds 0,1,2,3] [--folds 5] [--l2 X] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pymlgo.cli.common import resolve_corpus
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.ir2native.dataset import Dataset, build_dataset, load_dataset
from pymlgo.ir2native.train import Evaluation, evaluate_heldout
from pymlgo.toolchain.compiler import find_compiler


def summary(ev: Evaluation) -> dict[str, Any]:
    d = ev.to_json()
    m, b = ev.pooled_model, ev.pooled_baseline
    d["ir2native_better"] = {"mae": m.mae < b.mae, "r2": m.r2 > b.r2,
                             "folds_with_lower_mae": sum(f.model.mae < f.baseline.mae
                                                         for f in ev.folds),
                             "folds": len(ev.folds)}
    return d


def quality(ds: Dataset, *, seeds: Sequence[int], folds: int,
            l2: float | None) -> dict[str, Any]:
    modules = sorted({r.module for r in ds.rows})
    return {
        "functions": len(ds.rows),
        "modules_with_functions": len(modules),
        "packages": sorted({r.package for r in ds.rows}),
        "l2": "chosen per fit" if l2 is None else l2,
        "by_package": summary(evaluate_heldout(ds, l2=l2)),
        "by_module": {str(seed): summary(evaluate_heldout(ds, l2=l2, split="module",
                                                          folds=folds, seed=seed))
                      for seed in seeds},
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="demo", help="corpus directory or 'demo' (default)")
    ap.add_argument("--dataset", type=Path, default=None,
                    help="use this data set (from `mlgo ir2native dataset`) instead")
    ap.add_argument("--seeds", default="0,1,2,3", help="module-fold seeds (default 0,1,2,3)")
    ap.add_argument("--folds", type=int, default=5, help="module folds (default 5)")
    ap.add_argument("--l2", type=float, default=None,
                    help="fixed ridge penalty (default: chosen per fit, as `mlgo ir2native "
                         "train` does)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    out: dict[str, Any] = {}
    if args.dataset is not None:
        ds = load_dataset(args.dataset)
        out["dataset"] = str(args.dataset)
    else:
        compiler = find_compiler(None)
        jobs = corpus_jobs(resolve_corpus(args.corpus))
        t0 = time.monotonic()
        ds = build_dataset(compiler, jobs, workers=args.workers)
        out.update(corpus=args.corpus, modules=len(jobs),
                   failed_modules=list(ds.failed_modules),
                   dataset_seconds=round(time.monotonic() - t0, 1))
        if not ds.rows:
            print("no function with a native size was found", file=sys.stderr)
            return 1
    out["compiler"] = ds.compiler
    out.update(quality(ds, seeds=[int(s) for s in args.seeds.split(",") if s],
                       folds=args.folds, l2=args.l2))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
