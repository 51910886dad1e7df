"""Ray backend: compile workers are Ray actors; module bytes travel in the object store.

Each actor (one CPU) holds the run's WorkSpec under a key, like a local worker, and finds
the compiler on its own node (`task.compiler_for`). Jobs go through `ray.put` once per
module, so nodes need no shared filesystem. Ray is optional: `pip install 'pymlgo[ray]'`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymlgo.problems.base import CompileJob, ModuleResult
from pymlgo.workers.dispatch import default_num_workers
from pymlgo.workers.protocol import (
    DEFAULT_MAX_RETRIES,
    ExecutorBase,
    ExecutorError,
    StragglerCut,
    WorkSpec,
    cut_result,
    lost_result,
    unreadable_result,
)

_WAIT_CAP_S = 5.0
_REAP_EVERY_S = 2.0
_RAY_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # 0: single-machine Ray
_JOB_CACHE_BYTES = 2 << 30  # module bytes kept in the object store across runs


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ExecutorError(
            "the Ray backend needs Ray: pip install 'pymlgo[ray]' (ray[default]>=2.9)"
        ) from exc
    return ray


@contextlib.contextmanager
def _loopback_only(ray: Any) -> Iterator[None]:
    """A private instance listens on 127.0.0.1 only, not on the machine's network address
    (where Ray's "remotely reachable" default would put it). Ray reads this switch from its
    constants (the driver) and the environment (the processes it starts)."""
    constants = ray._private.ray_constants
    saved_env = os.environ.get(_RAY_CLUSTER_ENV)
    saved = constants.ENABLE_RAY_CLUSTER
    os.environ[_RAY_CLUSTER_ENV] = "0"
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = saved
        if saved_env is None:
            del os.environ[_RAY_CLUSTER_ENV]
        else:
            os.environ[_RAY_CLUSTER_ENV] = saved_env


def ship_code_env() -> dict[str, Any]:
    """runtime_env that uploads this pymlgo to the cluster: nodes need only its
    dependencies (ziglang, numpy, pyelftools), not the package itself."""
    import pymlgo

    return {"py_modules": [str(Path(pymlgo.__file__).parent)]}


class RayCompileWorker:
    """Actor body: one compile at a time, specs cached by run key."""

    def __init__(self) -> None:
        from pymlgo.workers.scratch import claim_scratch
        from pymlgo.workers.worker import forbid_torch

        forbid_torch()
        self._scratch = claim_scratch()
        self._specs: dict[int, WorkSpec] = {}
        self._reaped = time.monotonic()

    def pid(self) -> int:
        return os.getpid()

    def _reap(self) -> None:
        """An actor killed mid-compile leaves a spinning clang on its node: the actors
        still there clean up, at every run and every few seconds (a glob of one dir)."""
        from pymlgo.workers.scratch import reap_stale

        self._reaped = time.monotonic()
        reap_stale(self._scratch.path.parent)

    def set_spec(self, key: int, spec: WorkSpec) -> None:
        self._reap()
        self._specs[key] = spec

    def forget(self, key: int) -> None:
        self._specs.pop(key, None)

    def compile(self, key: int, job: CompileJob) -> ModuleResult:
        from pymlgo.workers.task import execute

        if time.monotonic() - self._reaped > _REAP_EVERY_S:
            self._reap()
        return execute(self._specs[key], job)


@dataclass(eq=False)
class _Slot:
    actor: Any
    pid_ref: Any
    specs: set[int] = field(default_factory=set)
    busy: int | None = None  # index of the job it compiles


class RayExecutor(ExecutorBase):
    """Compile on a Ray cluster: `address=None` starts a private local Ray instance
    (unless this process is already connected), "ray://HOST:PORT" attaches to a cluster
    through Ray Client (shipping pymlgo's code there unless `runtime_env` says otherwise)."""

    def __init__(
        self,
        address: str | None = None,
        num_workers: int | None = None,
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
        runtime_env: dict[str, Any] | None = None,
    ) -> None:
        ray = self._ray = import_ray()
        self._owns_ray = False
        if not ray.is_initialized():
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no phoning home
            if address is None:
                with _loopback_only(ray):
                        ray.init(
                        address="local",
                        num_cpus=num_workers or default_num_workers(),
                        include_dashboard=False,
                        _node_ip_address="127.0.0.1",
                        logging_level=logging.WARNING,
                        runtime_env=runtime_env,
                    )
            else:
                env = ship_code_env() if runtime_env is None else runtime_env
                ray.init(address=address, runtime_env=env, logging_level=logging.WARNING)
            self._owns_ray = True
        cpus = int(ray.cluster_resources().get("CPU", 0))
        n = num_workers or cpus
        if not 1 <= n <= cpus:
            raise ExecutorError(f"asked for {n} Ray workers; the cluster has {cpus} CPUs")
        self.max_retries = max_retries
        self.retries = 0
        self._actor_cls = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(
            RayCompileWorker
        )
        self._slots = [self._new_slot() for _ in range(n)]
        self._job_refs: dict[tuple[str, int, int, tuple[str, ...]], Any] = {}
        self._job_bytes = 0
        self._keys = 0
        self._jobs: list[CompileJob] = []
        self._closed = False

    @property
    def num_workers(self) -> int:
        return len(self._slots)

    def _new_slot(self) -> _Slot:
        actor = self._actor_cls.remote()
        return _Slot(actor, actor.pid.remote())

    def _replace(self, slot: _Slot) -> None:
        """Kill the slot's actor (it may be compiling) and start a fresh one in its place."""
        self._ray.kill(slot.actor, no_restart=True)
        fresh = self._new_slot()
        slot.actor, slot.pid_ref, slot.specs, slot.busy = fresh.actor, fresh.pid_ref, set(), None

    def worker_pids(self) -> list[int]:
        return [int(p) for p in self._ray.get([s.pid_ref for s in self._slots])]

    def busy(self) -> dict[int, str]:
        """pid -> module, for the actors compiling right now (pids are per node)."""
        busy = [s for s in self._slots if s.busy is not None]
        pids = self._ray.get([s.pid_ref for s in busy])
        return {int(p): self._jobs[s.busy].module for p, s in zip(pids, busy, strict=True)
                if s.busy is not None}

    def stats(self) -> dict[str, int]:
        return {"retries": self.retries}

    def wait_ready(self, timeout: float = 120.0) -> None:
        self._ray.get([s.pid_ref for s in self._slots], timeout=timeout)

    def _job_ref(self, job: CompileJob) -> Any:
        """The job with its bytes, in the object store (actors may be on nodes without the
        corpus). A job that reads its file does so here, one job at a time, and its bytes
        are kept only in the object store's bounded cache."""
        job = job.loaded()
        key = (job.module, len(job.bitcode), hash(job.bitcode), job.cmd)
        ref = self._job_refs.get(key)
        if ref is None:
            if self._job_bytes > _JOB_CACHE_BYTES:
                self._job_refs.clear()
                self._job_bytes = 0
            ref = self._job_refs[key] = self._ray.put(job)
            self._job_bytes += len(job.bitcode)
        return ref

    def run(
        self,
        spec: WorkSpec,
        jobs: Sequence[CompileJob],
        *,
        min_fraction: float | None = None,
        straggler_grace_s: float = 0.0,
    ) -> Iterator[ModuleResult]:
        if self._closed:
            raise RuntimeError("RayExecutor is closed")
        cut = StragglerCut(len(jobs), min_fraction, straggler_grace_s)
        return self._results(spec, list(jobs), cut)

    def _results(
        self, spec: WorkSpec, jobs: list[CompileJob], cut: StragglerCut
    ) -> Iterator[ModuleResult]:
        ray = self._ray
        from ray.exceptions import RayError, RayTaskError

        self._keys += 1
        key = self._keys
        self._jobs = jobs
        spec_ref = ray.put(spec)
        queue = deque(range(len(jobs)))
        attempts = [0] * len(jobs)
        inflight: dict[Any, _Slot] = {}
        left = set(queue)
        try:
            while left:
                for slot in self._slots:
                    while slot.busy is None and queue:
                        i = queue.popleft()
                        try:
                            job_ref = self._job_ref(jobs[i])
                        except OSError as exc:  # the driver cannot read it: nobody can
                            left.discard(i)
                            cut.record_done()
                            yield unreadable_result(jobs[i], exc)
                            continue
                        if key not in slot.specs:
                            slot.actor.set_spec.remote(key, spec_ref)
                            slot.specs.add(key)
                        slot.busy = i
                        inflight[slot.actor.compile.remote(key, job_ref)] = slot
                ready, _ = ray.wait(list(inflight), num_returns=1,
                                    timeout=cut.timeout(_WAIT_CAP_S))
                for ref in ready:
                    slot = inflight.pop(ref)
                    i, slot.busy = slot.busy, None
                    assert i is not None
                    try:
                        result = ray.get(ref)
                    except RayTaskError as exc:  # the compile code raised: not a worker fault
                        raise exc.as_instanceof_cause() from None
                    except RayError:  # actor, its process or its node died
                        self._replace(slot)
                        attempts[i] += 1
                        if attempts[i] <= self.max_retries:
                            self.retries += 1
                            queue.appendleft(i)
                            continue
                        result = lost_result(jobs[i].module, attempts[i])
                    left.discard(i)
                    cut.record_done()
                    yield result
                if left and cut.expired():
                    for slot in inflight.values():
                        self._replace(slot)
                    inflight.clear()
                    for i in sorted(left):
                        yield cut_result(jobs[i].module)
                    left.clear()
        finally:
            for slot in inflight.values():  # a consumer that stopped early
                self._replace(slot)
            for slot in self._slots:
                if key in slot.specs:
                    slot.specs.discard(key)
                    slot.actor.forget.remote(key)
            self._jobs = []

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for slot in self._slots:
            self._ray.kill(slot.actor, no_restart=True)
        self._job_refs.clear()
        if self._owns_ray:
            self._ray.shutdown()
