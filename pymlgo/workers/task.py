"""Execute one compile job in the current process, as the spec's problem compiles it."""

from __future__ import annotations

import functools

from pymlgo.problems.base import CompileJob, ModuleResult
from pymlgo.toolchain.compiler import Compiler, find_compiler
from pymlgo.workers.protocol import WorkSpec, unreadable_result


@functools.lru_cache(maxsize=8)
def compiler_for(clang: str | None) -> Compiler:
    """Resolve once per worker process: each node finds its own bundled compiler."""
    return find_compiler(clang)


def execute(spec: WorkSpec, job: CompileJob) -> ModuleResult:
    try:
        job = job.loaded()  # read once here: the compile path may look at the bytes twice
    except OSError as exc:
        return unreadable_result(job, exc)
    return spec.problem.compile(compiler_for(spec.clang), job, spec.policy, spec.settings)
