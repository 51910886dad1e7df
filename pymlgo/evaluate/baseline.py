"""Plain -Oz sizes per module, cached on disk by (compiler, command, size metric, bitcode)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
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
BASELINE_RECIPE_VERSION = 2


def baseline_key(compiler: Compiler, spec: WorkSpec, job: CompileJob) -> str:
    """Changes whenever the baseline could: pymlgo's recipe, compiler build, problem, size
    metric, flags, bitcode."""
    h = hashlib.sha256()
    for part in (f"recipe{BASELINE_RECIPE_VERSION}", compiler.identity, spec.problem,
                 f"metric:{spec.size_metric}", repr(spec.edits), "\0".join(job.cmd)):
        h.update(part.encode())
        h.update(b"\0")
    h.update(job.bitcode)
    return h.hexdigest()


class BaselineCache:
    """One small JSON file per key; writes are atomic so parallel runs can share it."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or cache_root()) / "baselines"

    def get(self, key: str) -> ObjectSize | None:
        try:
            return ObjectSize.from_json(json.loads((self.root / f"{key}.json").read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, sizes: ObjectSize) -> None:
        write_atomic(self.root / f"{key}.json", json.dumps(sizes.to_json()).encode())


def baseline_results(
    executor: Executor,
    jobs: Sequence[CompileJob],
    compiler: Compiler,
    *,
    spec: WorkSpec | None = None,
    cache: BaselineCache | None = None,
) -> Iterator[ModuleResult]:
    """Baseline result per job: cached ones first, the rest compiled on `executor`.

    Failures are yielded (with `error`) but never cached.
    """
    base_spec = spec if spec is not None else WorkSpec()
    base_spec = replace(base_spec, policy=None, record=False)
    cache = cache or BaselineCache()
    keys: dict[str, str] = {}
    missing: list[CompileJob] = []
    for job in jobs:
        try:
            keys[job.module] = baseline_key(compiler, base_spec, job)
        except OSError as exc:  # its file went away since the corpus was loaded
            yield unreadable_result(job, exc)
            continue
        sizes = cache.get(keys[job.module])
        if sizes is None:
            missing.append(job)
        else:
            yield ModuleResult(job.module, sizes.metric(base_spec.size_metric),
                               extra={"cached": 1.0}, sizes=sizes)
    if missing:
        for res in executor.run(base_spec, missing):
            if res.ok and res.sizes is not None:
                cache.put(keys[res.module], res.sizes)
            yield res


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
