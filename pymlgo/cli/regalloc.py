"""`mlgo train --problem regalloc-evict`: the register allocation problems' training loop.

Not a subcommand of its own: `cli/train.py` hands over here, with the arguments it parsed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pymlgo.cli import common
from pymlgo.problems.base import Problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SPLIT_FILE = "split.json"
_VALIDATION, _HELDOUT = 0.15, 0.2  # as `mlgo train` splits for inlining


def _config(args: argparse.Namespace) -> tuple[Any, float, float]:
    """(RegallocTrainConfig, validation fraction, held-out fraction) from --config and
    the flags on top. TOML: algo, seed, iterations, hidden at top level; [es] with
    RegallocESConfig fields; [ppo] with RegallocPPOConfig fields; [split] validation,
    heldout. Unknown keys are an error."""
    import dataclasses

    from pymlgo.train.regalloc_es import RegallocESConfig
    from pymlgo.train.regalloc_run import REGALLOC_ALGOS, RegallocTrainConfig

    data: dict[str, Any] = {}
    if args.config is not None:
        with open(args.config, "rb") as f:
            data = tomllib.load(f)
    known = {"algo", "seed", "iterations", "hidden", "es", "ppo", "split"}
    if set(data) - known:
        raise ValueError(f"{args.config}: unknown key(s) {sorted(set(data) - known)} for "
                         f"regalloc (known: {sorted(known)})")
    split = dict(data.get("split", {}))
    if set(split) - {"validation", "heldout"}:
        raise ValueError(f"{args.config}: [split] takes validation and heldout")
    es_fields = {f.name for f in dataclasses.fields(RegallocESConfig)}
    es = dict(data.get("es", {}))
    if set(es) - es_fields:
        raise ValueError(f"{args.config}: unknown [es] key(s) {sorted(set(es) - es_fields)}")
    algo = args.algo or data.get("algo")
    if algo not in REGALLOC_ALGOS:
        raise ValueError("give --algo es or --algo ppo for --problem regalloc")
    iterations = args.iterations if args.iterations is not None else data.get("iterations")
    if iterations is None:
        iterations = 10_000 if args.time_budget is not None else 10
    warm = args.warmstart if args.warmstart not in (None, "none", "bc") else None
    if args.warmstart == "bc":
        raise ValueError("--problem regalloc starts from the stock rule, not bc: give "
                         "none or a saved regalloc policy directory")
    config = RegallocTrainConfig(
        algo=algo,
        seed=args.seed if args.seed is not None else int(data.get("seed", 0)),
        iterations=int(iterations),
        time_budget_s=None if args.time_budget is None else 60.0 * args.time_budget,
        hidden=tuple(data.get("hidden", RegallocTrainConfig().hidden)),
        warmstart=warm,
        es=RegallocESConfig(**es),
        ppo_options=dict(data.get("ppo", {})),
    )
    return (config, float(split.get("validation", _VALIDATION)),
            float(split.get("heldout", _HELDOUT)))


def run_train(args: argparse.Namespace, problem: Problem) -> int:
    from pymlgo.corpus.format import CorpusError
    from pymlgo.corpus.split import split_by_module
    from pymlgo.evaluate.eval import corpus_jobs
    from pymlgo.problems.regalloc.problem import RegallocProblem
    from pymlgo.toolchain.compiler import CompilerError, find_compiler
    from pymlgo.train.regalloc_run import train_regalloc
    from pymlgo.workers import ExecutorError, make_executor
    from pymlgo.workers.protocol import WorkSpec

    if not isinstance(problem, RegallocProblem) or problem.advisor != "evict":
        print(f"mlgo train: no trainer for --problem {problem.name} yet (the register "
              "allocation loop, train/regalloc_run.py, learns eviction policies)",
              file=sys.stderr)
        return 2
    try:
        config, validation, heldout = _config(args)
        compiler = find_compiler(args.clang)
        corpus = common.resolve_corpus(args.corpus)
        split = split_by_module(corpus, seed=config.seed, validation=validation,
                                heldout=heldout)
        out: Path = args.output_dir
        out.mkdir(parents=True, exist_ok=True)
        (out / SPLIT_FILE).write_text(json.dumps(split.to_dict(), indent=1) + "\n")
        jobs = {j.module: j for j in corpus_jobs(corpus, (*split.train, *split.validation))}
        spec = WorkSpec(problem=problem,
                        clang=None if compiler.bundled else str(compiler.path),
                        timeout=args.timeout)
        workers = common.default_workers(args.workers) if args.cluster is None else args.workers

        def log(entry: dict[str, float]) -> None:
            v = entry.get("validation/cost_change", float("nan"))
            print(f"iteration {int(entry['iteration'])}: validation cost {v:+.2%} vs stock, "
                  f"fitness {entry.get('validation/fitness', float('nan')):+.4f} "
                  f"({entry['seconds']:.0f} s)", file=sys.stderr, flush=True)

        with make_executor(args.cluster, workers) as executor:
            result = train_regalloc(executor, compiler, [jobs[m] for m in split.train],
                                    [jobs[m] for m in split.validation], config, spec=spec,
                                    output_dir=out, log=log, tensorboard=args.tensorboard)
    except (CorpusError, CompilerError, ExecutorError, ValueError, OSError,
            tomllib.TOMLDecodeError) as exc:
        print(f"mlgo train: {exc}", file=sys.stderr)
        return 2
    print(f"best policy: {args.output_dir / 'best'} (iteration {result.best_iteration}, "
          f"validation weighted cost {result.best_validation['cost_change']:+.2%} vs the "
          "stock advisor)")
    print(f"final policy: {args.output_dir / 'final'}")
    return 0
