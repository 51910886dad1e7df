"""`mlgo vocab`: per-feature quantile boundaries from a trace, for feature normalization."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pymlgo.evaluate.trace import trace_columns
from pymlgo.ir2vec.vocab_file import EMBEDDING_FEATURES
from pymlgo.policy.vocab import DEFAULT_QUANTILES, build_vocab, save_vocab

VOCAB_FILE = "vocab.json"
# The heuristic's own answer is a label for behaviour cloning, not a model input (as MLGO).
HEURISTIC_FEATURE = "inlining_default"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "vocab",
        help="compute per-feature quantile boundaries from a trace (feature normalization)",
        description=(
            "Read every log of a trace directory (`mlgo trace`) and write OUTPUT_DIR/vocab.json: "
            "for each feature the distinct values among its QUANTILES quantiles. A policy "
            "feeds the network bucket(x)/buckets and its square. The heuristic's decision "
            f"({HEURISTIC_FEATURE}) is left out unless --include-default is given. "
            "Deterministic: the same traces give the same bytes."
        ),
    )
    p.add_argument(
        "--traces",
        type=Path,
        required=True,
        metavar="DIR",
        help="trace directory written by `mlgo trace`",
    )
    p.add_argument(
        "--output_dir",
        "--output-dir",
        dest="output_dir",
        type=Path,
        required=True,
        metavar="DIR",
        help=f"directory for {VOCAB_FILE} (created if needed)",
    )
    p.add_argument(
        "--quantiles",
        type=int,
        default=DEFAULT_QUANTILES,
        metavar="N",
        help=f"quantiles per feature (default: {DEFAULT_QUANTILES})",
    )
    p.add_argument(
        "--include-default",
        action="store_true",
        help=f"also use {HEURISTIC_FEATURE} as a model input",
    )
    p.add_argument(
        "--no-square",
        dest="with_square",
        action="store_false",
        help="feed only the normalized values, not also their squares",
    )
    p.add_argument(
        "--difference",
        dest="differences",
        action="append",
        default=[],
        metavar="A-B",
        help="also feed the difference of two features, with quantiles of its own (repeat "
             "for more); e.g. threshold-cost_estimate, the margin by which clang's cost "
             "estimate clears its threshold",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        columns = trace_columns(args.traces)
        # IR2Vec embeddings (float[dim], traces made with --ir2vec) are not quantile inputs
        names = [n for n in columns if (args.include_default or n != HEURISTIC_FEATURE)
                 and n not in EMBEDDING_FEATURES]
        vocab = build_vocab(
            columns, quantiles=args.quantiles, features=names, with_square=args.with_square,
            differences=args.differences,
        )
        out = args.output_dir / VOCAB_FILE
        save_vocab(vocab, out)
    except (OSError, ValueError, KeyError) as exc:
        print(f"mlgo vocab: {exc.args[0] if isinstance(exc, KeyError) else exc}",
              file=sys.stderr)
        return 2
    samples = len(next(iter(columns.values()))) if columns else 0
    constant = [n for n, b in vocab.scalar_inputs if b.size <= 1]
    derived = f" and {len(vocab.differences)} differences" if vocab.differences else ""
    print(
        f"vocab: {len(vocab.features)} features{derived} from {samples} decisions -> {out} "
        f"(input width {vocab.input_dim})"
    )
    if constant:
        print(f"constant over the traces (no information): {', '.join(constant)}")
    return 0
