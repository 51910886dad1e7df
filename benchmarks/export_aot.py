"""`mlgo export`'s SavedModel compiled as LLVM's release build compiles it
(`saved_model_cli aot_compile_cpu`, LLVM's flags, TensorFlow's XLA AOT runtime, buffers bound
as ReleaseModeModelRunner binds them), against pymlgo's numpy policy on every call site of a
real trace: decisions, logits and what the compile costs. Policies: `pretrained:inlining-oz`'s
network (without its window) and a random MLP whose output bias splits the trace's call
sites about half and half.

Prints JSON. The trace is `mlgo trace --policy default` of the corpus's modules whose names
start with `--package` (all modules with `--package ''`).

    python benchmarks/export_aot.py [--corpus demo] [--package lz4] [--triple x86_64-pc-linux]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from pymlgo.cli.common import resolve_corpus
from pymlgo.corpus.command import format_cmd
from pymlgo.corpus.demo import cache_root
from pymlgo.corpus.format import Corpus, write_corpus_description
from pymlgo.evaluate.trace import trace_columns
from pymlgo.policy import aot
from pymlgo.policy.inlining import InliningPolicy
from pymlgo.policy.mlp import MLPParams, init_mlp
from pymlgo.policy.store import load_policy
from pymlgo.policy.vocab import build_vocab


def traced_columns(corpus: Corpus, package: str, work: Path) -> dict[str, np.ndarray]:
    modules = [m for m in corpus.modules if m.name.startswith(package)]
    if not modules:
        sys.exit(f"no module of the corpus starts with {package!r}")
    sub = work / "corpus"
    for m in modules:
        dest = sub / m.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{dest}.bc").write_bytes(m.read_bitcode())
        Path(f"{dest}.cmd").write_bytes(format_cmd(m.cmd))
    write_corpus_description(sub, [m.name for m in modules])
    subprocess.run([sys.executable, "-m", "pymlgo.cli.main", "trace", "--corpus", str(sub),
                    "--policy", "default", "--output_dir", str(work / "trace")], check=True,
                   stdout=sys.stderr)  # this benchmark's stdout is its JSON alone
    return trace_columns(work / "trace")


def half_and_half_policy(cols: dict[str, np.ndarray], seed: int = 0) -> InliningPolicy:
    """A random MLP over the trace's own quantile vocab, its output bias moved so that the
    median call site's logit is 1e-3: both answers, many near the boundary. (At exactly 0,
    the call sites sharing the median's features sit on the boundary itself, where float32
    rounding in another summation order decides.)"""
    features = [k for k in cols if k not in ("inlining_default", "inlining_decision")]
    vocab = build_vocab(cols, features=features, quantiles=100)
    params = init_mlp(vocab.input_dim, (40, 40, 20), np.random.default_rng(seed))
    logits = params.forward(vocab.normalize(vocab.matrix(cols)))
    bias = (params.biases[-1] - np.float32(np.median(logits)) + np.float32(1e-3)).astype(
        np.float32)
    return InliningPolicy(vocab=vocab,
                          params=MLPParams(params.weights, (*params.biases[:-1], bias)))


def summary(c: aot.AotComparison) -> dict[str, object]:
    return {
        "call_sites": c.call_sites,
        "inlined": c.inlined,
        "decisions_equal": c.decisions_equal,
        "logit_export_decisions_equal": c.logit_model_decisions_equal,
        "max_abs_logit_diff": c.max_abs_logit_diff,
        "min_abs_logit": c.min_abs_logit,
        "max_abs_logit_where_different": c.max_abs_logit_where_different,
        "aot_compile_cpu_wall_s": round(c.model.seconds, 2),
        "aot_compile_cpu_cpu_s": round(c.model.cpu_seconds, 2),
        "harness_build_wall_s": round(c.harness.seconds, 2),
        "harness_build_cpu_s": round(c.harness.cpu_seconds, 2),
        "runtime_sources_linked": len(c.harness.runtime_sources),
        "objects": [p.name for p in c.model.objects],
        "inputs": len(c.run.args),
        "model_selector": c.run.has_model_selector,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="demo")
    ap.add_argument("--package", default="lz4", help="module name prefix ('' for all)")
    ap.add_argument("--triple", default=aot.DEFAULT_TRIPLE)
    ap.add_argument("--jobs", type=int, default=1, help="runtime compile jobs")
    args = ap.parse_args()
    rt = aot.runtime(cache_root())
    runtime_cached = any(rt.cache.glob("*.o"))
    with tempfile.TemporaryDirectory(prefix="pymlgo-aot-") as tmp:
        work = Path(tmp)
        cols = traced_columns(resolve_corpus(args.corpus), args.package, work)
        out: dict[str, object] = {"corpus": args.corpus, "package": args.package,
                                  "triple": args.triple, "runtime_was_cached": runtime_cached}
        # the shipped network without its window (the window needs clang's own decision,
        # which release mode does not have: export refuses the windowed policy)
        shipped = dataclasses.replace(load_policy("pretrained:inlining-oz"), window="")
        for name, policy in (("pretrained:inlining-oz-network", shipped),
                             ("random", half_and_half_policy(cols))):
            c = aot.compare_with_policy(policy, cols, work / name.replace(":", "-"), rt,
                                        triple=args.triple, jobs=args.jobs)
            out[name] = summary(c)
            out["command"] = list(c.model.command)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
