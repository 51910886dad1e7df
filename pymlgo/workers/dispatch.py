"""Worker processes serving the jobs of one or more runs: fair dispatch, retries, cuts.

One `Dispatcher` is the engine of both the local pool (one owner, the caller) and the
shared pool server (one owner per attached experiment). It is single-threaded: the
caller's loop waits on `selector` (worker pipes registered with the worker as data) and
hands readable workers to `handle`.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import selectors
import subprocess
import sys
import time
from collections import deque
from collections.abc import Collection, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from pymlgo.problems.base import ModuleResult
from pymlgo.workers import wire
from pymlgo.workers.protocol import DEFAULT_MAX_RETRIES, ExecutorError, lost_result
from pymlgo.workers.scratch import reap, reap_stale, temp_base

HANG_GRACE_S = 60.0  # past the compile timeout, a silent worker is presumed hung
MAX_FAILED_STARTS = 3  # consecutive deaths before "ready": the environment is broken
_EXIT_WAIT_S = 2.0


def default_num_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def worker_env() -> dict[str, str]:
    """The worker sees the caller's import path (a policy class importable here is
    importable there) and runs numpy single-threaded (one compile per core)."""
    env = dict(os.environ)
    paths = [p or os.getcwd() for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    return env


def raise_remote(exc_blob: bytes, tb: str) -> NoReturn:
    """Re-raise an exception a worker's compile code raised, noting where it came from."""
    exc = pickle.loads(exc_blob)
    if hasattr(exc, "add_note"):
        exc.add_note("raised in a compile worker:\n" + tb)
    raise exc


@dataclass(frozen=True)
class Completion:
    """One job finished: a pickled ModuleResult (also for a lost job), or an exception."""

    run_id: int
    index: int
    module: str
    result_blob: bytes | None = None
    raised: tuple[bytes, str] | None = None

    def result(self) -> ModuleResult:
        if self.raised is not None:
            raise_remote(*self.raised)
        assert self.result_blob is not None
        result: ModuleResult = pickle.loads(self.result_blob)
        return result


@dataclass(eq=False)
class _Run:
    id: int
    owner: Hashable
    label: str
    spec_blob: bytes
    timeout: float
    pending: deque[_Task] = field(default_factory=deque)


@dataclass(eq=False)
class _Task:
    run: _Run
    index: int
    module: str
    blob: bytes
    attempts: int = 0
    started: float = 0.0


class WorkerProcess:
    """One `python -m pymlgo.workers.worker`; compiles one job at a time."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pymlgo.workers.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=env,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.pid = self.proc.pid
        self.rfd = self.proc.stdout.fileno()
        self.wfd = self.proc.stdin.fileno()
        self.ready = False
        self.scratch: Path | None = None
        self.temp_base = temp_base(env)
        self.specs: set[int] = set()
        self.task: _Task | None = None
        self.jid = 0

    def send(self, msg: object) -> bool:
        """False if the worker is gone (its death shows on the read side too)."""
        try:
            wire.write_frame(self.wfd, msg)
        except OSError:
            return False
        return True

    def retire(self, *, wait_s: float = 0.0) -> None:
        """Stop the worker (gently if `wait_s`), reap it, and clean what it left behind."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        if wait_s:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=wait_s)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        with contextlib.suppress(OSError):
            self.proc.stdout.close()  # type: ignore[union-attr]
        if self.scratch is not None:
            reap(self.scratch)
        else:  # stopped before it said which dir is its own: reap any whose owner is gone
            reap_stale(self.temp_base)


