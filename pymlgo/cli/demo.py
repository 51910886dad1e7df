"""`mlgo demo`: the main job — demo corpus, a few minutes of training, a held-out report."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymlgo.cli import common

if TYPE_CHECKING:  # `mlgo --help` should not import the trainer
    from pymlgo.corpus.format import Corpus
    from pymlgo.evaluate.eval import EvalReport
    from pymlgo.toolchain.compiler import Compiler
    from pymlgo.train.config import TrainConfig
    from pymlgo.train.trainer import RunOptions, TrainResult

DEFAULT_OUTPUT = Path("mlgo-demo")
DEFAULT_MINUTES = 4.0
DEMO_ALGO = "es"  # measured: see demo_config


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="the main job: demo corpus -> behaviour cloning -> ES -> held-out report",
        description=(
            "Build (once, then cached) the demo corpus from the zstd, brotli and lz4 sources, "
            "split it into train / validation / held-out modules, behaviour-clone clang's "
            "-Oz inlining heuristic and improve on it with evolution strategies for a few "
            "minutes, then compile the held-out modules with the best policy and report "
            "their total size (every allocated section) against plain -Oz "
            "(OUTPUT_DIR/report.md, a PNG plot, and JSON). Rerunning reuses the finished "
            "training run in OUTPUT_DIR/train."
        ),
    )
    p.add_argument("--output_dir", "--output-dir", dest="output_dir", type=Path,
                   default=DEFAULT_OUTPUT, metavar="DIR",
                   help=f"where the run and the report go (default: ./{DEFAULT_OUTPUT})")
    p.add_argument("--minutes", type=float, default=DEFAULT_MINUTES, metavar="M",
                   help=f"training time budget, setup included (default: {DEFAULT_MINUTES:g})")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and the training")
    p.add_argument("--algo", choices=("es", "ppo"), default=DEMO_ALGO,
                   help=f"algorithm after the behaviour-cloning warm start "
                   f"(default: {DEMO_ALGO})")
    common.add_worker_args(p)
    common.add_compiler_args(p)
    p.set_defaults(func=run)


def demo_config(algo: str, seed: int, minutes: float) -> Any:
    """The demo's TrainConfig: split by module, ES/PPO sized for 2 cores and minutes."""
    from pymlgo.train.config import make_config

    return make_config(
        algo=algo, seed=seed, time_budget_minutes=minutes, warmstart="bc",
        split={"by": "module", "validation": 0.15, "heldout": 0.25},
        es={"population": 6, "sigma": 0.05, "learning_rate": 0.02,
            "modules_per_iteration": 12},
        ppo={"modules_per_iteration": 12, "samples_per_module": 4},
    )


@dataclass(frozen=True)
class DemoOutcome:
    """A finished demo run: the training run and its best policy on held-out and training
    modules."""

    result: TrainResult
    heldout: EvalReport
    trained: EvalReport


def train_and_evaluate(config: TrainConfig, corpus: Corpus, out: Path, options: RunOptions,
                       compiler: Compiler) -> DemoOutcome:
    """Train into `out/train` (or reuse/resume it), then compile the held-out and the
    training modules with the best policy."""
    from pymlgo.evaluate.eval import corpus_jobs, evaluate
    from pymlgo.policy.store import load_policy_dir
    from pymlgo.train.trainer import train
    from pymlgo.workers import WorkSpec, make_executor

    with make_executor(options.cluster, options.workers) as executor:
        result = train(config, corpus, out / "train", options=options, executor=executor)
        policy = load_policy_dir(result.best_dir)
        spec = WorkSpec(clang=None if compiler.bundled else str(compiler.path),
                        timeout=options.timeout, size_metric=config.size_metric)
        print("mlgo demo: evaluating the best policy on held-out and training modules",
              file=sys.stderr, flush=True)
        heldout = evaluate(executor, compiler, corpus_jobs(corpus, result.split.heldout),
                           policy, spec=spec)
        trained = evaluate(executor, compiler, corpus_jobs(corpus, result.split.train),
                           policy, spec=spec)
    return DemoOutcome(result, heldout, trained)


