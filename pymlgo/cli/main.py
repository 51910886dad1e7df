"""`mlgo`: the command-line entry point; each subcommand lives in its own module."""

from __future__ import annotations

import argparse
import importlib
import sys

from pymlgo import __version__

# Subcommand modules, each with `register(subparsers)`; order is the --help order.
_COMMANDS = (
    "demo", "corpus", "eval", "trace", "vocab", "train", "pool", "export", "cc", "ir2native",
)
_COMMANDS += ("search",)  # per-module decision search (pymlgo/cli/search.py)
_COMMANDS += ("ir2vec",)  # IR2Vec vocabularies for the inliner (pymlgo/cli/ir2vec.py)
# Handed their arguments untouched, before argparse: compiler arguments look like options.
_COMPILER_TOOLS = ("cc", "c++")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlgo",
        description=(
            "Machine-learning-guided compiler optimization with a stock clang in the loop: "
            "build a corpus, train an inlining-for-size policy, evaluate it against -Oz "
            "in the bytes real objects ship, and ship it."
        ),
    )
    parser.add_argument("--version", action="version", version=f"pymlgo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMANDS:
        importlib.import_module(f"pymlgo.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in _COMPILER_TOOLS:
        from pymlgo.deploy.cc import main as cc_main

        return cc_main(argv[0], argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
