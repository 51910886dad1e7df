"""Plain -Oz sizes per module, cached on disk by (compiler, command, bitcode)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

# One cache root for every pymlgo cache ($MLGO_CACHE_DIR first), re-exported here.
from pymlgo.corpus.demo import cache_root
from pymlgo.problems.base import CompileJob, ModuleResult
from pymlgo.toolchain.compiler import Compiler
from pymlgo.workers.protocol import Executor, WorkSpec, unreadable_result

# What pymlgo itself does between a recorded module and its measured size: the command
# `corpus.command.recompile_args` makes (dropped flags, the forced -Oz), the problems' baseline
# compile flags, and how the object is measured. Bump it whenever any of these changes for
# an unchanged module, or cached baselines measured the old way would be reused.
BASELINE_RECIPE_VERSION = 1


def baseline_key(compiler: Compiler, spec: WorkSpec, job: CompileJob) -> str:
    """Changes whenever the baseline could: pymlgo's recipe, compiler build, problem, flags,
    bitcode."""
    h = hashlib.sha256()
    for part in (f"recipe{BASELINE_RECIPE_VERSION}", compiler.identity, spec.problem,
                 repr(spec.edits), "\0".join(job.cmd)):
        h.update(part.encode())
        h.update(b"\0")
    h.update(job.bitcode)
    return h.hexdigest()


class BaselineCache:
    """One small JSON file per key; writes are atomic so parallel runs can share it."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or cache_root()) / "baselines"

    def get(self, key: str) -> int | None:
        try:
            return int(json.loads((self.root / f"{key}.json").read_text())["size"])
        except (OSError, ValueError, KeyError):
            return None

    def put(self, key: str, size: int) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"size": size}, f)
            os.replace(tmp, self.root / f"{key}.json")
        except BaseException:  # e.g. disk full: leave no temp file behind
            Path(tmp).unlink(missing_ok=True)
            raise


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
        size = cache.get(keys[job.module])
        if size is None:
            missing.append(job)
        else:
            yield ModuleResult(job.module, size, extra={"cached": 1.0})
    if missing:
        for res in executor.run(base_spec, missing):
            if res.ok and res.size is not None:
                cache.put(keys[res.module], res.size)
            yield res


def baseline_sizes(
    executor: Executor,
    jobs: Iterable[CompileJob],
    compiler: Compiler,
    *,
    spec: WorkSpec | None = None,
) -> dict[str, int]:
    """Module -> -Oz .text bytes; modules whose baseline failed are left out."""
    return {
        r.module: r.size
        for r in baseline_results(executor, list(jobs), compiler, spec=spec)
        if r.ok and r.size is not None
    }
