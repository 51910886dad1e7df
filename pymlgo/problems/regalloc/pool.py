"""A process-pool `Executor` that runs regalloc compile jobs by calling `compile.execute`.

Stand-in for `pymlgo.workers.LocalPool` until the worker dispatch (`workers/task.py`)
knows the "regalloc" problem; after that both run the same function. Results come back as
they complete; a job whose worker raises propagates the exception, as the protocol says.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import multiprocessing
import os
from collections.abc import Iterator, Sequence

from pymlgo.problems.base import CompileJob, ModuleResult
from pymlgo.toolchain.compiler import Compiler, find_compiler
from pymlgo.workers.protocol import ExecutorBase, StragglerCut, WorkSpec, cut_result


@functools.lru_cache(maxsize=4)
def _compiler(clang: str | None) -> Compiler:
    return find_compiler(clang)


def _run_one(spec: WorkSpec, job: CompileJob) -> ModuleResult:
    from pymlgo.problems.regalloc.compile import execute

    return execute(_compiler(spec.clang), spec, job)


def _forbid_torch() -> None:
    import sys

    sys.modules["torch"] = None  # type: ignore[assignment]  # workers stay torch-free


class RegallocPool(ExecutorBase):
    """`num_workers` processes (default: the cores this process may use)."""

    def __init__(self, num_workers: int | None = None) -> None:
        self._n = num_workers or len(os.sched_getaffinity(0))
        # forkserver: forking a parent that holds threads or big arrays is neither safe nor
        # cheap; workers import pymlgo afresh.
        ctx = multiprocessing.get_context("forkserver")
        self._pool = cf.ProcessPoolExecutor(self._n, mp_context=ctx, initializer=_forbid_torch)

    @property
    def num_workers(self) -> int:
        return self._n

    def run(
        self,
        spec: WorkSpec,
        jobs: Sequence[CompileJob],
        *,
        min_fraction: float | None = None,
        straggler_grace_s: float = 0.0,
    ) -> Iterator[ModuleResult]:
        futures = {self._pool.submit(_run_one, spec, job): job.module for job in jobs}
        cut = StragglerCut(len(futures), min_fraction, straggler_grace_s)
        pending = set(futures)
        try:
            while pending:
                done, pending = cf.wait(pending, timeout=cut.timeout(5.0),
                                        return_when=cf.FIRST_COMPLETED)
                for fut in done:
                    cut.record_done()
                    yield fut.result()
                if cut.expired():
                    for fut in pending:
                        fut.cancel()
                        yield cut_result(futures[fut])
                    pending = set()
        finally:
            for fut in pending:
                fut.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
