"""`mlgo cc` / `mlgo c++`: the drop-in compiler (dispatched in `main` before argparse)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    # Listed for `mlgo --help` only: `main` hands `mlgo cc ARGS...` to the compiler wrapper
    # before argparse sees it, because compiler arguments look like options.
    for tool, lang, var in (("cc", "C", "CC"), ("c++", "C++", "CXX")):
        p = sub.add_parser(
            tool,
            help=f"drop-in {lang} compiler ({var}=\"mlgo {tool}\" make): a policy answers "
            "the inliner at -Oz/-Os (see `mlgo cc --help`)",
            add_help=False,
        )
        p.add_argument("args", nargs=argparse.REMAINDER)
        p.set_defaults(func=_run, tool=tool)


def _run(args: argparse.Namespace) -> int:
    from pymlgo.deploy.cc import main

    return main(args.tool, args.args)