class Dispatcher:
    """Worker processes plus the pending jobs of every open run.

    Idle workers take jobs round-robin across owners (not FIFO), so one experiment's
    big batch cannot starve another attached to the same pool.
    """

    def __init__(
        self,
        num_workers: int,
        *,
        selector: selectors.BaseSelector | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        hang_grace_s: float = HANG_GRACE_S,
        start_log_size: int = 100_000,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.num_workers = num_workers
        self.max_retries = max_retries
        self.hang_grace_s = hang_grace_s
        self._own_selector = selector is None
        self.selector = selector or selectors.DefaultSelector()
        self._env = worker_env()
        self.workers: list[WorkerProcess] = []
        self._runs: dict[int, _Run] = {}
        self._owners: deque[Hashable] = deque()
        self._next_id = 0
        self._failed_starts = 0
        self._closing = False
        self.starts: deque[tuple[str, str]] = deque(maxlen=start_log_size)
        self.retries = 0
        self.restarts = 0
        for _ in range(num_workers):
            self._spawn()

    # -- runs ---------------------------------------------------------------------------

    def open_run(
        self, spec_blob: bytes, timeout: float, *, owner: Hashable = "local", label: str = ""
    ) -> int:
        self._next_id += 1
        self._runs[self._next_id] = _Run(self._next_id, owner, label, spec_blob, timeout)
        if owner not in self._owners:
            self._owners.append(owner)
        return self._next_id

    def submit(self, run_id: int, index: int, module: str, job_blob: bytes) -> None:
        run = self._runs[run_id]
        run.pending.append(_Task(run, index, module, job_blob))

    def cancel(self, run_id: int, indices: Collection[int] | None = None) -> None:
        """Drop queued jobs of the run (all, or `indices`); kill workers running them."""
        run = self._runs.get(run_id)
        if run is None:
            return
        drop = (lambda t: True) if indices is None else (lambda t: t.index in indices)
        run.pending = deque(t for t in run.pending if not drop(t))
        for w in list(self.workers):
            if w.task is not None and w.task.run is run and drop(w.task):
                w.task = None
                self._remove(w)
                self._spawn()

    def close_run(self, run_id: int) -> None:
        """Cancel what is left of the run and let the workers forget its spec."""
        self.cancel(run_id)
        run = self._runs.pop(run_id, None)
        if run is None:
            return
        for w in self.workers:
            if run_id in w.specs:
                w.specs.discard(run_id)
                w.send(("forget", run_id))
        if not any(r.owner == run.owner for r in self._runs.values()):
            self._owners.remove(run.owner)

    # -- scheduling ---------------------------------------------------------------------

    def _next_task(self) -> _Task | None:
        for _ in range(len(self._owners)):
            owner = self._owners[0]
            self._owners.rotate(-1)
            for run in self._runs.values():
                if run.owner == owner and run.pending:
                    return run.pending.popleft()
        return None

    def dispatch(self) -> None:
        """Give every idle worker a job, owners taking turns."""
        idle = [w for w in self.workers if w.ready and w.task is None]
        while idle:
            task = self._next_task()
            if task is None:
                return
            # prefer a worker that already holds this run's spec
            w = next((w for w in idle if task.run.id in w.specs), idle[0])
            idle.remove(w)
            self._assign(w, task)

    def _assign(self, w: WorkerProcess, task: _Task) -> None:
        run = task.run
        ok = True
        if run.id not in w.specs:
            ok = w.send(("spec", run.id, run.spec_blob))
            w.specs.add(run.id)
        w.jid += 1
        if not (ok and w.send(("job", w.jid, run.id, task.blob))):
            run.pending.appendleft(task)  # the worker was already dead: not the job's fault
            return  # its pipe reports EOF next, and `handle` replaces it
        w.task = task
        task.started = time.monotonic()
        self.starts.append((run.label, task.module))

    # -- events -------------------------------------------------------------------------

    def handle(self, w: WorkerProcess) -> list[Completion]:
        """`w`'s pipe is readable: a frame, or its death."""
        if w not in self.workers:
            return []  # retired earlier in the same batch of events
        try:
            msg = wire.read_frame(w.rfd)
        except (OSError, EOFError, pickle.UnpicklingError):
            msg = None
        if msg is None:
            return self._on_death(w)
        kind = msg[0]
        if kind == "ready":
            w.ready, w.scratch = True, Path(msg[2])
            self._failed_starts = 0
            return []
        task, w.task = w.task, None
        if task is None or msg[1] != w.jid:
            return []  # a job cancelled meanwhile (cannot happen: cancel kills the worker)
        if kind == "done":
            return [Completion(task.run.id, task.index, task.module, result_blob=msg[2])]
        return [Completion(task.run.id, task.index, task.module, raised=(msg[2], msg[3]))]

    def _on_death(self, w: WorkerProcess) -> list[Completion]:
        task, w.task = w.task, None
        self._remove(w)
        out = []
        if not w.ready:
            self._failed_starts += 1
            if self._failed_starts >= MAX_FAILED_STARTS:
                raise ExecutorError(
                    f"compile workers exit before becoming ready ({w.proc.returncode=}); "
                    "see their stderr above"
                )
        if task is not None and task.run.id in self._runs:
            task.attempts += 1
            if task.attempts > self.max_retries:
                blob = wire.dumps(lost_result(task.module, task.attempts))
                out.append(Completion(task.run.id, task.index, task.module, result_blob=blob))
            else:
                self.retries += 1
                task.run.pending.appendleft(task)
        self._spawn()
        self.restarts += 1
        return out

    def check_hung(self) -> list[Completion]:
        """Kill workers silent far past their compile timeout; their jobs count a failure."""
        now = time.monotonic()
        out: list[Completion] = []
        for w in list(self.workers):
            t = w.task
            if t is not None and now - t.started > t.run.timeout + self.hang_grace_s:
                w.proc.kill()
                out += self._on_death(w)
        return out

    def wait(self, timeout: float | None) -> list[Completion]:
        """For a caller with no other fds: wait for worker events, handle them."""
        out: list[Completion] = []
        for key, _ in self.selector.select(timeout):
            if isinstance(key.data, WorkerProcess):
                out += self.handle(key.data)
        return out + self.check_hung()

    # -- workers ------------------------------------------------------------------------

    def _spawn(self) -> None:
        if self._closing:
            return
        w = WorkerProcess(self._env)
        self.selector.register(w.rfd, selectors.EVENT_READ, w)
        self.workers.append(w)

    def _remove(self, w: WorkerProcess) -> None:
        self.workers.remove(w)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(w.rfd)
        w.retire()

    def busy(self) -> dict[int, str]:
        """pid -> module, for the workers compiling right now."""
        return {w.pid: w.task.module for w in self.workers if w.task is not None}

    def worker_pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    def wait_ready(self, timeout: float) -> None:
        """Block until every worker has started (tests and benchmarks measure from here)."""
        deadline = time.monotonic() + timeout
        while not all(w.ready for w in self.workers):
            left = deadline - time.monotonic()
            if left <= 0:
                raise ExecutorError(f"compile workers not ready after {timeout:.0f}s")
            self.wait(min(left, 1.0))  # no run is open: only "ready" frames and deaths

    def close(self) -> None:
        """Workers exit at end of input (after their current job); stragglers are killed."""
        self._closing = True
        workers, self.workers = self.workers, []
        for w in workers:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(w.rfd)
            with contextlib.suppress(OSError):
                w.proc.stdin.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + _EXIT_WAIT_S
        for w in workers:
            w.retire(wait_s=max(0.01, deadline - time.monotonic()) if w.task is None else 0.0)
        if self._own_selector:
            self.selector.close()
