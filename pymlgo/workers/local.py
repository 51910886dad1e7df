"""The default executor: worker processes on this machine, one compile each at a time."""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence

from pymlgo.problems.base import CompileJob, ModuleResult
from pymlgo.workers import wire
from pymlgo.workers.dispatch import Dispatcher, default_num_workers
from pymlgo.workers.protocol import (
    DEFAULT_MAX_RETRIES,
    ExecutorBase,
    StragglerCut,
    WorkSpec,
    cut_result,
)

_WAIT_CAP_S = 5.0  # wake up at least this often to look for hung workers


QUEUED_PER_WORKER = 2  # jobs queued per worker at a time (see `_results`)


class LocalPool(ExecutorBase):
    """`num_workers` processes (default: every core this process may use).

    Each `run` ships the WorkSpec (the policy) once to each worker that takes one of its
    jobs; jobs carry only the CompileJob. Workers start at construction and are reused
    across runs.
    """

    def __init__(
        self, num_workers: int | None = None, *, max_retries: int = DEFAULT_MAX_RETRIES
    ) -> None:
        # no start log: only a shared pool reports one, and it would grow with the corpus
        self._dispatcher = Dispatcher(num_workers or default_num_workers(),
                                      max_retries=max_retries, start_log_size=0)
        self._close = weakref.finalize(self, self._dispatcher.close)
        self._running = False

    @property
    def num_workers(self) -> int:
        return self._dispatcher.num_workers

    def worker_pids(self) -> list[int]:
        return self._dispatcher.worker_pids()

    def busy(self) -> dict[int, str]:
        """pid -> module, for the workers compiling right now."""
        return self._dispatcher.busy()

    def stats(self) -> dict[str, int]:
        return {"retries": self._dispatcher.retries, "restarts": self._dispatcher.restarts}

    def wait_ready(self, timeout: float = 60.0) -> None:
        self._dispatcher.wait_ready(timeout)

    def run(
        self,
        spec: WorkSpec,
        jobs: Sequence[CompileJob],
        *,
        min_fraction: float | None = None,
        straggler_grace_s: float = 0.0,
    ) -> Iterator[ModuleResult]:
        if not self._close.alive:
            raise RuntimeError("LocalPool is closed")
        cut = StragglerCut(len(jobs), min_fraction, straggler_grace_s)
        return self._results(wire.dumps(spec), spec.timeout, list(jobs), cut)

    def _results(
        self, spec_blob: bytes, timeout: float, jobs: list[CompileJob], cut: StragglerCut
    ) -> Iterator[ModuleResult]:
        if self._running:
            raise RuntimeError("LocalPool runs one batch at a time; finish the other first")
        self._running = True
        d = self._dispatcher
        run_id = d.open_run(spec_blob, timeout)
        # Jobs are queued a window ahead of the workers, not all at once: the queue (each
        # job pickled, with its bytes if it holds them) stays the same size for any corpus.
        window = QUEUED_PER_WORKER * d.num_workers
        sent = 0
        try:
            left = set(range(len(jobs)))
            while left:
                while sent < len(jobs) and sent - (len(jobs) - len(left)) < window:
                    d.submit(run_id, sent, jobs[sent].module, wire.dumps(jobs[sent]))
                    sent += 1
                d.dispatch()
                for c in d.wait(cut.timeout(_WAIT_CAP_S)):
                    if c.run_id == run_id and c.index in left:
                        left.discard(c.index)
                        result = c.result()
                        cut.record_done()
                        yield result
                if left and cut.expired():
                    d.cancel(run_id, left)
                    for i in sorted(left):
                        yield cut_result(jobs[i].module)
                    left.clear()
        finally:
            d.close_run(run_id)  # cancels whatever a consumer that stopped early left
            self._running = False

    def close(self) -> None:
        self._close()
