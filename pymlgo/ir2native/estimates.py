"""Per-function size estimates and per-decision callers of one inlining compile.

What partial rewards need from a compile, numpy only (compile workers never import torch):

- which function each inlining decision was made in (its caller). The channel carries no
  function names, but the ML advisor writes one `inline-ml` optimization remark per
  decision, in decision order, with the caller as `Function:` and the decision's features
  as arguments. Measured on the 63 demo modules with clang's and with a random policy:
  the remarks that carry features match the channel's decisions one to one (same order,
  same `cost_estimate`/`callee_users`/`caller_basic_block_count`). `ForceStop` remarks,
  written once the module outgrew the advisor's size limit, carry none and answer no
  decision.
- each function's IR2Native estimate of its native bytes, from the IR the inliner leaves
  (`-print-after=inline`, as the data set uses). A function missing from the object's
  symbol table (inlined everywhere, then deleted) is estimated at 0 bytes.

Neither flag changes the code: the object's .text is the same with and without them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from pymlgo.ir2native.features import module_features
from pymlgo.ir2native.model import IR2NativeModel
from pymlgo.problems.regalloc.remarks import _documents

REMARK_PASS = "inline-ml"
DUMP_FLAGS = ("-mllvm", "-print-after=inline")
# ModuleResult.extra keys: one per function, `FUNCTION_PREFIX + name` -> estimated bytes
FUNCTION_PREFIX = "fn:"
# an argument every decision's remark has (the decision's features are its arguments)
_DECISION_ARG = "Args.callee_users"


def remark_flags(path: Path) -> list[str]:
    """cc1 options writing the ML inliner's remarks as YAML to `path`."""
    return ["-opt-record-file", str(path), "-opt-record-passes", REMARK_PASS]


def decision_callers(remark_lines: Iterable[str]) -> list[str]:
    """The caller of every channel decision, in decision order."""
    return [doc.get("Function", "") for doc in _documents(remark_lines)
            if doc.get("Pass") == REMARK_PASS and _DECISION_ARG in doc]


def read_decision_callers(path: Path) -> list[str]:
    """`decision_callers` of a remark file; no file (no decision was made): none."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return decision_callers(f)
    except FileNotFoundError:
        return []


def function_estimates(model: IR2NativeModel, dump: str | Iterable[str],
                       surviving: Iterable[str]) -> dict[str, float]:
    """Function -> estimated bytes: the model on its last post-inlining IR, 0 when it
    has no symbol in the object (`surviving`)."""
    feats = module_features(dump)
    alive = set(surviving)
    return {name: max(model.predict_one(f), 0.0) if name in alive else 0.0
            for name, f in feats.items()}


def to_extra(estimates: dict[str, float]) -> dict[str, float]:
    return {FUNCTION_PREFIX + name: float(v) for name, v in estimates.items()}


def from_extra(extra: Mapping[str, float]) -> dict[str, float]:
    """The `fn:` estimates of a `ModuleResult.extra` mapping."""
    n = len(FUNCTION_PREFIX)
    return {k[n:]: float(v) for k, v in extra.items() if k.startswith(FUNCTION_PREFIX)}
