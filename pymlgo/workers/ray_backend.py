"""Ray backend: compile workers are Ray actors; module bytes travel in the object store.

Each actor (one CPU) holds the run's WorkSpec under a key, like a local worker, and finds
the compiler on its own node (`task.compiler_for`). Jobs go through `ray.put` once per
module, so nodes need no shared filesystem. Ray is optional: `pip install 'pymlgo[ray]'`.

Hosts come and go: a job whose actor (or its whole host) dies runs again on another
actor; an actor is given jobs only once it has started, so a replacement waiting for a
free CPU holds none back. Without a fixed number of workers the executor follows the
cluster: a host that joins gets actors, and with them jobs. Losing the connection to the
cluster (its head) is an ExecutorError, not a hang. Attaching through Ray Client is tried
again when the head fails to start the driver's own server (`attach`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
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
_GROW_EVERY_S = 2.0  # how often an elastic executor looks for CPUs that joined
# no actor able to take a job for this long (every host lost, none joining): give up
NO_WORKER_TIMEOUT_S = 600.0
_MAX_FAILED_STARTS = 3  # per worker, in a row: the cluster cannot run our actors
_RAY_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # 0: single-machine Ray
_JOB_CACHE_BYTES = 2 << 30  # module bytes kept in the object store across runs
ATTACH_ATTEMPTS = 3  # Ray Client attaches, when the head fails to start our server
_ATTACH_PAUSE_S = 5.0
_SERVER_INIT_FAILURE = "Initialization failure from server"  # Ray Client's text for it
# Ray Client (2.60) drops a connection its head failed to set up by joining its log thread
# first and closing the gRPC channel after: the log stream ends only when the channel
# closes, so the join waits forever (seen right after a head restart). A client closed but
# still connecting this long has its channel closed for it.
STUCK_CLOSE_GRACE_S = 20.0
# What a busy head's environment needs for Ray Client. Its proxy starts a server process
# per driver and waits 30 s (Ray's default) for it to listen; on a loaded 2-core machine
# that start took 34 s to minutes. Meanwhile the proxy's gRPC channel backs off (up to
# 2 min between tries), and a server that sees no driver for 30 s (Ray's default) exits:
# started late, it was gone before the proxy's next try, which then waited in vain.
BUSY_HEAD_ENV = {
    "RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S": "600",
    "TIMEOUT_FOR_SPECIFIC_SERVER_S": "300",
}


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


def head_start_failure(exc: ConnectionError) -> str | None:
    """The head's reason when its Ray Client server failed to start this driver's own
    server (the last line of the traceback it sends back); None for any other failure to
    connect (no head at that address, a network in the way)."""
    text = str(exc)
    if not isinstance(exc, ConnectionAbortedError) or _SERVER_INIT_FAILURE not in text:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1]


def busy_head_settings() -> str:
    """`BUSY_HEAD_ENV` as shell assignments, for messages."""
    return " ".join(f"{k}={v}" for k, v in BUSY_HEAD_ENV.items())


def attach(
    connect: Callable[[], object],
    disconnect: Callable[[], object],
    address: str,
    *,
    attempts: int = ATTACH_ATTEMPTS,
    pause_s: float = _ATTACH_PAUSE_S,
) -> None:
    """`connect()` to a cluster through Ray Client, again (after `disconnect()`) when its
    head failed to start this driver's server: each try starts a new one, and a start can
    lose a race inside Ray's proxy on a busy head. ExecutorError when it cannot attach,
    naming the head's setting that a head too busy to start one in time needs."""
    for attempt in range(1, attempts + 1):
        try:
            connect_unstuck(connect, client_worker=_client_worker)
            return
        except ConnectionError as exc:
            reason = head_start_failure(exc)
            with contextlib.suppress(Exception):  # drop the half-made client connection
                disconnect()
            if reason is None:
                raise ExecutorError(f"cannot attach to the Ray cluster at {address}: "
                                    f"{exc}") from exc
            if attempt == attempts:
                raise ExecutorError(
                    f"cannot attach to the Ray cluster at {address}: its head failed "
                    f"{attempts} times to start this driver's Ray Client server ({reason}). "
                    "A busy head takes longer to start one than Ray waits by default: "
                    f"start the head with {busy_head_settings()} in its environment. Its "
                    "logs/ray_client_server*.err (in the head's Ray session directory) "
                    "say more") from exc
            time.sleep(pause_s * attempt)


