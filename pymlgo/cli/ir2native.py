"""`mlgo ir2native`: the per-function native-size model (data set, training)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pymlgo.cli import common


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ir2native",
        help="learn a function's native size from its IR after inlining",
        description=(
            "IR2Native: per function, features of the IR right after the inliner (blocks, "
            "instructions by opcode class, calls, memory operations, loops, ...) and its "
            "native size from the object's symbol table; a regression model trained on them "
            "and measured on held-out packages against a line on the instruction count."
        ),
    )
    cmds = p.add_subparsers(dest="ir2native_command", metavar="STEP")

    d = cmds.add_parser(
        "dataset", help="compile a corpus once and write the per-function data set",
        description=(
            "Compile every module at -Oz with -ffunction-sections and -print-after=inline; "
            "pair each function's last post-inlining IR with its symbol size. Functions "
            "deleted after inlining have no size and are left out (counted in the file)."
        ),
    )
    common.add_corpus_arg(d)
    d.add_argument("--output", type=Path, required=True, metavar="FILE",
                   help="data set to write (JSON)")
    d.add_argument("--workers", type=int, default=None, metavar="N",
                   help="compile processes (default: all cores)")
    common.add_compiler_args(d)
    d.set_defaults(func=run_dataset)

    t = cmds.add_parser(
        "train", help="fit the model; report MAE and R2 on held-out packages or modules",
        description=(
            "Measure on held-out packages (leave-one-package-out) or modules (--split "
            "module: seeded folds of modules), or on the --heldout ones only, against the "
            "instruction-count baseline; then fit on everything not held out by --heldout "
            "and write the model."
        ),
    )
    t.add_argument("--dataset", type=Path, required=True, metavar="FILE",
                   help="data set from `mlgo ir2native dataset`")
    t.add_argument("--output", type=Path, default=None, metavar="FILE",
                   help="write the fitted model here (JSON)")
    t.add_argument("--split", choices=("package", "module"), default="package",
                   help="unit held out: whole packages (default) or whole modules")
    t.add_argument("--heldout", default=None, metavar="NAME[,NAME...]",
                   help="packages (or modules, with --split module) to hold out (default: "
                        "each package in turn, or --folds folds of modules)")
    t.add_argument("--folds", type=int, default=5, metavar="K",
                   help="--split module without --heldout: number of module folds "
                        "(default: 5)")
    t.add_argument("--seed", type=int, default=0,
                   help="--split module: seed of the module shuffle (default: 0)")
    t.add_argument("--l2", type=float, default=None,
                   help="ridge penalty of the multiplicative part (default: chosen per fit "
                        "by cross-validation over the training modules)")
    t.add_argument("--json", type=Path, default=None, metavar="OUT",
                   help="also write the evaluation as JSON")
    t.set_defaults(func=run_train)
    p.set_defaults(func=lambda args: _usage(p))


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def run_dataset(args: argparse.Namespace) -> int:
    from pymlgo.evaluate.eval import corpus_jobs
    from pymlgo.ir2native.dataset import build_dataset
    from pymlgo.toolchain.compiler import CompilerError, find_compiler

    try:
        compiler = find_compiler(args.clang)
        corpus = common.resolve_corpus(args.corpus)
        workers = common.default_workers(args.workers)
    except (CompilerError, ValueError, OSError) as exc:
        print(f"mlgo ir2native dataset: {exc}", file=sys.stderr)
        return 2
    jobs = corpus_jobs(corpus)
    bar, _ = common.progress(len(jobs), "ir2native dataset")
    try:
        ds = build_dataset(compiler, jobs, workers=workers, timeout=args.timeout,
                           on_module=lambda _: bar.update(1))
    finally:
        bar.close()
    if not ds.rows:
        print("mlgo ir2native dataset: no function with a native size was found",
              file=sys.stderr)
        return 1
    ds.save(args.output)
    print(f"{len(ds.rows)} functions from {len(jobs) - len(ds.failed_modules)} modules -> "
          f"{args.output} ({ds.ir_only} deleted after inlining left out"
          + (f"; {len(ds.failed_modules)} module(s) failed: "
             f"{', '.join(ds.failed_modules[:5])}" if ds.failed_modules else "") + ")")
    return 0


def run_train(args: argparse.Namespace) -> int:
    from pymlgo.ir2native.dataset import load_dataset
    from pymlgo.ir2native.train import evaluate_heldout, fit, format_evaluation

    heldout = None if args.heldout is None else [p for p in args.heldout.split(",") if p]
    try:
        ds = load_dataset(args.dataset)
        packages = sorted({r.package for r in ds.rows})
        if heldout is None and args.split == "package" and len(packages) < 2:
            raise ValueError(f"held-out evaluation needs at least two packages; the data set "
                             f"has {', '.join(packages) or 'none'}")
        ev = evaluate_heldout(ds, None if heldout is None else [heldout], l2=args.l2,
                              split=args.split, folds=args.folds, seed=args.seed)
        excluded = heldout or ()
        model = fit(ds, l2=args.l2,
                    exclude_packages=excluded if args.split == "package" else (),
                    exclude_modules=excluded if args.split == "module" else ())
    except ValueError as exc:
        print(f"mlgo ir2native train: {exc}", file=sys.stderr)
        return 2
    print(format_evaluation(ev))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(ev.to_json(), indent=2) + "\n")
    if args.output:
        model.save(args.output)
        print(f"model -> {args.output}")
    return 0
