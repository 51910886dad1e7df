"""`mlgo search`: per-module search for decisions better than the baseline and the policy
(inlining: fewer bytes than -Oz; regalloc-evict: a lower cost than the stock advisor)."""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from pathlib import Path

from tqdm import tqdm

from pymlgo.cli import common
from pymlgo.evaluate.search import (
    DEFAULT_ANSWERS,
    DEFAULT_BATCH,
    MOVES,
    SUMMARY_FILE,
    SearchReport,
    search,
)
from pymlgo.problems import registry

DEFAULT_BUDGET = 40
DEFAULT_OUTPUT = Path("mlgo-search")


def _paragraphs(*texts: str) -> str:
    # Raw formatting keeps the blank lines between paragraphs; each is wrapped here.
    return "\n\n".join(textwrap.fill(t, 79) for t in texts)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search",
        help="search each module for decisions that beat the baseline and the policy",
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
            "With --problem regalloc-evict the search is for the eviction advisor's "
            "decisions at -O2, measured by the allocator's weighted spill/reload/copy cost "
            "(the reward, and what decides 'better'; bytes are reported too): a move gives "
            "one decision another evictable register, up to ANSWERS of them (evicting "
            "nothing first, then the lightest interference), and decisions are tried in the "
            "costliest functions first (the allocator works one function at a time, so a "
            "function that costs 0 is never searched).",
            "The result is never worse than POLICY's own compile, and does not depend on "
            "the number of workers. OUTPUT_DIR gets <module>.log per module (the best "
            "decisions as an LLVM training log, as `mlgo trace` writes them: features, the "
            "decision ('inlining_decision', 'index_to_evict'), the reward: 1 - best/-Oz "
            "bytes, or the cost's relative saving vs stock) and search.json (settings; per "
            "module baseline, start and best bytes, and costs for regalloc-evict; compiles, "
            "decisions; totals). Rerun the same command to resume: modules already searched "
            "with the same settings are skipped."
        ),
    )
    common.add_corpus_arg(p)
    p.add_argument("--problem", default=registry.DEFAULT.name,
                   choices=[n for p in registry.PROBLEMS if p.search_moves
                            for n in (p.name, *p.aliases)],
                   help=f"which decisions are searched (default: {registry.DEFAULT.name})")
    p.add_argument(
        "--policy", default=None,
        help="where the search starts: default (clang's heuristic through the channel, equal "
        "to -Oz), never, always, random:P[:SEED], shift:DOWN[:UP[:USERS[:MAX]]], pretrained:NAME, "
        "or a saved policy directory; for regalloc-evict: heuristic (the stock rule rebuilt "
        "from the channel's features), random[:SEED], no-evict, pretrained:NAME or a saved "
        "eviction policy directory (default: default for inlining, heuristic for "
        "regalloc-evict)",
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
    p.add_argument("--answers", type=int, default=DEFAULT_ANSWERS, metavar="N",
                   help="other answers tried per decision, where a decision has more than "
                   f"one (an eviction: other registers; a call site has one) "
                   f"(default: {DEFAULT_ANSWERS})")
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
    label = report.problem.baseline_label
    lines = [f"searched {t['searched']} of {t['modules']} module(s) from "
             f"{report.settings['policy']}: {t['compiles']} compiles in {seconds:.0f} s "
             f"-> {output_dir}"]
    base, start, best = t["baseline_bytes"], t["start_bytes"], t["best_bytes"]
    if base:
        metric = report.settings["size_metric"]
        lines.append(
            f"{metric} bytes: {label} {base}, start {start} ({start / base - 1:+.2%}), "
            f"best {best} ({best / base - 1:+.2%}; {base - best} bytes saved)"
        )
    for m in report.problem.measures:  # what a regalloc search is after
        base, start, best = (t[f"{side}_{m.field}"] for side in ("baseline", "start", "best"))
        if base:
            lines.append(f"{m.label}: {label} {base:,.0f}, start {start:,.0f} "
                         f"({start / base - 1:+.2%}), best {best:,.0f} ({best / base - 1:+.2%})")
    better = [m for m in report.ok_modules if (m.reward_of(report.problem) or 0.0) > 0.0]
    lines.append(f"modules better than {label}: {len(better)}")
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
    if args.answers < 1:
        print("mlgo search: --answers must be >= 1", file=sys.stderr)
        return 2
    metric = common.size_metric(args)
    problem = registry.problem(args.problem)
    policy_spec = args.policy if args.policy is not None else problem.trace_policy
    try:
        flags = common.compile_config(args)
        compiler = find_compiler(args.clang)
        policy = load_policy(policy_spec, problem=problem, seed=args.seed)
        corpus = common.resolve_corpus(args.corpus, command_override=flags.command_override,
                                       clang=args.clang, level=problem.opt_level)
    except (CompilerError, ValueError, OSError) as exc:
        print(f"mlgo search: {exc}", file=sys.stderr)
        return 2
    common.warn_about_relaxation("mlgo search", corpus)
    spec = WorkSpec(problem=problem, clang=None if compiler.bundled else str(compiler.path),
                    timeout=args.timeout, edits=flags.flag_edits(), size_metric=metric)
    common.warn_about_level("mlgo search", corpus, spec.problem.opt_level)
    settings: dict[str, object] = {"policy_spec": policy_spec}
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
                            on_progress=on_progress, moves=args.moves,
                            answers=args.answers)
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
