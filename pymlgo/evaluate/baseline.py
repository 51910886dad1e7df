"""Baseline results per module (the problem's compile with the compiler's own heuristic),
cached on disk by (problem, compiler, command, size metric, bitcode)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

# One cache root for every pymlgo cache ($MLGO_CACHE_DIR first), re-exported here.
from pymlgo.corpus.demo import cache_root
from pymlgo.problems.base import CompileJob, ModuleResult
from pymlgo.toolchain.compiler import Compiler
from pymlgo.toolchain.files import write_atomic
from pymlgo.toolchain.size import ObjectSize
from pymlgo.workers.protocol import Executor, WorkSpec, unreadable_result

# What pymlgo itself does between a recorded module and its measured size: the command
# `corpus.command.recompile_args` makes (dropped flags, the forced -Oz), the problems' baseline
# compile flags, and how the object is measured. Bump it whenever any of these changes for
# an unchanged module, or cached baselines measured the old way would be reused.
# 2: entries hold the object's bytes by section group (`toolchain.size`), keyed by metric.
# 3: entries also hold what the problem keeps of the result's `extra` (`Problem.cache_extra`).
# 4: `-mllvm -lto-embed-bitcode=...` (ThinLTO corpora's backend commands) is dropped.
BASELINE_RECIPE_VERSION = 4


def baseline_key(compiler: Compiler, spec: WorkSpec, job: CompileJob) -> str:
    """Changes whenever the baseline could: pymlgo's recipe, compiler build, problem, size
    metric, flags, bitcode."""
    h = hashlib.sha256()
    for part in (f"recipe{BASELINE_RECIPE_VERSION}", compiler.identity, spec.problem.name,
                 f"metric:{spec.size_metric}", repr(spec.edits), "\0".join(job.cmd)):
        h.update(part.encode())
        h.update(b"\0")
    h.update(job.bitcode)
    return h.hexdigest()


class BaselineCache:
    """One small JSON file per key (the object's bytes by group, and what the problem keeps
    of `extra`); writes are atomic so parallel runs can share it."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or cache_root()) / "baselines"

    def entry(self, key: str) -> tuple[ObjectSize, dict[str, float]] | None:
        try:
            doc = json.loads((self.root / f"{key}.json").read_text())
            extra = {str(k): float(v) for k, v in doc["extra"].items()}
            return ObjectSize.from_json(doc["sizes"]), extra
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def get(self, key: str) -> ObjectSize | None:
        found = self.entry(key)
        return None if found is None else found[0]

    def put(self, key: str, sizes: ObjectSize, extra: Mapping[str, float] | None = None) -> None:
        doc = {"sizes": sizes.to_json(), "extra": dict(extra or {})}
        write_atomic(self.root / f"{key}.json", json.dumps(doc).encode())

    def result(self, key: str, module: str, size_metric: str) -> ModuleResult | None:
        """The cached baseline of `module` as a result (`extra["cached"]` = 1), or None."""
        found = self.entry(key)
        if found is None:
            return None
        sizes, extra = found
        return ModuleResult(module, sizes.metric(size_metric), extra={**extra, "cached": 1.0},
                            sizes=sizes)

    def keep(self, key: str, spec: WorkSpec, res: ModuleResult) -> None:
        """Cache `res` if it succeeded (failures are never cached)."""
        if res.ok and res.sizes is not None:
            self.put(key, res.sizes, spec.problem.cache_extra(res))


def baseline_spec(spec: WorkSpec | None) -> WorkSpec:
    """`spec` compiling the baseline: no policy, nothing recorded."""
    return replace(spec if spec is not None else WorkSpec(), policy=None, record=False)


def baseline_results(
    executor: Executor,
    jobs: Sequence[CompileJob],
    compiler: Compiler,
    *,
    spec: WorkSpec | None = None,
    cache: BaselineCache | None = None,
) -> Iterator[ModuleResult]:
    """Baseline result per job (of `spec.problem`): cached ones first, the rest compiled on
    `executor`. Failures are yielded (with `error`) but never cached; a job whose bitcode
    cannot be read is that module's error."""
    base_spec = baseline_spec(spec)
    cache = cache or BaselineCache()
    keys: dict[str, str] = {}
    missing: list[CompileJob] = []
    for job in jobs:
        try:
            keys[job.module] = baseline_key(compiler, base_spec, job)
        except OSError as exc:  # its file went away since the corpus was loaded
            yield unreadable_result(job, exc)
            continue
        hit = cache.result(keys[job.module], job.module, base_spec.size_metric)
        if hit is None:
            missing.append(job)
        else:
            yield hit
    if missing:
        for res in executor.run(base_spec, missing):
            if res.module in keys:
                cache.keep(keys[res.module], base_spec, res)
            yield res


def baseline_result(compiler: Compiler, spec: WorkSpec, job: CompileJob,
                    cache: BaselineCache | None = None) -> ModuleResult:
    """One module's baseline in this process (the gym envs): cached, else compiled here;
    RuntimeError if it fails."""
    base_spec = baseline_spec(spec)
    cache = cache or BaselineCache()
    key = baseline_key(compiler, base_spec, job)
    res = cache.result(key, job.module, base_spec.size_metric)
    if res is None:
        res = base_spec.problem.compile(compiler, job, None, base_spec.settings)
        if res.size is None:
            raise RuntimeError(f"{base_spec.problem.baseline_label} baseline of {job.module} "
                               f"failed: {res.error}")
        cache.keep(key, base_spec, res)
    return res


def baseline_sizes(
    executor: Executor,
    jobs: Iterable[CompileJob],
    compiler: Compiler,
    *,
    spec: WorkSpec | None = None,
) -> dict[str, int]:
    """Module -> -Oz bytes by `spec.size_metric`; modules whose baseline failed are left
    out."""
    return {
        r.module: r.size
        for r in baseline_results(executor, list(jobs), compiler, spec=spec)
        if r.ok and r.size is not None
    }
