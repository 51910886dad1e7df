"""`mlgo trace`: compile a corpus with a policy and write its decisions as training logs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pymlgo.cli import common
from pymlgo.evaluate.eval import corpus_jobs
from pymlgo.evaluate.trace import HeuristicBaselineError, TraceSummary, trace_corpus
from pymlgo.evaluate.trace_partial import partial_dir
from pymlgo.policy.store import load_policy
from pymlgo.problems import registry
from pymlgo.problems.inlining.problem import InliningOptions
from pymlgo.protocol.features import FeatureMismatchError
from pymlgo.toolchain.compiler import CompilerError, find_compiler
from pymlgo.workers.protocol import Executor, ExecutorError, WorkSpec


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "trace",
        help="record every decision of a policy on a corpus as training logs",
        description=(
            "Compile every module of a corpus with POLICY answering the problem's advisor "
            "(inlining: clang's inliner at -Oz; regalloc-evict / regalloc-priority: the "
            "register allocator's eviction / priority advisor at -O2), and write one "
            "trajectory per module in LLVM's training-log format: OUTPUT_DIR/<module>.log "
            "(the compiler's features plus the decision as 'inlining_decision', "
            "'index_to_evict' or 'priority'; every observation followed by the module's "
            "reward against the baseline: 1 - policy_bytes/baseline_bytes vs plain -Oz for "
            "inlining, the relative weighted spill/reload/copy cost vs the stock advisor, "
            "negated, for regalloc), OUTPUT_DIR/sizes.csv (bytes, and costs for regalloc) "
            "and OUTPUT_DIR/trace.json. OUTPUT_DIR appears only once complete. Resumable: "
            "modules are traced into OUTPUT_DIR.partial/ and kept as they finish, so the "
            "same command after a stop (Ctrl-C, kill, end of a session) compiles only the "
            "modules not traced yet (failed ones again); a partial directory of another "
            "policy, compiler, size metric, flags or --ir2vec vocabulary is refused (remove "
            "it to start over). With the default policy each module compiles once: clang's "
            "heuristic through the channel is plain -Oz to the byte, so its object is the "
            "baseline too. clang's register allocator does not report its stock advisor's "
            "choices on the channel (LLVM logs them only in development mode, which the "
            "bundled clang lacks), so a regalloc trace records a policy that answers it: "
            "by default 'heuristic' (eviction) or 'priority:stage-size' (priority), the "
            "stock rule rebuilt from the channel's features; 'default' is refused there. "
            "Typical use: `mlgo trace --policy default` for behaviour cloning, then "
            "`mlgo vocab` on the result."
        ),
    )
    common.add_corpus_arg(p)
    p.add_argument(
        "--policy",
        default=None,
        help="inlining: default (clang's heuristic through the channel), never, always, "
        "random:P[:SEED], shift:DOWN[:UP[:USERS[:MAX]]] (clang's threshold moved), "
        "pretrained:NAME, "
        "or a saved policy directory (default: default); regalloc-evict: heuristic, "
        "random[:SEED], no-evict or a saved policy (default: heuristic); regalloc-priority: "
        "priority:stage-size, priority:size, priority:random[:SEED] or a saved policy "
        "(default: priority:stage-size)",
    )
    p.add_argument(
        "--output_dir",
        "--output-dir",
        dest="output_dir",
        type=Path,
        required=True,
        metavar="DIR",
        help="trace directory to create",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace OUTPUT_DIR if it exists (only once the new trace is complete)",
    )
    traced = [problem.name for problem in registry.PROBLEMS if problem.traces]
    p.add_argument(
        "--problem",
        default=traced[0],
        choices=[n for n in registry.names() if registry.problem(n).traces],
        help=f"which optimization the policy drives (default: {traced[0]}; traces are "
        f"written for {', '.join(traced)})",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for stochastic policies")
    p.add_argument(
        "--ir2vec", type=Path, default=None, metavar="FILE",
        help="IR2Vec vocabulary (`mlgo ir2vec vocab`): the logs also record clang's "
        "callee_embedding and caller_embedding (float[dim]); a saved policy with its own "
        "vocabulary always uses that one",
    )
    common.add_size_metric_arg(p)
    common.add_worker_args(p)
    common.add_compiler_args(p)
    common.add_flag_args(p)
    p.set_defaults(func=run)


def _executor(cluster: str | None, workers: int | None) -> Executor:
    # Imported here so that `mlgo trace --help` does not load the worker backends.
    from pymlgo.workers import make_executor

    return make_executor(cluster, workers)


def _ir2vec_options(vocab: Path | None) -> InliningOptions | None:
    """Options that make compiles send embeddings; the file is checked first (a vocabulary
    clang refuses fails every compile) and missing entities warn."""
    if vocab is None:
        return None
    from pymlgo.ir2vec.vocab_file import load, warn_missing

    warn_missing(load(vocab), str(vocab))
    return InliningOptions(ir2vec_vocab=vocab.absolute())


def format_summary(summary: TraceSummary) -> str:
    traced = summary.traced
    label = summary.problem.baseline_label
    lines = [
        f"traced {len(traced)} of {len(summary.rows)} module(s) with {summary.policy}: "
        f"{sum(r.decisions for r in traced)} decisions -> {summary.directory}"
        + (f" ({summary.resumed} traced by a stopped run before)" if summary.resumed else "")
    ]
    base = sum(r.baseline_bytes or 0 for r in traced)
    if base:
        pol = sum(r.policy_bytes or 0 for r in traced)
        change = (pol / base - 1) * 100
        lines.append(f"{summary.size_metric} bytes: {label} {base}, policy {pol} "
                     f"({change:+.2f}%)")
    for m in summary.problem.measures:
        was = sum(r.baseline_extra.get(m.key, 0.0) for r in traced)
        now = sum(r.policy_extra.get(m.key, 0.0) for r in traced)
        change_text = f" ({(now / was - 1) * 100:+.2f}%)" if was else ""
        lines.append(f"{m.label}: {label} {was:.6g}, policy {now:.6g}{change_text}")
    lines += [f"failed: {r.module}: {(r.error or '')[:160]}" for r in summary.rows if r.error]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    problem = registry.problem(args.problem)
    if args.policy is None:
        args.policy = problem.trace_policy
    try:
        flags = common.compile_config(args)
        override = flags.command_override
        compiler = find_compiler(args.clang)
        policy = load_policy(args.policy, problem=args.problem, seed=args.seed)
        problem.check_trace_policy(policy)
        corpus = common.resolve_corpus(args.corpus, command_override=override, clang=args.clang,
                                       level=problem.opt_level)
        options = _ir2vec_options(args.ir2vec)
    except (CompilerError, ValueError, OSError) as exc:
        print(f"mlgo trace: {exc}", file=sys.stderr)
        return 2
    common.warn_about_relaxation("mlgo trace", corpus)
    common.warn_about_level("mlgo trace", corpus, problem.opt_level)
    jobs = corpus_jobs(corpus)
    spec = WorkSpec(
        problem=args.problem,
        clang=None if compiler.bundled else str(compiler.path),
        timeout=args.timeout,
        edits=flags.flag_edits(),
        size_metric=common.size_metric(args),
        options=options,
    )
    metadata = {"policy_spec": args.policy, "seed": args.seed, "corpus": str(args.corpus)}
    if args.ir2vec is not None:
        from pymlgo.ir2vec.vocab_file import file_sha256

        metadata["ir2vec_sha256"] = file_sha256(args.ir2vec)
    if override is not None:  # so `mlgo train --traces` can refuse other flags
        metadata["command_override"] = list(override)
    try:
        # None lets the backend choose (all local cores; a shared pool's own size).
        workers = None if args.workers is None else common.default_workers(args.workers)
        with _executor(args.cluster, workers) as executor:
            summary = trace_corpus(
                executor,
                compiler,
                jobs,
                policy,
                args.output_dir,
                spec=spec,
                overwrite=args.overwrite,
                metadata=metadata,
                progress=True,
            )
    except FeatureMismatchError as exc:
        print(
            f"mlgo trace: policy {policy.name!r} cannot run on {compiler.path}: {exc}",
            file=sys.stderr,
        )
        return 2
    except (FileExistsError, ValueError, ExecutorError, HeuristicBaselineError) as exc:
        print(f"mlgo trace: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        kept = partial_dir(args.output_dir)
        if kept.is_dir():
            print(f"mlgo trace: interrupted; the modules traced so far are kept in {kept}: "
                  "the same command resumes", file=sys.stderr)
            return 130
        raise
    print(format_summary(summary))
    return 0 if summary.traced else 1
