"""Execute one compile job in the current process: dispatch on the problem."""

from __future__ import annotations

import functools

from pymlgo.problems.base import CompileJob, ModuleResult
from pymlgo.toolchain.compiler import Compiler, find_compiler
from pymlgo.workers.protocol import WorkSpec, unreadable_result

PROBLEMS = ("inlining", "regalloc")


@functools.lru_cache(maxsize=8)
def compiler_for(clang: str | None) -> Compiler:
    """Resolve once per worker process: each node finds its own bundled compiler."""
    return find_compiler(clang)


def execute(spec: WorkSpec, job: CompileJob) -> ModuleResult:
    try:
        job = job.loaded()  # read once here: the compile path may look at the bytes twice
    except OSError as exc:
        return unreadable_result(job, exc)
    compiler = compiler_for(spec.clang)
    if spec.problem == "inlining":
        from pymlgo.problems.inlining import compile as inl

        if spec.policy is None:
            return inl.compile_baseline(compiler, job, timeout=spec.timeout, edits=spec.edits,
                                        memory_mb=spec.memory_mb, estimator=spec.estimator,
                                        size_metric=spec.size_metric)
        return inl.compile_with_policy(
            compiler, job, spec.policy, timeout=spec.timeout, record=spec.record,
            edits=spec.edits, memory_mb=spec.memory_mb, estimator=spec.estimator,
            size_metric=spec.size_metric,
        )
    if spec.problem == "regalloc":
        from pymlgo.problems.regalloc import compile as ra

        return ra.execute(compiler, spec, job)
    raise ValueError(f"unknown problem {spec.problem!r}: expected one of {', '.join(PROBLEMS)}")
