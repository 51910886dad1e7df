"""Quality of a trained eviction policy: weighted spill/reload/copy cost on held-out modules
vs the stock advisor, and a real program's executed instructions and wall time.

Reads a run directory written by `mlgo train --problem regalloc` (its `setup.pkl` holds the
split that names the held-out modules; the policy is `best/`), evaluates the policy on the
held-out modules of the demo corpus, then runs `regalloc_perf.perf_report` (callgrind, wall,
perf) for the codec driver built with it. Prints JSON. The issue's target: held-out cost
change <= -2 %. Stop 13's run used these ES settings (ra-es.toml):

    [es]
    population = 6
    sigma = 0.2
    learning_rate = 0.05
    modules_per_iteration = 8

    mlgo train --problem regalloc --algo es --config ra-es.toml --output_dir /tmp/ra-run \
        --time-budget 30
    python benchmarks/regalloc_quality.py --run /tmp/ra-run

Without --run, only the program part, for a policy trained elsewhere (the shipped one is
measured on its own held-out packages by `python -m pymlgo.deploy.pretrained --name
regalloc-evict`):

    python benchmarks/regalloc_quality.py --policy pretrained:regalloc-evict
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path

import numpy as np

from pymlgo.corpus.demo import ensure_demo_corpus
from pymlgo.corpus.format import load_corpus
from pymlgo.evaluate.eval import corpus_jobs, evaluate
from pymlgo.policy.regalloc import load_spec
from pymlgo.toolchain.compiler import find_compiler
from pymlgo.train.trainer import SETUP_FILE
from pymlgo.workers import WorkSpec, make_executor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from regalloc_perf import perf_report  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, default=None,
                    help="run directory of `mlgo train --problem regalloc` (its held-out demo "
                    "modules are measured); without it, only the program (needs --policy)")
    ap.add_argument("--policy", default=None,
                    help="policy to measure (default: RUN/best)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--program", default="codec", choices=("codec", "lz4"))
    ap.add_argument("--skip-program", action="store_true", help="held-out costs only")
    args = ap.parse_args()
    if args.run is None:
        if args.policy is None or args.skip_program:
            ap.error("without --run, give --policy (and not --skip-program)")
        print(json.dumps({"policy": args.policy,
                          "program": perf_report(args.policy, program=args.program, repeat=3)},
                         indent=2))
        return 0
    with (args.run / SETUP_FILE).open("rb") as f:
        split = pickle.load(f).split.to_dict()
    spec = args.policy or str(args.run / "best")
    policy = load_spec(spec)
    compiler = find_compiler(None)
    jobs = corpus_jobs(load_corpus(ensure_demo_corpus()), split["heldout"])
    with make_executor(None, args.workers) as executor:
        report = evaluate(executor, compiler, jobs, policy,
                          spec=WorkSpec(problem="regalloc-evict"))
    doc = report.to_json()
    total = doc["total"]
    ratios = [m["policy_cost"] / m["baseline_cost"] for m in doc["modules"]
              if m["error"] is None and m["baseline_cost"] and m["policy_cost"] is not None]
    out: dict[str, object] = {
        "policy": spec,
        "heldout_modules": len(jobs),
        "heldout_failed": len(report.modules) - len(report.ok_modules),
        "heldout_weighted_cost": {
            "stock": total["baseline_cost"], "policy": total["policy_cost"],
            "change": total["cost_change"],
            "geomean_ratio_change": (float(np.exp(np.mean(np.log(ratios)))) - 1.0
                                     if ratios else None),
            "modules_better": sum(r < 1 for r in ratios),
            "modules_worse": sum(r > 1 for r in ratios),
        },
        "heldout_text_bytes_change": total["change"],
        "invalid_advice": total["invalid_advice"],
        "target_met": total["cost_change"] <= -0.02,
    }
    if not args.skip_program:
        out["program"] = perf_report(spec, program=args.program, repeat=3)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
