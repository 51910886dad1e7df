"""Traces: compile every module with a policy, record every decision, write training logs.

A trace directory holds, for a corpus and a policy:
- `<module>.log` per traced module (module paths mirrored as folders): LLVM's training-log
  format. Header features = the compiler's features, then the decision as an extra
  feature `inlining_decision`; score `reward` float [1]; every observation is followed by
  an outcome holding the module's final reward `1 - policy_bytes / baseline_bytes`
  (baseline = plain -Oz; bytes by the run's size metric, `toolchain.size`).
- `sizes.csv`: `module,baseline_bytes,policy_bytes,decisions,error`, one row per module.
- `trace.json`: policy, compiler, `size_metric`, counts and totals; `edits` (delete,
  replace, add) when the compiles ran with flag edits, and whatever `metadata` the caller
  adds.

The directory appears only when complete: everything is written into a temporary sibling
that is renamed at the end, so a failed or interrupted run leaves nothing behind.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pymlgo.corpus.command import FlagEdits
from pymlgo.evaluate.baseline import BaselineCache, baseline_results
from pymlgo.problems.base import CompileJob, ModuleResult, Policy, Trajectory
from pymlgo.problems.inlining.problem import INLINING
from pymlgo.protocol.channel import REWARD_SPEC, ChannelSession, Decision, session_to_log
from pymlgo.protocol.log import Header, read_log_columns
from pymlgo.protocol.tensor_spec import C_TYPES, TensorSpec
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.size import DEFAULT_SIZE_METRIC
from pymlgo.workers.protocol import Executor, WorkSpec

TRACE_FORMAT = "pymlgo-trace"
TRACE_VERSION = 1
TRACE_FILE, SIZES_FILE, LOG_SUFFIX = "trace.json", "sizes.csv", ".log"
SIZES_COLUMNS = ("module", "baseline_bytes", "policy_bytes", "decisions", "error")
ADVICE_SPEC = TensorSpec("inlining_decision", "int64_t", (1,))
_C_TYPE_OF = {dtype: name for name, dtype in C_TYPES.items()}


@dataclass(frozen=True)
class TraceRow:
    """One module of a trace: its sizes, decision count, and why it failed, if it did."""

    module: str
    baseline_bytes: int | None
    policy_bytes: int | None
    decisions: int
    error: str | None

    @property
    def reward(self) -> float | None:
        if self.error or self.baseline_bytes is None or self.policy_bytes is None:
            return None
        if self.baseline_bytes == 0:
            # Data-only modules (tables, headers' globals): no code either way, no change.
            return 0.0 if self.policy_bytes == 0 else None
        return 1.0 - self.policy_bytes / self.baseline_bytes


@dataclass(frozen=True)
class TraceSummary:
    directory: Path
    policy: str
    compiler: Mapping[str, str]
    rows: tuple[TraceRow, ...]
    metadata: Mapping[str, Any]
    size_metric: str = DEFAULT_SIZE_METRIC

    @property
    def traced(self) -> tuple[TraceRow, ...]:
        return tuple(r for r in self.rows if r.error is None)

    def to_json(self) -> dict[str, Any]:
        traced = self.traced
        return {
            **dict(self.metadata),
            "format": TRACE_FORMAT,
            "version": TRACE_VERSION,
            "problem": INLINING.name,
            "policy": self.policy,
            "compiler": dict(self.compiler),
            "size_metric": self.size_metric,
            "modules": len(self.rows),
            "traced": len(traced),
            "failed": len(self.rows) - len(traced),
            "decisions": sum(r.decisions for r in traced),
            "baseline_bytes": sum(r.baseline_bytes or 0 for r in traced),
            "policy_bytes": sum(r.policy_bytes or 0 for r in traced),
            "advice": ADVICE_SPEC.to_json(),
            "score": REWARD_SPEC.to_json(),
        }


def module_log_path(root: Path, module: str) -> Path:
    """`root/<module>.log`; refuses names that would escape `root`."""
    # Split by hand: PurePosixPath would quietly normalize "a/./b" and "a//b" to "a/b".
    parts = module.split("/")
    if any(p in ("", ".", "..") or "\0" in p for p in parts):
        raise ValueError(f"module name {module!r} cannot be used as a relative file path")
    return root.joinpath(*parts[:-1], parts[-1] + LOG_SUFFIX)


def _spec_of(name: str, column: np.ndarray) -> TensorSpec:
    """The tensor spec of one recorded feature, from its (n, *shape) array."""
    try:
        type_name = _C_TYPE_OF[column.dtype]
    except KeyError:
        raise ValueError(f"feature {name!r} has dtype {column.dtype}, not a tensor type") from None
    return TensorSpec(name, type_name, tuple(column.shape[1:]))


def trajectory_session(traj: Trajectory, advice: TensorSpec = ADVICE_SPEC) -> ChannelSession:
    """A recorded trajectory as the channel session it came from (header order = the
    compiler's feature order; observation numbers restart in each context, as LLVM's)."""
    names = list(traj.features)
    header = Header(features=tuple(_spec_of(n, traj.features[n]) for n in names), advice=advice)
    cols = [traj.features[n] for n in names]
    adv = np.asarray(traj.advice).astype(advice.dtype, copy=False).reshape(-1, *advice.shape)
    decisions, contexts = [], []
    index, current = 0, None
    for k, ctx in enumerate(traj.contexts):
        if ctx != current:
            contexts.append(ctx)
            index, current = 0, ctx
        decisions.append(Decision(ctx, index, tuple(c[k] for c in cols), adv[k]))
        index += 1
    return ChannelSession(header, tuple(contexts), tuple(decisions))


def trajectory_log_bytes(traj: Trajectory, reward: float) -> bytes:
    out = io.BytesIO()
    session_to_log(trajectory_session(traj), out, outcome=reward)
    return out.getvalue()


def edits_json(edits: FlagEdits) -> dict[str, list[Any]] | None:
    """Flag edits as trace.json records them; None for none."""
    if edits == FlagEdits():
        return None
    return {"delete": list(edits.delete), "replace": [list(p) for p in edits.replace],
            "add": list(edits.add)}


def trace_corpus(
    executor: Executor,
    compiler: Compiler,
    jobs: Sequence[CompileJob],
    policy: Policy,
    output_dir: Path,
    *,
    spec: WorkSpec | None = None,
    overwrite: bool = False,
    cache: BaselineCache | None = None,
    metadata: Mapping[str, Any] | None = None,
    on_result: Callable[[ModuleResult], None] | None = None,
) -> TraceSummary:
    """Trace `policy` on `jobs` into `output_dir` (see the module docstring).

    Baselines come from the on-disk cache or are compiled first. A module whose baseline or
    policy compile fails gets a `sizes.csv` row with its error and no log; the run goes on.
    `FeatureMismatchError` (the policy cannot run on this compiler) aborts the run.
    """
    output_dir = Path(output_dir)
    names = [job.module for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError("duplicate module names in the job list")
    for name in names:
        module_log_path(output_dir, name)  # fail before compiling anything
    if output_dir.exists() and not output_dir.is_dir():
        raise FileExistsError(f"{output_dir} exists and is not a directory")
    if output_dir.exists() and not overwrite and any(output_dir.iterdir()):
        raise FileExistsError(f"{output_dir} exists and is not empty (remove it, or overwrite)")

    base = spec if spec is not None else WorkSpec()
    traced_spec = WorkSpec(
        problem=base.problem,
        clang=base.clang,
        policy=policy,
        record=True,
        timeout=base.timeout,
        edits=base.edits,
        size_metric=base.size_metric,
        options=base.options,  # e.g. an IR2Vec vocabulary: the logs then hold embeddings
    )
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=output_dir.parent, prefix=f".{output_dir.name}.tmp-"))
    try:
        baselines: dict[str, ModuleResult] = {}
        for res in baseline_results(executor, jobs, compiler, spec=base, cache=cache):
            baselines[res.module] = res
            if on_result:
                on_result(res)
        rows: dict[str, TraceRow] = {}
        for res in executor.run(traced_spec, list(jobs)):
            rows[res.module] = _record(tmp, res, baselines.get(res.module))
            if on_result:
                on_result(res)
        ordered = tuple(
            rows.get(n) or TraceRow(n, None, None, 0, "no result") for n in sorted(names)
        )
        recorded = dict(metadata or {})
        if edits_json(base.edits) is not None:
            recorded["edits"] = edits_json(base.edits)  # so a trainer can refuse other flags
        summary = TraceSummary(output_dir, policy.name, compiler.describe(), ordered, recorded,
                               base.size_metric)
        _write_sizes(tmp / SIZES_FILE, ordered)
        (tmp / TRACE_FILE).write_text(
            json.dumps(summary.to_json(), indent=2, sort_keys=True) + "\n"
        )
        _commit(tmp, output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return summary


def _record(root: Path, res: ModuleResult, base: ModuleResult | None) -> TraceRow:
    """Write one module's log (if both compiles worked) and return its row."""
    base_bytes = base.size if base is not None and base.ok else None
    errors = []
    if base is None:
        errors.append("baseline: no result")
    elif not base.ok or base.size is None:
        errors.append(f"baseline: {base.error or 'no size'}")
    if not res.ok or res.size is None:
        errors.append(f"policy: {res.error or 'no size'}")
    elif res.trajectory is None:
        errors.append("policy: no trajectory recorded (the compiler sent no header)")
    elif base_bytes == 0 and res.size:
        errors.append(
            f"baseline has no code but the policy's has {res.size} bytes: no relative reward"
        )
    row = TraceRow(res.module, base_bytes, res.size, res.decisions, "; ".join(errors) or None)
    if row.error is None:
        assert res.trajectory is not None and row.reward is not None
        path = module_log_path(root, res.module)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(trajectory_log_bytes(res.trajectory, row.reward))
    return row