def write_demo_report(out: Path, outcome: DemoOutcome, *, corpus_label: str, corpus: Corpus,
                      config: TrainConfig, compiler: Compiler, command: str,
                      started: float) -> int:
    """report.md, the PNG plot and report.json in `out`; prints the headline. Exit code:
    0 if any held-out module compiled."""
    from pymlgo.evaluate.report import SplitResult, write_report
    from pymlgo.train.trainer import read_scalars

    result, heldout, trained = outcome.result, outcome.heldout, outcome.trained
    results = [SplitResult("held-out", heldout), SplitResult("training", trained)]
    details = {
        "corpus": f"{corpus_label}: {len(corpus)} modules, split by {config.split.by} "
                  f"(train {len(result.split.train)}, validation {len(result.split.validation)},"
                  f" held-out {len(result.split.heldout)})",
        "training": f"bc warm start, then {config.algo}: {result.iterations} iterations, "
                    f"{result.minutes:.1f} min, seed {config.seed}",
        "policy": f"`{result.best_dir}` (iteration {result.best_iteration}, validation "
                  f"{result.best_validation_change:+.2%})",
        "compiler": f"clang {compiler.version} ({compiler.path})",
        "command": f"`{command}`",
    }
    report = write_report(out, results, title="pymlgo demo: inlining for size vs -Oz",
                          details=details, curve=read_scalars(out / "train"))
    (out / "report.json").write_text(json.dumps(
        {"heldout": heldout.to_json(), "train": trained.to_json(),
         "training": {"algo": config.algo, "iterations": result.iterations,
                      "minutes": result.minutes, "best_iteration": result.best_iteration,
                      "best_validation_change": result.best_validation_change}},
        indent=2) + "\n")
    print(f"report: {report}")
    metric = heldout.size_metric
    print(f"training modules: {trained.change:+.2%} {metric} bytes vs -Oz "
          f"({trained.baseline_total:,} -> {trained.policy_total:,} bytes; code only "
          f"{trained.by_metric()['text']['change']:+.2%})")
    print(f"HELD-OUT: {heldout.change:+.2%} {metric} bytes vs -Oz on {len(heldout.ok_modules)} "
          f"modules never seen in training ({heldout.baseline_total:,} -> "
          f"{heldout.policy_total:,} bytes; code only {heldout.by_metric()['text']['change']:+.2%}"
          f"; {(time.monotonic() - started) / 60:.1f} min in total)")
    return 0 if heldout.ok_modules else 1


def run(args: argparse.Namespace) -> int:
    from pymlgo.corpus.demo import ensure_demo_corpus
    from pymlgo.corpus.format import CorpusError, load_corpus
    from pymlgo.toolchain.compiler import CompilerError, find_compiler
    from pymlgo.train.config import ConfigError
    from pymlgo.train.trainer import RunOptions, TrainError
    from pymlgo.workers import ExecutorError

    started = time.monotonic()
    out: Path = args.output_dir
    try:
        compiler = find_compiler(args.clang)
        corpus = load_corpus(ensure_demo_corpus(clang=args.clang))
        config = demo_config(args.algo, args.seed, args.minutes)
        workers = common.default_workers(args.workers) if args.cluster is None else args.workers
        options = RunOptions(workers=workers, cluster=args.cluster, clang=args.clang,
                             timeout=args.timeout)
        outcome = train_and_evaluate(config, corpus, out, options, compiler)
    except (ConfigError, TrainError, CorpusError, CompilerError, ExecutorError, OSError,
            ValueError) as exc:
        print(f"mlgo demo: {exc}", file=sys.stderr)
        return 2
    return write_demo_report(
        out, outcome, corpus_label="demo (zstd, brotli, lz4)", corpus=corpus, config=config,
        compiler=compiler, started=started,
        command=f"mlgo demo --output_dir {out} --minutes {args.minutes:g} --seed {args.seed}")
