"""Traces: compile every module with a policy, record every decision, write training logs.

A trace directory holds, for a corpus, a problem and a policy:
- `<module>.log` per traced module (module paths mirrored as folders): LLVM's training-log
  format. Header features = the compiler's features, then the decision as an extra
  feature (the problem's `trace_advice`: inlining `inlining_decision`, regalloc
  `index_to_evict` or `priority`); score `reward` float [1]; every observation is followed
  by an outcome holding the module's final reward, the problem's `reward` against its
  baseline (inlining: `1 - policy_bytes / baseline_bytes`, baseline = plain -Oz, bytes by
  the run's size metric, `toolchain.size`; regalloc: the relative weighted spill/reload/copy
  cost vs the stock advisor, negated).
- `sizes.csv`: `module,baseline_bytes,policy_bytes,decisions,error`, one row per module,
  then `baseline_FIELD,policy_FIELD` for each measure of the problem beyond bytes
  (`Problem.measures`; regalloc: `cost`).
- `trace.json`: problem, policy, compiler, `size_metric`, counts and totals; `edits`
  (delete, replace, add) when the compiles ran with flag edits, and whatever `metadata` the
  caller adds.

The directory appears only when complete. Until then the run works in `OUTPUT_DIR.partial/`
(`trace_partial`): each module's log is written as its result arrives and journaled, so a
stopped run resumes where it stopped, and the finished directory is the same, byte for
byte, as an uninterrupted run's. It is renamed into place at the end.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pymlgo.corpus.command import FlagEdits
from pymlgo.evaluate.baseline import BaselineCache, baseline_key, baseline_results, baseline_spec
from pymlgo.evaluate.trace_partial import PartialTrace, trace_identity
from pymlgo.problems import registry
from pymlgo.problems.base import CompileJob, ModuleResult, Policy, Problem, Trajectory
from pymlgo.protocol.channel import REWARD_SPEC, ChannelSession, Decision, session_to_log
from pymlgo.protocol.log import Header, read_log_columns
from pymlgo.protocol.tensor_spec import C_TYPES, TensorSpec
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.files import write_atomic
from pymlgo.toolchain.size import DEFAULT_SIZE_METRIC
from pymlgo.workers.protocol import Executor, WorkSpec

TRACE_FORMAT = "pymlgo-trace"
TRACE_VERSION = 1
TRACE_FILE, SIZES_FILE, LOG_SUFFIX = "trace.json", "sizes.csv", ".log"
SIZES_COLUMNS = ("module", "baseline_bytes", "policy_bytes", "decisions", "error")
ADVICE_SPEC = registry.DEFAULT.trace_advice  # the decision column of the default problem
_C_TYPE_OF = {dtype: name for name, dtype in C_TYPES.items()}


@dataclass(frozen=True)
class TraceRow:
    """One module of a trace: its sizes, decision count, and why it failed, if it did;
    `baseline_extra` / `policy_extra` hold the problem's measures beyond bytes (by
    `Measure.key`), as far as known."""

    module: str
    baseline_bytes: int | None
    policy_bytes: int | None
    decisions: int
    error: str | None
    baseline_extra: Mapping[str, float] = field(default_factory=dict)
    policy_extra: Mapping[str, float] = field(default_factory=dict)

    @property
    def reward(self) -> float | None:
        """1 - policy_bytes / baseline_bytes (a byte reward, whatever the problem)."""
        if self.error or self.baseline_bytes is None or self.policy_bytes is None:
            return None
        if self.baseline_bytes == 0:
            # Data-only modules (tables, headers' globals): no code either way, no change.
            return 0.0 if self.policy_bytes == 0 else None
        return 1.0 - self.policy_bytes / self.baseline_bytes

    def reward_of(self, problem: Problem) -> float | None:
        """`problem`'s reward of this row (None if it failed or a measure is missing)."""
        if self.error or self.baseline_bytes is None or self.policy_bytes is None:
            return None
        if any(m.key not in self.baseline_extra or m.key not in self.policy_extra
               for m in problem.measures):
            return None
        try:
            return problem.reward(
                ModuleResult(self.module, self.baseline_bytes, extra=self.baseline_extra),
                ModuleResult(self.module, self.policy_bytes, extra=self.policy_extra))
        except (KeyError, ValueError, ZeroDivisionError):
            return None