def _client_worker() -> object | None:
    """Ray Client's connection object of the default context, if one is being made."""
    from ray.util.client import ray as client

    return getattr(client.get_context(), "client_worker", None)


def connect_unstuck(
    connect: Callable[[], object],
    *,
    client_worker: Callable[[], object | None],
    grace_s: float = STUCK_CLOSE_GRACE_S,
    poll_s: float = 0.5,
) -> None:
    """`connect()`, run in a thread while this one watches the client it makes: once that
    client has been closed (a failed attempt being dropped) and `connect` has still not
    returned after `grace_s`, its channel is closed, which ends the log stream Ray waits
    on; `connect`'s own error then comes through (see STUCK_CLOSE_GRACE_S)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            connect()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=run, name="ray-client-connect", daemon=True)
    thread.start()
    closed_since: float | None = None
    while thread.is_alive():
        thread.join(poll_s)
        worker = client_worker()
        if worker is None or not getattr(worker, "closed", False):
            closed_since = None
            continue
        closed_since = closed_since if closed_since is not None else time.monotonic()
        channel = getattr(worker, "channel", None)
        if time.monotonic() - closed_since > grace_s and channel is not None:
            channel.close()
    if errors:
        raise errors[0]


def ship_code_env() -> dict[str, Any]:
    """runtime_env that uploads this pymlgo to the cluster: nodes need only its
    dependencies (ziglang, numpy, pyelftools), not the package itself."""
    import pymlgo

    return {"py_modules": [str(Path(pymlgo.__file__).parent)]}


def _client_connected() -> bool:
    """Whether this process is attached to a cluster through Ray Client, and still is."""
    from ray.util.client import ray as client

    return bool(client.is_connected())


def lost_cluster_message(address: str, exc: BaseException) -> str:
    """One line: the cause's first line (gRPC errors run over many lines, which would push
    the advice out of sight) and what to do."""
    lines = str(exc).strip().splitlines()
    cause = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return (f"lost the Ray cluster at {address} ({cause}). Unfinished compiles of this batch "
            "are not reported; a training run resumes from its last checkpoint when rerun "
            "(against this cluster once back, or another)")


class RayCompileWorker:
    """Actor body: one compile at a time, specs cached by run key."""

    def __init__(self) -> None:
        from pymlgo.workers.scratch import claim_scratch
        from pymlgo.workers.worker import forbid_torch

        forbid_torch()
        self._scratch = claim_scratch()
        self._specs: dict[int, WorkSpec] = {}
        self._reaped = time.monotonic()

    def where(self) -> tuple[int, str]:
        """(pid, address of its host): where this actor runs."""
        import ray

        return os.getpid(), ray.util.get_node_ip_address()

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
    where_ref: Any  # (pid, host) once the actor has started
    specs: set[int] = field(default_factory=set)
    busy: int | None = None  # index of the job it compiles
    host: str | None = None  # set when started: only then does it take jobs


class RayExecutor(ExecutorBase):
    """Compile on a Ray cluster: `address=None` starts a private local Ray instance
    (unless this process is already connected), "ray://HOST:PORT" attaches to a cluster
    through Ray Client (shipping pymlgo's code there unless `runtime_env` says otherwise).

    `num_workers=None`: one actor per CPU of the cluster, following it as hosts join;
    a number: that many actors, replaced when lost (a replacement waits for a free CPU).
    """

    def __init__(
        self,
        address: str | None = None,
        num_workers: int | None = None,
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
        runtime_env: dict[str, Any] | None = None,
        no_worker_timeout_s: float = NO_WORKER_TIMEOUT_S,
    ) -> None:
        ray = self._ray = import_ray()
        self._owns_ray = False
        self.address = address or "ray-local"
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
                attach(lambda: ray.init(address=address, runtime_env=env,
                                        logging_level=logging.WARNING),
                       ray.shutdown, address)
            self._owns_ray = True
        self._through_client = _client_connected()  # else Ray runs in this process
        cpus = self._cluster_cpus()
        n = num_workers or cpus
        if not 1 <= n <= cpus:
            raise ExecutorError(f"asked for {n} Ray workers; the cluster has {cpus} CPUs")
        self.max_retries = max_retries
        self.no_worker_timeout_s = no_worker_timeout_s
        self.retries = 0
        self._elastic = num_workers is None
        self._grown = time.monotonic()
        self._actor_cls = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(
            RayCompileWorker
        )
        self._slots = [self._new_slot() for _ in range(n)]
        self._job_refs: dict[tuple[str, int, int, tuple[str, ...]], Any] = {}
        self._job_bytes = 0
        self._keys = 0
        self._jobs: list[CompileJob] = []
        self._closed = False
        self._lost = False  # the connection to the cluster is gone
        self._failed_starts = 0
        self.compiles_by_host: Counter[str] = Counter()

    @property
    def num_workers(self) -> int:
        return len(self._slots)

    def _cluster_cpus(self) -> int:
        return int(self._ray.cluster_resources().get("CPU", 0))

    def _new_slot(self) -> _Slot:
        actor = self._actor_cls.remote()
        return _Slot(actor, actor.where.remote())

    def _client_dropped(self) -> bool:
        """Attached through Ray Client, and the client has dropped. Ray's own background
        thread that releases objects can be what drops it, at any moment once the head is
        gone; from then on every ray.* call is the non-client API, which rejects the
        client's handles and may even start a Ray of its own on this machine (so neither
        its errors nor `ray.is_initialized()` tell what happened)."""
        return self._through_client and not _client_connected()

    def _check_client(self) -> None:
        if self._client_dropped():
            raise ConnectionError("the Ray Client has dropped its connection")

    def _kill(self, actor: Any) -> None:
        self._check_client()
        self._ray.kill(actor, no_restart=True)

    def _replace(self, slot: _Slot) -> None:
        """Kill the slot's actor (it may be compiling) and start a fresh one in its place."""
        self._kill(slot.actor)
        fresh = self._new_slot()
        slot.actor, slot.where_ref, slot.specs, slot.busy, slot.host = (
            fresh.actor, fresh.where_ref, set(), None, None)

    def _grow(self) -> None:
        """Elastic: one actor per cluster CPU, so a host that joined gets some (actors
        waiting for a CPU count too: a lost host's replacements go to the next host)."""
        if not self._elastic or time.monotonic() - self._grown < _GROW_EVERY_S:
            return
        self._grown = time.monotonic()
        for _ in range(self._cluster_cpus() - len(self._slots)):
            self._slots.append(self._new_slot())

    def _started(self, slot: _Slot) -> None:
        """Its actor answered `where` (or died before it could)."""
        from ray.exceptions import RayError

        try:
            _, slot.host = self._ray.get(slot.where_ref)
        except RayError as exc:  # its host went away while it started, or it cannot start
            self._failed_starts += 1
            if self._failed_starts >= _MAX_FAILED_STARTS * len(self._slots):
                raise ExecutorError(f"Ray workers fail to start on {self.address}: "
                                    f"{exc}") from exc
            self._replace(slot)
        else:
            self._failed_starts = 0

    def worker_pids(self) -> list[int]:
        return [int(p) for p, _ in self._ray.get([s.where_ref for s in self._slots])]

    def hosts(self) -> list[str]:
        """The host of each started actor."""
        return [s.host for s in self._slots if s.host is not None]

    def busy(self) -> dict[int, str]:
        """pid -> module, for the actors compiling right now (pids are per node)."""
        busy = [s for s in self._slots if s.busy is not None]
        where = self._ray.get([s.where_ref for s in busy])
        return {int(p): self._jobs[s.busy].module for (p, _), s in zip(where, busy, strict=True)
                if s.busy is not None}

    def stats(self) -> dict[str, int]:
        return {"retries": self.retries}

    def wait_ready(self, timeout: float = 120.0) -> None:
        self._ray.get([s.where_ref for s in self._slots], timeout=timeout)
        for slot in self._slots:
            self._started(slot)

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
        if self._lost:
            raise ExecutorError(f"lost the Ray cluster at {self.address}")
        cut = StragglerCut(len(jobs), min_fraction, straggler_grace_s)
        return self._results(spec, list(jobs), cut)

    def _results(
        self, spec: WorkSpec, jobs: list[CompileJob], cut: StragglerCut
    ) -> Iterator[ModuleResult]:
        try:
            yield from self._schedule(spec, jobs, cut)
        except Exception as exc:
            if not self._cluster_gone(exc):
                raise
            self._lost = True
            raise ExecutorError(lost_cluster_message(self.address, exc)) from exc

    def _cluster_gone(self, exc: Exception) -> bool:
        """Whether `exc` comes of losing the cluster. Through Ray Client, a lost head shows
        as a ConnectionError, or as whatever the call that met it raises: a gRPC error, the
        non-client API's error once the client has dropped, a failure of the actors. So
        unless the client has dropped already, the cluster is asked once more: Ray Client
        retries a call until its reconnect grace period ends, then drops."""
        if isinstance(exc, ConnectionError) or self._client_dropped():
            return True
        if not self._through_client:
            return False
        try:
            self._cluster_cpus()
        except Exception:
            return True
        return self._client_dropped()

    def _schedule(
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
        idle_since = time.monotonic()
        try:
            while left:
                self._check_client()
                self._grow()
                for slot in self._slots:
                    while slot.host is not None and slot.busy is None and queue:
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
                starting = {s.where_ref: s for s in self._slots if s.host is None}
                if inflight:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > self.no_worker_timeout_s:
                    raise ExecutorError(
                        f"no Ray worker has been able to take a job for "
                        f"{self.no_worker_timeout_s:.0f}s: the cluster at {self.address} "
                        f"has {self._cluster_cpus()} CPUs and {len(left)} jobs are waiting")
                ready, _ = ray.wait([*inflight, *starting], num_returns=1,
                                    timeout=cut.timeout(_WAIT_CAP_S))
                for ref in ready:
                    if ref in starting:
                        self._started(starting[ref])
                        continue
                    slot = inflight.pop(ref)
                    i, slot.busy = slot.busy, None
                    assert i is not None
                    try:
                        result = ray.get(ref)
                    except RayTaskError as exc:  # the compile code raised: not a worker fault
                        raise exc.as_instanceof_cause() from None
                    except RayError:  # actor, its process or its host died
                        self._replace(slot)
                        attempts[i] += 1
                        if attempts[i] <= self.max_retries:
                            self.retries += 1
                            queue.appendleft(i)
                            continue
                        result = lost_result(jobs[i].module, attempts[i])
                    else:
                        self.compiles_by_host[slot.host or "?"] += 1
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
        except ConnectionError:
            self._lost = True  # nothing left to tell the cluster (each call would wait)
            raise
        finally:
            if not self._lost:
                with contextlib.suppress(ConnectionError):
                    self._forget(key, inflight.values())
            self._jobs = []

    def _forget(self, key: int, inflight: Iterable[_Slot]) -> None:
        for slot in list(inflight):  # a consumer that stopped early
            self._replace(slot)
        for slot in self._slots:
            if key in slot.specs:
                slot.specs.discard(key)
                slot.actor.forget.remote(key)

    def summary(self) -> str:
        """Where the compiles ran: per host, and how many were run again elsewhere."""
        hosts = ", ".join(f"{h}: {n}" for h, n in sorted(self.compiles_by_host.items()))
        return (f"ray {self.address}: {sum(self.compiles_by_host.values())} compiles on "
                f"{len(self.compiles_by_host)} hosts ({hosts}); {self.retries} run again "
                "after losing their worker")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.address != "ray-local" and self.compiles_by_host:
            # a cluster's hosts come and go: say where the work went
            print(self.summary(), file=sys.stderr)
        self._job_refs.clear()
        if not self._lost:
            with contextlib.suppress(ConnectionError):  # a lost cluster has nothing to stop
                for slot in self._slots:
                    self._kill(slot.actor)
        if self._owns_ray:
            with contextlib.suppress(ConnectionError):
                self._ray.shutdown()
