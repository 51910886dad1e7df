"""`mlgo eval`: every corpus module with a policy vs the problem's baseline (-Oz for
inlining, the stock advisor for register allocation)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from pymlgo.cli import common
from pymlgo.evaluate.eval import corpus_jobs, evaluate, format_table
from pymlgo.policy.store import load_policy
from pymlgo.problems import registry
from pymlgo.problems.base import CompileJob
from pymlgo.protocol.features import FeatureMismatchError
from pymlgo.toolchain.compiler import CompilerError, find_compiler
from pymlgo.toolchain.language import cc1_language
from pymlgo.workers import make_executor
from pymlgo.workers.protocol import ExecutorError, WorkSpec


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="compare a policy's object sizes with plain -Oz on a corpus",
        description=(
            "Compile every module of a corpus twice: with plain -Oz (the baseline, cached per "
            "module and compiler) and with POLICY answering clang's inliner through the "
            "interactive channel. Sizes count what ships by default: every allocated section "
            "of the object, unwind tables included (--size-metric). Prints a per-module "
            "table (with the code and unwind-table deltas), the total change "
            "(policy/baseline - 1), the totals by section group, by every size metric and "
            "by module size, and the guarded total (per module the smaller of policy and "
            "-Oz). With two packages or more (a module's package is its name's first "
            "component) it adds each package's change and share, and a 90% interval of the "
            "total change over 2,000 seeded resamplings of the packages: wide when a few "
            "packages decide the total. A module that fails or times out is reported and "
            "left out of the totals. "
            "With --problem regalloc-evict the baseline is -O2 with the stock eviction "
            "advisor, and the table adds the allocator's weighted spill/reload/copy cost."
        ),
    )
    common.add_corpus_arg(p)
    p.add_argument(
        "--policy", default="default",
        help="default (clang's heuristic through the channel), never, always, "
        "random:P[:SEED], shift:DOWN[:UP[:USERS[:MAX]]] (clang's threshold moved), "
        "pretrained:NAME, "
        "or a saved policy directory (default: default)",
    )
    p.add_argument("--problem", default=registry.DEFAULT.name, choices=registry.names(),
                   help=f"which optimization the policy drives (default: "
                   f"{registry.DEFAULT.name}). {registry.help_text()}. Eviction policies: "
                   "default (the stock advisor), random[:SEED], no-evict, heuristic, or a "
                   "saved eviction policy directory; priority policies: default, "
                   "random[:SEED], size, stage-size, or a saved priority policy directory. "
                   "The register allocation reports add the weighted cost (baseline_cost, "
                   "policy_cost, cost_change) next to the bytes")
    p.add_argument("--seed", type=int, default=0, help="seed for stochastic policies")
    p.add_argument("--json", type=Path, default=None, metavar="OUT",
                   help="also write the full report as JSON to OUT")
    common.add_size_metric_arg(p)
    common.add_worker_args(p)
    common.add_compiler_args(p)
    common.add_flag_args(p)
    p.add_argument("--memory-limit", type=int, default=None, metavar="MB",
                   help="address-space limit per compile in MiB (default: none); a compile "
                   "that needs more fails and is listed with the others")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    problem = registry.problem(args.problem)
    if args.memory_limit is not None and args.memory_limit < 1:
        print("mlgo eval: --memory-limit must be >= 1 (MiB)", file=sys.stderr)
        return 2
    try:
        if args.json is not None:
            common.check_writable(args.json)  # not only after the whole run
        flags = common.compile_config(args)
        compiler = find_compiler(args.clang)
        policy = load_policy(args.policy, problem=problem, seed=args.seed)
        corpus = common.resolve_corpus(args.corpus, command_override=flags.command_override,
                                       clang=args.clang, level=problem.opt_level)
    except (CompilerError, ValueError, OSError) as exc:
        print(f"mlgo eval: {exc}", file=sys.stderr)
        return 2
    common.warn_about_relaxation("mlgo eval", corpus)
    common.warn_about_level("mlgo eval", corpus, problem.opt_level)
    jobs = corpus_jobs(corpus)
    _say_left_to_clang(policy, jobs)
    spec = WorkSpec(problem=problem, clang=str(compiler.path) if not compiler.bundled
                    else None, timeout=args.timeout, memory_mb=args.memory_limit,
                    edits=flags.flag_edits(),
                    size_metric=common.size_metric(args))
    bar, on_result = common.progress(2 * len(jobs), f"eval {policy.name}")
    try:
        # on a cluster, no --workers means one per CPU there (not this machine's count)
        workers = common.default_workers(args.workers) if args.cluster is None else args.workers
        with make_executor(args.cluster, workers) as executor:
            report = evaluate(executor, compiler, jobs, policy, spec=spec, on_result=on_result)
    except FeatureMismatchError as exc:
        print(f"mlgo eval: policy {policy.name!r} cannot run on {compiler.path}: {exc}",
              file=sys.stderr)
        return 2
    except (ExecutorError, ValueError) as exc:  # workers that cannot start, a lost cluster
        print(f"mlgo eval: {exc}", file=sys.stderr)
        return 2
    finally:
        bar.close()
    print(format_table(report))
    if args.json:
        try:
            common.write_text_atomic(args.json, json.dumps(report.to_json(), indent=2) + "\n")
        except OSError as exc:
            print(f"mlgo eval: cannot write {args.json}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    return 0 if report.ok_modules else 1


def _say_left_to_clang(policy: object, jobs: list[CompileJob]) -> None:
    """A policy that decides some languages only: how many modules keep clang's own
    decisions (plain -Oz's bytes), so that their 0.00% is not read as the policy's."""
    languages = getattr(policy, "languages", ())
    if not languages:
        return
    left = Counter(lang for lang in (cc1_language(j.cmd) for j in jobs)
                   if lang not in languages)
    if left:
        which = ", ".join(f"{n} {lang}" for lang, n in sorted(left.items()))
        print(f"mlgo eval: {getattr(policy, 'name', 'the policy')} decides "
              f"{', '.join(languages)} modules only: {sum(left.values())} of {len(jobs)} "
              f"({which}) keep clang's own decisions, plain -Oz's bytes", file=sys.stderr)