@dataclass(frozen=True)
class TraceSummary:
    directory: Path
    policy: str
    compiler: Mapping[str, str]
    rows: tuple[TraceRow, ...]
    metadata: Mapping[str, Any]
    size_metric: str = DEFAULT_SIZE_METRIC
    resumed: int = 0  # modules a stopped run had traced (not in trace.json: same bytes)
    problem: Problem = registry.DEFAULT

    @property
    def traced(self) -> tuple[TraceRow, ...]:
        return tuple(r for r in self.rows if r.error is None)

    def to_json(self) -> dict[str, Any]:
        traced = self.traced
        return {
            **dict(self.metadata),
            "format": TRACE_FORMAT,
            "version": TRACE_VERSION,
            "problem": self.problem.name,
            "policy": self.policy,
            "compiler": dict(self.compiler),
            "size_metric": self.size_metric,
            "modules": len(self.rows),
            "traced": len(traced),
            "failed": len(self.rows) - len(traced),
            "decisions": sum(r.decisions for r in traced),
            "baseline_bytes": sum(r.baseline_bytes or 0 for r in traced),
            "policy_bytes": sum(r.policy_bytes or 0 for r in traced),
            "advice": self.problem.trace_advice.to_json(),
            "score": REWARD_SPEC.to_json(),
            **measure_totals(self.problem, traced),
        }


def measure_totals(problem: Problem, rows: Sequence[TraceRow]) -> dict[str, float]:
    """`baseline_FIELD` and `policy_FIELD` summed over `rows` for each of the problem's
    measures beyond bytes (none for inlining)."""
    out: dict[str, float] = {}
    for m in problem.measures:
        out[f"baseline_{m.field}"] = sum(r.baseline_extra.get(m.key, 0.0) for r in rows)
        out[f"policy_{m.field}"] = sum(r.policy_extra.get(m.key, 0.0) for r in rows)
    return out


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


def trajectory_log_bytes(traj: Trajectory, reward: float,
                         advice: TensorSpec = ADVICE_SPEC) -> bytes:
    out = io.BytesIO()
    session_to_log(trajectory_session(traj, advice), out, outcome=reward)
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
    progress: bool = False,
) -> TraceSummary:
    """Trace `policy` on `jobs` into `output_dir` (see the module docstring).

    Resumable: modules are traced into `OUTPUT_DIR.partial/` and journaled one by one; a
    run stopped anywhere is resumed by the same call, which compiles only the modules not
    yet traced without error (failed ones get another chance) and ends with the bytes an
    uninterrupted run writes. A partial directory of another policy, compiler, size
    metric, flag edits or problem options is refused (`PartialTraceError`).

    The problem is `spec.problem`; a policy it cannot trace (`check_trace_policy`: the
    stock register-allocation advisors never answer the channel) is a ValueError before
    anything is compiled. Baselines come from the on-disk cache or are compiled first. When
    `policy` is clang's own through the channel (`Problem.reproduces_baseline`: inlining's
    `default`), its compile is the baseline to the byte, so a module's traced object is its
    baseline (and goes into the cache); a cached baseline that differs raises
    `HeuristicBaselineError`. A module whose baseline or policy compile
    fails gets a `sizes.csv` row with its error and no log; the run goes on.
    `FeatureMismatchError` (the policy cannot run on this compiler) aborts the run.
    `progress` shows a bar on stderr: modules traced (resumed ones included) and failures.
    """
    output_dir = Path(output_dir)
    base = spec if spec is not None else WorkSpec()
    problem = base.problem
    if not problem.traces:
        raise ValueError(f"problem {problem.name!r} has no traces")
    problem.check_trace_policy(policy)
    names = [job.module for job in jobs]
    if len(set(names)) != len(names):
        raise ValueError("duplicate module names in the job list")
    for name in names:
        module_log_path(output_dir, name)  # fail before compiling anything
    if output_dir.exists() and not output_dir.is_dir():
        raise FileExistsError(f"{output_dir} exists and is not a directory")
    if output_dir.exists() and not overwrite and any(output_dir.iterdir()):
        raise FileExistsError(f"{output_dir} exists and is not empty (remove it, or overwrite)")

    traced_spec = replace(base, policy=policy, record=True)  # options too: e.g. IR2Vec
    cache = cache or BaselineCache()
    identity = trace_identity(compiler, policy, base, edits_json(base.edits))
    with PartialTrace(output_dir, identity) as partial:
        try:
            rows, resumed = _trace_into(partial, executor, compiler, jobs, policy, base,
                                        traced_spec, cache, progress)
        except BaseException:
            if partial.empty:  # nothing worth resuming: leave nothing behind
                partial.remove()
            raise
        ordered = tuple(rows.get(n) or TraceRow(n, None, None, 0, "no result")
                        for n in sorted(names))
        recorded = dict(metadata or {})
        if edits_json(base.edits) is not None:
            recorded["edits"] = edits_json(base.edits)  # so a trainer can refuse other flags
        summary = TraceSummary(output_dir, policy.name, compiler.describe(), ordered, recorded,
                               base.size_metric, resumed, problem)
        content = partial.content
        _keep_only_logs(content, {r.module for r in ordered if r.error is None})
        _write_sizes(content / SIZES_FILE, ordered, problem)
        (content / TRACE_FILE).write_text(
            json.dumps(summary.to_json(), indent=2, sort_keys=True) + "\n"
        )
        _commit(content, output_dir)
        partial.remove()
    return summary


