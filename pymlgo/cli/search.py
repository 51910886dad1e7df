"""`mlgo search`: per-module search for inlining decisions smaller than -Oz and the policy."""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from pathlib import Path

from tqdm import tqdm

from pymlgo.cli import common
from pymlgo.evaluate.search import DEFAULT_BATCH, MOVES, SUMMARY_FILE, SearchReport, search

DEFAULT_BUDGET = 40
DEFAULT_OUTPUT = Path("mlgo-search")


def _paragraphs(*texts: str) -> str:
    # Raw formatting keeps the blank lines between paragraphs; each is wrapped here.
    return "\n\n".join(textwrap.fill(t, 79) for t in texts)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search",
        help="search each module for inlining decisions that beat -Oz and the policy",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_paragraphs(
            "For every module of a corpus: compile it with POLICY answering clang's inliner, "
            "then flip single decisions and keep each flip that makes the object strictly "
            "smaller, until the module's BUDGET of compiles is spent or no single flip helps.",
            "A decision sequence is replayed by index: decision i gets the sequence's i-th "
            "answer, later decisions the policy's own. Flipping an early decision can change "
            "which call sites come later, so the answers after it may meet other call sites; "
            "the compile is measured whatever it did. Flips are tried least certain first "
            "for a learned policy (smallest |logit|), in a seeded order otherwise; each round "
            "compiles BATCH flips per module in parallel and accepts the smallest.",
            "The result is never larger than POLICY's own compile, and does not depend on "
            "the number of workers. OUTPUT_DIR gets <module>.log per module (the best "
            "decisions as an LLVM training log, as `mlgo trace` writes them: features, "
            "'inlining_decision', reward 1 - best/-Oz bytes) and search.json (settings; per "
            "module -Oz, start and best bytes, compiles, decisions; totals). Rerun the same "
            "command to resume: modules already searched with the same settings are skipped."
        ),
    )
    common.add_corpus_arg(p)
    p.add_argument(
        "--policy", default="default",
        help="where the search starts: default (clang's heuristic through the channel, equal "
        "to -Oz), never, always, random:P[:SEED], shift:DOWN[:UP[:USERS[:MAX]]], pretrained:NAME, "
        "or a saved policy "
        "directory (default: default)",
    )
    p.add_argument("--budget", type=int, default=DEFAULT_BUDGET, metavar="N",
                   help="compiles per module, the starting policy's included "
                   f"(default: {DEFAULT_BUDGET})")
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH, metavar="K",
                   help="flips per module compiled in one round, the best accepted; a larger "
                   f"batch keeps more workers busy, a smaller one adapts sooner "
                   f"(default: {DEFAULT_BATCH})")
    p.add_argument("--moves", choices=MOVES, default="single",
                   help="single: flip one decision at a time; callee: also set all call "
                   "sites of one callee together (inline them all, which can delete the "
                   "callee and its unwind entry; or none), alternating with single flips "
                   "(default: single)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the flip order (policies without probabilities) and of "
                   "stochastic policies (default: 0)")
    p.add_argument("--output-dir", "--output_dir", dest="output_dir", type=Path,
                   default=DEFAULT_OUTPUT, metavar="DIR",
                   help=f"where logs and {SUMMARY_FILE} go; an existing search there is "
                   f"resumed (default: ./{DEFAULT_OUTPUT})")
    p.add_argument("--restart", action="store_true",
                   help="discard a search already in OUTPUT_DIR (e.g. one made with other "
                   "settings) instead of resuming it")
    common.add_size_metric_arg(p)
    common.add_worker_args(p)
    common.add_compiler_args(p)
    common.add_flag_args(p)
    p.set_defaults(func=run)


def format_report(report: SearchReport, output_dir: Path, seconds: float) -> str:
    t = report.totals()
    lines = [f"searched {t['searched']} of {t['modules']} module(s) from "
             f"{report.settings['policy']}: {t['compiles']} compiles in {seconds:.0f} s "
             f"-> {output_dir}"]
    base, start, best = t["baseline_bytes"], t["start_bytes"], t["best_bytes"]
    if base:
        metric = report.settings["size_metric"]
        lines.append(
            f"{metric} bytes: -Oz {base}, start {start} ({start / base - 1:+.2%}), "
            f"best {best} ({best / base - 1:+.2%}; {base - best} bytes saved)"
        )
    improved = sum(1 for m in report.ok_modules
                   if m.best_bytes is not None and m.baseline_bytes is not None
                   and m.best_bytes < m.baseline_bytes)
    lines.append(f"modules smaller than -Oz: {improved}")
    lines += [f"failed: {m.module}: {(m.error or '')[:160]}" for m in report.modules if m.error]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    # Imported here so that `mlgo --help` loads neither policies nor worker backends.
    from pymlgo.evaluate.eval import corpus_jobs
    from pymlgo.evaluate.search import SearchDirError
    from pymlgo.policy.store import load_policy
    from pymlgo.protocol.features import FeatureMismatchError
    from pymlgo.toolchain.compiler import CompilerError, find_compiler
    from pymlgo.workers import make_executor
    from pymlgo.workers.protocol import ExecutorError, WorkSpec

    if args.budget < 1 or args.batch < 1:
        print("mlgo search: --budget and --batch must be >= 1", file=sys.stderr)
        return 2
    metric = common.size_metric(args)
    try:
        flags = common.compile_config(args)
        compiler = find_compiler(args.clang)
        policy = load_policy(args.policy, seed=args.seed)
        corpus = common.resolve_corpus(args.corpus, command_override=flags.command_override,
                                       clang=args.clang)
    except (CompilerError, ValueError, OSError) as exc:
        print(f"mlgo search: {exc}", file=sys.stderr)
        return 2
    common.warn_about_relaxation("mlgo search", corpus)
    spec = WorkSpec(clang=None if compiler.bundled else str(compiler.path),
                    timeout=args.timeout, edits=flags.flag_edits(), size_metric=metric)
    common.warn_about_level("mlgo search", corpus, spec.problem.opt_level)
    settings: dict[str, object] = {"policy_spec": args.policy}
    if flags.command_override is not None:
        settings["command_override"] = list(flags.command_override)
    bar = tqdm(total=0, desc=f"search {policy.name}", unit="compile", file=sys.stderr,
               dynamic_ncols=True)

    def on_progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    started = time.monotonic()
    try:
        workers = None if args.workers is None else common.default_workers(args.workers)
        with make_executor(args.cluster, workers) as executor:
            report = search(executor, compiler, corpus_jobs(corpus), policy,
                            budget=args.budget, seed=args.seed, batch=args.batch,
                            spec=spec, output_dir=args.output_dir,
                            restart=args.restart, settings=settings,
                            on_progress=on_progress, moves=args.moves)
    except FeatureMismatchError as exc:
        print(f"mlgo search: policy {policy.name!r} cannot run on {compiler.path}: {exc}",
              file=sys.stderr)
        return 2
    except (SearchDirError, ValueError, ExecutorError, OSError) as exc:
        print(f"mlgo search: {exc}", file=sys.stderr)
        return 2
    finally:
        bar.close()
    print(format_report(report, args.output_dir, time.monotonic() - started))
    return 0 if report.ok_modules else 1
