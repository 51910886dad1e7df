"""Options and resolution steps several subcommands share (compiler, corpus, workers)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from pymlgo.corpus.format import Corpus, load_corpus
from pymlgo.problems.base import ModuleResult

DEMO_CORPUS = "demo"


def add_compiler_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--clang",
        metavar="PATH",
        default=None,
        help="use this clang (>= 17) instead of the bundled zig clang 22; "
        "default: $MLGO_CLANG, else the bundled one",
    )
    p.add_argument(
        "--timeout", type=float, default=300.0, metavar="S",
        help="seconds allowed per module compile (default: 300)",
    )


def add_worker_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workers", type=int, default=None, metavar="N",
        help="compile worker processes (default: all cores)",
    )
    p.add_argument(
        "--cluster", default=None, metavar="SPEC",
        help="where compiles run: omitted = local pool; ray-local; ray://HOST:PORT; pool:NAME "
        "(a shared pool started with `mlgo pool serve`)",
    )


def add_corpus_arg(p: argparse.ArgumentParser, *, required: bool = False) -> None:
    p.add_argument(
        "--corpus", default=None if required else DEMO_CORPUS, required=required, metavar="DIR",
        help="corpus directory with corpus_description.json, or 'demo' for the built-in "
        "demo corpus (zstd, brotli, lz4; downloaded and built once, then cached)"
        + ("" if required else " (default: demo)"),
    )


ALLOW_FLAGS_ENV = "MLGO_ALLOW_FLAGS"


def resolve_corpus(spec: str) -> Corpus:
    """Load the corpus at `spec` (or the demo one). $MLGO_ALLOW_FLAGS (space-separated)
    accepts cc1 flags outside the corpus flag allowlist that the user has checked."""
    allow = os.environ.get(ALLOW_FLAGS_ENV, "").split()
    if spec == DEMO_CORPUS and not Path(spec).exists():
        from pymlgo.corpus.demo import ensure_demo_corpus

        return load_corpus(ensure_demo_corpus(), allow_flags=allow)
    return load_corpus(spec, allow_flags=allow)


def default_workers(requested: int | None) -> int:
    if requested is not None:
        if requested < 1:
            raise SystemExit("mlgo: --workers must be >= 1")
        return requested
    return os.cpu_count() or 1


def progress(total: int, desc: str) -> tuple[tqdm, Callable[[ModuleResult], None]]:
    """A progress bar and a callback that advances it, counting failures."""
    bar = tqdm(total=total, desc=desc, unit="mod", file=sys.stderr, dynamic_ncols=True)
    failures = 0

    def on_result(res: ModuleResult) -> None:
        nonlocal failures
        if res.error:
            failures += 1
            bar.set_postfix(failed=failures)
        bar.update(1)

    return bar, on_result