class HeuristicBaselineError(RuntimeError):
    """clang's heuristic through the channel gave another object than the plain baseline
    compile: the invariant the heuristic trace's baselines rest on is broken."""


def _trace_into(
    partial: PartialTrace,
    executor: Executor,
    compiler: Compiler,
    jobs: Sequence[CompileJob],
    policy: Policy,
    base: WorkSpec,
    traced_spec: WorkSpec,
    cache: BaselineCache,
    progress: bool,
) -> tuple[dict[str, TraceRow], int]:
    """Trace the modules `partial` has not finished: every module's row, by name, and how
    many of them the journal had."""
    rows: dict[str, TraceRow] = {}
    digests: dict[str, str] = {}
    for job in jobs:
        # A file gone since the corpus was loaded has no digest: its compiles report it.
        with contextlib.suppress(OSError):
            digests[job.module] = job.input_digest()
    journal = partial.finished()
    todo: list[CompileJob] = []
    for job in jobs:
        entry = journal.get(job.module)
        row = _row_of(entry[1]) if entry is not None else None
        if (entry is not None and row is not None and row.error is None
                and entry[0] == digests.get(job.module)
                and module_log_path(partial.content, job.module).is_file()
                == entry[1].get("log", True)):
            rows[job.module] = row
        else:
            todo.append(job)
    resumed = len(rows)
    bar: Any = None
    failures = 0

    problem = base.problem

    def finish(res: ModuleResult, baseline: ModuleResult | None) -> None:
        nonlocal failures
        row = _record(partial.content, res, baseline, problem)
        rows[row.module] = row
        if row.module in digests:  # an unreadable module is never journaled: retried
            logged = {} if res.trajectory is not None else {"log": False}
            partial.record(row.module, digests[row.module], _row_json(row) | logged)
        if bar is not None:
            if row.error:
                failures += 1
                bar.set_postfix(failed=failures)
            bar.update(1)

    if not todo:
        return rows, resumed
    heuristic = problem.reproduces_baseline(policy)  # clang's own: its object is the baseline
    baselines = {} if heuristic else _baselines(executor, compiler, todo, base, cache, progress)
    try:
        if progress:
            bar = _bar(len(jobs), resumed, f"trace {policy.name}")
        if heuristic:
            _trace_heuristic(executor, compiler, todo, base, traced_spec, cache, finish)
        else:
            for res in executor.run(traced_spec, todo):
                finish(res, baselines.get(res.module))
    finally:
        if bar is not None:
            bar.close()
    return rows, resumed


def _baselines(executor: Executor, compiler: Compiler, jobs: Sequence[CompileJob],
               base: WorkSpec, cache: BaselineCache, progress: bool
               ) -> dict[str, ModuleResult]:
    """Every job's baseline, cached or compiled (on a bar of its own)."""
    bar = _bar(len(jobs), 0, f"{base.problem.baseline_label} baselines") if progress else None
    out: dict[str, ModuleResult] = {}
    try:
        for res in baseline_results(executor, jobs, compiler, spec=base, cache=cache):
            out[res.module] = res
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return out


