"""Partial rewards (IR2Native per-decision credit) vs final-reward-only PPO, same everything else.

Trains PPO twice on one corpus with `configs/partial-rewards-ppo.toml` (same seed, split,
bc warm start and iterations), once with `partial_rewards = "none"` and once with
`"ir2native"` (IR2Native fitted on the training split only), then compiles the validation
and held-out modules with each run's best-by-validation policy.

Prints JSON (also OUTPUT_DIR/partial_rewards.json): per variant, the total .text change vs
-Oz on validation and held-out, the best iteration and the training minutes.

    python benchmarks/partial_rewards.py [--corpus demo] [--output_dir DIR]
        [--iterations N] [--seeds 0,1] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pymlgo.cli.common import resolve_corpus
from pymlgo.evaluate.eval import corpus_jobs, evaluate
from pymlgo.policy.store import load_policy_dir
from pymlgo.toolchain.compiler import find_compiler
from pymlgo.train.config import load_config
from pymlgo.train.trainer import RunOptions, train
from pymlgo.workers import WorkSpec, make_executor

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "partial-rewards-ppo.toml"
VARIANTS = ("none", "ir2native")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="demo", help="corpus directory or 'demo' (default)")
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--output_dir", type=Path, default=Path("partial-rewards"))
    ap.add_argument("--iterations", type=int, default=None,
                    help="override the config's iterations")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",") if s]

    corpus = resolve_corpus(args.corpus)
    compiler = find_compiler(None)
    spec = WorkSpec(clang=None, timeout=600.0)
    rows: list[dict[str, Any]] = []
    with make_executor(None, args.workers) as executor:
        for seed in seeds:
            for variant in VARIANTS:
                overrides: dict[str, Any] = {"seed": seed, "partial_rewards": variant}
                if args.iterations is not None:
                    overrides["iterations"] = args.iterations
                config = load_config(args.config, **overrides)
                run_dir = args.output_dir / f"seed{seed}-{variant}"
                started = time.monotonic()
                res = train(config, corpus, run_dir, options=RunOptions(workers=args.workers),
                            executor=executor)
                policy = load_policy_dir(res.best_dir)
                row: dict[str, Any] = {
                    "seed": seed, "partial_rewards": variant, "iterations": res.iterations,
                    "best_iteration": res.best_iteration, "training_minutes": res.minutes,
                    "wall_minutes": (time.monotonic() - started) / 60,
                }
                for part, names in (("validation", res.split.validation),
                                    ("heldout", res.split.heldout)):
                    rep = evaluate(executor, compiler, corpus_jobs(corpus, names), policy,
                                   spec=spec)
                    row[part] = {"change": rep.change, "modules": len(rep.ok_modules),
                                 "baseline_bytes": rep.baseline_total,
                                 "policy_bytes": rep.policy_total}
                rows.append(row)
                print(json.dumps(row), flush=True)
    out = {"benchmark": "partial_rewards", "corpus": args.corpus,
           "config": str(args.config), "runs": rows}
    args.output_dir.mkdir(parents=True, exist_ok=True)
    (args.output_dir / "partial_rewards.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
