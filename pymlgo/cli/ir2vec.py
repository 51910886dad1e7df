"""`mlgo ir2vec`: IR2Vec vocabularies for clang's ML inliner (learn one, check one)."""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from pymlgo.cli.common import add_corpus_arg, resolve_corpus

DEFAULT_DIM = 64


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ir2vec",
        help="IR2Vec vocabularies: learn one from a corpus, check one for clang",
        description=(
            "Given an IR2Vec vocabulary, clang's ML inliner sends two more features, "
            "callee_embedding and caller_embedding (float[DIM]). `vocab` learns one from a "
            "corpus's own IR; `check` says whether clang can use a vocabulary file."
        ),
    )
    actions = p.add_subparsers(dest="ir2vec_command", metavar="ACTION")
    v = actions.add_parser(
        "vocab",
        help="learn a seed vocabulary from a corpus (TransE on IR triplets)",
        description=(
            "Turn every module of the corpus into text IR with the compiler itself (as "
            "captured and after -Oz), read each instruction's opcode, type, operand kinds "
            "and comparison predicate under the names clang looks up, count (entity, "
            "relation, entity) triplets (next instruction, type, i-th operand, predicate) "
            "and train TransE vectors on them. Writes the JSON clang reads (sections "
            "Opcodes, Types, Arguments) with every entity clang 22 looks up. Deterministic "
            "for a seed."
        ),
    )
    add_corpus_arg(v)
    v.add_argument("--dim", type=int, default=DEFAULT_DIM, metavar="D",
                   help=f"vector dimension (default: {DEFAULT_DIM})")
    v.add_argument("--output", type=Path, required=True, metavar="FILE",
                   help="vocabulary file to write")
    v.add_argument("--seed", type=int, default=0, help="training seed (default: 0)")
    v.add_argument("--steps", type=int, default=None, metavar="N",
                   help="TransE steps of one batch each (default: 2000)")
    v.add_argument("--stages", default="raw,optimized", metavar="LIST",
                   help="IR stages to learn from: raw, optimized or both (default: both)")
    v.add_argument("--clang", metavar="PATH", default=None,
                   help="compiler that emits the IR (default: $MLGO_CLANG, else the bundled)")
    v.set_defaults(func=run_vocab)
    c = actions.add_parser(
        "check",
        help="check a vocabulary file: format, dimension, entities clang looks up",
        description="Read FILE as clang would; report its dimension and the entities clang "
                    "looks up that it lacks (clang embeds those as zeros without a word). "
                    "Exit 1 if clang would refuse it, 0 otherwise.",
    )
    c.add_argument("file", type=Path, metavar="FILE")
    c.set_defaults(func=run_check)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run_vocab(args: argparse.Namespace) -> int:
    from pymlgo.ir2vec.learn import corpus_triplets, learn_vocab
    from pymlgo.ir2vec.module_ir import check_stages
    from pymlgo.ir2vec.transe import TransEConfig
    from pymlgo.ir2vec.vocab_file import save
    from pymlgo.toolchain.compiler import CompilerError, find_compiler

    try:
        stages = check_stages([s.strip() for s in args.stages.split(",") if s.strip()])
        config = TransEConfig(dim=args.dim, seed=args.seed,
                              **({} if args.steps is None else {"steps": args.steps}))
        compiler = find_compiler(args.clang)
        corpus = resolve_corpus(args.corpus)
    except (ValueError, OSError, CompilerError) as exc:
        print(f"mlgo ir2vec vocab: {exc}", file=sys.stderr)
        return 1
    started = time.monotonic()
    data = corpus_triplets(compiler, corpus, stages)
    read_s = time.monotonic() - started
    if not data.counts:
        print(f"mlgo ir2vec vocab: no instructions read from {corpus.root}"
              + (f" ({data.failed[0]})" if data.failed else ""), file=sys.stderr)
        return 1
    learned = learn_vocab(data.counts, config)
    try:
        save(learned.vocab, args.output)
    except OSError as exc:
        print(f"mlgo ir2vec vocab: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"ir2vec vocab: {data.modules} modules, {data.instructions} instructions, "
          f"{len(data.counts)} distinct triplets ({sum(data.counts.values())} in all) read in "
          f"{read_s:.1f}s; TransE dim {config.dim}, {config.steps} steps in "
          f"{learned.seconds:.1f}s, loss {learned.training.losses[0]:.3f} -> "
          f"{learned.training.losses[-1]:.3f} -> {args.output}")
    if learned.unseen:
        print(f"not in this corpus (vectors left at their random start): "
              f"{', '.join(learned.unseen)}")
    for failure in data.failed:
        print(f"skipped: {failure}", file=sys.stderr)
    if data.unknown_lines:
        print(f"warning: {data.unknown_lines} IR lines could not be read", file=sys.stderr)
    return 0


def run_check(args: argparse.Namespace) -> int:
    from pymlgo.ir2vec.vocab_file import MissingEntityWarning, VocabFileError, load, warn_missing

    try:
        vocab = load(args.file)
    except VocabFileError as exc:
        print(f"mlgo ir2vec check: {exc}", file=sys.stderr)
        return 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MissingEntityWarning)
        missing = warn_missing(vocab, str(args.file))
    print(f"{args.file}: dimension {vocab.dim}, "
          f"{sum(len(s) for s in vocab.sections.values())} entities, "
          f"{len(missing)} of those clang 22 looks up missing")
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    return 0