def _write_sizes(path: Path, rows: Sequence[TraceRow]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(SIZES_COLUMNS)
        for r in rows:
            w.writerow(
                [
                    r.module,
                    _blank(r.baseline_bytes),
                    _blank(r.policy_bytes),
                    r.decisions,
                    _blank(r.error),
                ]
            )


def _blank(v: object) -> object:
    return "" if v is None else v


def _commit(tmp: Path, output_dir: Path) -> None:
    """Move the finished trace into place; an old one is only removed once replaced."""
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; a trace directory is meant to be shared
    if not output_dir.exists():
        os.rename(tmp, output_dir)
        return
    old = Path(tempfile.mkdtemp(dir=output_dir.parent, prefix=f".{output_dir.name}.old-"))
    os.rename(output_dir, old / "trace")
    try:
        os.rename(tmp, output_dir)
    except BaseException:
        os.rename(old / "trace", output_dir)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


def read_sizes(directory: Path) -> dict[str, TraceRow]:
    """The rows of a trace's `sizes.csv`, by module."""
    rows = {}
    with open(Path(directory) / SIZES_FILE, newline="") as f:
        for r in csv.DictReader(f):
            rows[r["module"]] = TraceRow(
                r["module"],
                int(r["baseline_bytes"]) if r["baseline_bytes"] else None,
                int(r["policy_bytes"]) if r["policy_bytes"] else None,
                int(r["decisions"] or 0),
                r["error"] or None,
            )
    return rows


def read_trace_log(path: Path) -> tuple[Header, Trajectory, float | None]:
    """One trace log: its header, its trajectory (decisions as `advice`, the other
    features in header order) and its reward (None if it has no outcome record)."""
    log = read_log_columns(Path(path).read_bytes())  # whole-file columns: traces are big
    if log is None:
        raise ValueError(f"{path}: empty file, not a trace log")
    names = [s.name for s in log.header.features]
    if ADVICE_SPEC.name not in names:
        raise ValueError(f"{path}: no {ADVICE_SPEC.name!r} feature: not a trace log")
    columns = dict(log.columns)
    advice = columns.pop(ADVICE_SPEC.name)
    reward: float | None = None
    if log.scores is not None:
        scored = log.scores[~np.isnan(log.scores)]
        reward = float(scored[-1]) if len(scored) else None
    return log.header, Trajectory(log.contexts, columns, advice), reward


def load_traces(directory: Path) -> Iterator[tuple[str, Trajectory, float]]:
    """(module, trajectory, reward) for every log of a trace directory, by module name.

    The reward is the logged outcome; for a module without decisions it comes from
    `sizes.csv` (NaN if that is missing too).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such trace directory")
    sizes = read_sizes(directory) if (directory / SIZES_FILE).is_file() else {}
    logs = {
        p.relative_to(directory).as_posix()[: -len(LOG_SUFFIX)]: p
        for p in directory.rglob(f"*{LOG_SUFFIX}")
        if p.is_file()
    }
    for module in sorted(logs):
        _, traj, reward = read_trace_log(logs[module])
        if reward is None:
            row = sizes.get(module)
            known = row.reward if row is not None else None
            # float32, as logged outcomes are, so a module's reward does not depend on
            # whether it happened to make decisions.
            reward = float(np.float32(known)) if known is not None else float("nan")
        yield module, traj, reward


def trace_columns(directory: Path) -> dict[str, np.ndarray]:
    """Every recorded value of every feature over a trace directory (decision excluded),
    as name -> 1-D array, in the compiler's feature order. All logs must agree on it."""
    names: list[str] | None = None
    parts: dict[str, list[np.ndarray]] = {}
    for module, traj, _ in load_traces(directory):
        these = list(traj.features)
        if names is None:
            names = these
            parts = {n: [] for n in names}
        elif these != names:
            raise ValueError(
                f"{module}: its logs have other features than the first log's; traces from "
                "different compilers cannot be mixed"
            )
        for n in names:
            parts[n].append(np.asarray(traj.features[n]).reshape(-1))
    if names is None:
        raise ValueError(f"{directory}: no trace logs (*{LOG_SUFFIX}) found")
    return {n: np.concatenate(parts[n]) for n in names}