def _trace_heuristic(
    executor: Executor,
    compiler: Compiler,
    todo: Sequence[CompileJob],
    base: WorkSpec,
    traced_spec: WorkSpec,
    cache: BaselineCache,
    finish: Callable[[ModuleResult, ModuleResult | None], None],
) -> None:
    """clang's own decisions: each traced compile is its module's baseline too.

    Only a traced compile that worked and that the problem says stands for the baseline
    (inlining: not cut short by the ML advisor's size stop) is taken as it; the other
    modules get a baseline compile of their own, as for any policy."""
    base_spec = baseline_spec(base)
    keys: dict[str, str] = {}
    for job in todo:
        with contextlib.suppress(OSError):  # an unreadable module fails both compiles
            keys[job.module] = baseline_key(compiler, base_spec, job)
    by_name = {job.module: job for job in todo}
    pending: dict[str, ModuleResult] = {}
    for res in executor.run(traced_spec, list(todo)):
        key = keys.get(res.module)
        cached = None if key is None else cache.result(key, res.module, base_spec.size_metric)
        if not res.ok or res.sizes is None or not base.problem.stands_for_baseline(res):
            if cached is not None:
                finish(res, cached)
            else:
                pending[res.module] = res
            continue
        if cached is not None and cached.sizes != res.sizes:
            raise HeuristicBaselineError(
                f"{res.module}: clang's heuristic through the channel gave {res.sizes}, "
                f"but plain {base.problem.baseline_label} (cached in {cache.root}) gave "
                f"{cached.sizes}: they must be the same object; check the compiler "
                f"({compiler.path}) and the channel flags")
        baseline = cached
        if baseline is None:
            baseline = ModuleResult(res.module, res.sizes.metric(base_spec.size_metric),
                                    sizes=res.sizes, extra=base.problem.cache_extra(res))
            if key is not None:
                cache.keep(key, base_spec, baseline)
        finish(res, baseline)
    if pending:
        for b in baseline_results(executor, [by_name[m] for m in pending], compiler,
                                  spec=base, cache=cache):
            finish(pending.pop(b.module), b)
    for res in pending.values():  # no baseline result at all
        finish(res, None)


def _bar(total: int, done: int, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=done, desc=desc, unit="mod", file=sys.stderr,
                dynamic_ncols=True)


def _row_json(row: TraceRow) -> dict[str, Any]:
    doc = {"baseline_bytes": row.baseline_bytes, "policy_bytes": row.policy_bytes,
           "decisions": row.decisions, "error": row.error, "module": row.module}
    if row.baseline_extra or row.policy_extra:
        doc |= {"baseline_extra": dict(row.baseline_extra),
                "policy_extra": dict(row.policy_extra)}
    return doc


def _row_of(doc: Mapping[str, Any]) -> TraceRow | None:
    """A journaled row, or None if it is not one."""
    try:
        return TraceRow(str(doc["module"]), _int_or_none(doc["baseline_bytes"]),
                        _int_or_none(doc["policy_bytes"]), int(doc["decisions"]),
                        None if doc["error"] is None else str(doc["error"]),
                        {str(k): float(v) for k, v in doc.get("baseline_extra", {}).items()},
                        {str(k): float(v) for k, v in doc.get("policy_extra", {}).items()})
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


def _keep_only_logs(root: Path, modules: set[str]) -> None:
    """Remove every file but the logs of `modules`: logs of modules no longer in the job
    list, and temp files of writes a kill cut short."""
    keep = {module_log_path(root, m) for m in modules}
    for path in [p for p in root.rglob("*") if not p.is_dir()]:
        if path not in keep:
            path.unlink()
    for d in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
        with contextlib.suppress(OSError):
            d.rmdir()  # only empty ones go


def measured_extra(problem: Problem, res: ModuleResult | None) -> dict[str, float]:
    """The problem's measures beyond bytes that `res` has."""
    if res is None or not res.ok:
        return {}
    return {m.key: float(res.extra[m.key]) for m in problem.measures if m.key in res.extra}


def _record(root: Path, res: ModuleResult, base: ModuleResult | None,
            problem: Problem) -> TraceRow:
    """Write one module's log (if both compiles worked), atomically, and return its row."""
    base_bytes = base.size if base is not None and base.ok else None
    errors = []
    if base is None:
        errors.append("baseline: no result")
    elif not base.ok or base.size is None:
        errors.append(f"baseline: {base.error or 'no size'}")
    if not res.ok or res.size is None:
        errors.append(f"policy: {res.error or 'no size'}")
    elif res.trajectory is None and (problem.always_asks or res.decisions):
        errors.append("policy: no trajectory recorded (the compiler sent no header)")
    elif base_bytes == 0 and res.size:
        errors.append(
            f"baseline has no code but the policy's has {res.size} bytes: no relative reward"
        )
    row = TraceRow(res.module, base_bytes, res.size, res.decisions, "; ".join(errors) or None,
                   measured_extra(problem, base), measured_extra(problem, res))
    reward = row.reward_of(problem)
    if row.error is None and reward is None:
        row = replace(row, error=f"no {problem.name} reward: the baseline or policy compile "
                                 f"lacks {', '.join(m.key for m in problem.measures)}")
    path = module_log_path(root, res.module)
    if row.error is None and res.trajectory is not None:
        assert reward is not None
        write_atomic(path, trajectory_log_bytes(res.trajectory, reward, problem.trace_advice))
    else:  # failed, or the compiler never asked (no header: nothing to log)
        path.unlink(missing_ok=True)  # an earlier attempt's log
    return row


def _measure_columns(problem: Problem) -> list[tuple[str, str, str]]:
    """(column, which side, Measure.key) of the problem's measures in `sizes.csv`."""
    return [(f"{side}_{m.field}", side, m.key) for m in problem.measures
            for side in ("baseline", "policy")]


def _write_sizes(path: Path, rows: Sequence[TraceRow], problem: Problem) -> None:
    extra = _measure_columns(problem)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow([*SIZES_COLUMNS, *(c for c, _, _ in extra)])
        for r in rows:
            w.writerow(
                [
                    r.module,
                    _blank(r.baseline_bytes),
                    _blank(r.policy_bytes),
                    r.decisions,
                    _blank(r.error),
                    *(_blank((r.baseline_extra if side == "baseline" else r.policy_extra)
                             .get(key)) for _, side, key in extra),
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


def trace_problem(directory: Path) -> Problem:
    """The problem a trace directory records (its `trace.json`; the default problem for a
    directory without one, or a trace made before the field was written)."""
    try:
        info = json.loads((Path(directory) / TRACE_FILE).read_text())
    except FileNotFoundError:
        return registry.DEFAULT
    name = info.get("problem") if isinstance(info, dict) else None
    return registry.problem(name) if isinstance(name, str) else registry.DEFAULT


def read_sizes(directory: Path, problem: Problem | None = None) -> dict[str, TraceRow]:
    """The rows of a trace's `sizes.csv`, by module (the measures of `problem`, default:
    the trace's own, in `baseline_extra` / `policy_extra`)."""
    extra = _measure_columns(problem if problem is not None else trace_problem(directory))
    rows = {}
    with open(Path(directory) / SIZES_FILE, newline="") as f:
        for r in csv.DictReader(f):
            sides: dict[str, dict[str, float]] = {"baseline": {}, "policy": {}}
            for column, side, key in extra:
                if r.get(column):
                    sides[side][key] = float(r[column])
            rows[r["module"]] = TraceRow(
                r["module"],
                int(r["baseline_bytes"]) if r["baseline_bytes"] else None,
                int(r["policy_bytes"]) if r["policy_bytes"] else None,
                int(r["decisions"] or 0),
                r["error"] or None,
                sides["baseline"],
                sides["policy"],
            )
    return rows


def read_trace_log(path: Path) -> tuple[Header, Trajectory, float | None]:
    """One trace log: its header, its trajectory (decisions as `advice`, the other
    features in header order) and its reward (None if it has no outcome record). The
    decision is the header's last feature named as some problem's `trace_advice`."""
    log = read_log_columns(Path(path).read_bytes())  # whole-file columns: traces are big
    if log is None:
        raise ValueError(f"{path}: empty file, not a trace log")
    names = [s.name for s in log.header.features]
    decisions = {p.trace_advice.name for p in registry.PROBLEMS if p.traces}
    found = [n for n in names if n in decisions]
    if not found:
        raise ValueError(f"{path}: no decision feature ({', '.join(sorted(decisions))}): "
                         "not a trace log")
    columns = dict(log.columns)
    advice = columns.pop(found[-1])
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
    problem = trace_problem(directory)
    sizes = read_sizes(directory, problem) if (directory / SIZES_FILE).is_file() else {}
    logs = {
        p.relative_to(directory).as_posix()[: -len(LOG_SUFFIX)]: p
        for p in directory.rglob(f"*{LOG_SUFFIX}")
        if p.is_file()
    }
    for module in sorted(logs):
        _, traj, reward = read_trace_log(logs[module])
        if reward is None:
            row = sizes.get(module)
            known = row.reward_of(problem) if row is not None else None
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
