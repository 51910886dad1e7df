"""Shared worker pools: several experiments (processes) attach to one named pool.

MLGO's "nesting worker": while one experiment trains, its compile workers serve another.
`mlgo pool serve --name NAME --workers N` runs a `PoolServer`: N worker processes behind
a unix socket `<runtime dir>/pools/NAME.sock` (directory mode 0700: only this user can
attach, as frames are pickles). `--cluster pool:NAME` makes a `PoolClient`, an Executor.

Each attached client is one experiment. Idle workers take jobs round-robin across
experiments with work queued (`Dispatcher`), so a big batch cannot starve a small one.
A client keeps only a window of jobs queued at the server, which keeps the turns fair
and the server's memory bounded. Detaching (closing the connection, or the process
exiting) cancels that experiment's queued and running jobs; the others go on.

Wire (frames of `wire`): client -> server ("hello", experiment, version),
("open", run, spec_blob, timeout), ("job", run, index, module, job_blob),
("cancel", run), ("close", run), ("stats",), ("shutdown",); server -> client
("welcome", num_workers, pid), ("result", run, index, result_blob),
("raised", run, index, exc_blob, traceback), ("stats", dict).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import select
import selectors
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymlgo.problems.base import CompileJob, ModuleResult
from pymlgo.runtime import private_dir
from pymlgo.workers import wire
from pymlgo.workers.dispatch import Completion, Dispatcher, WorkerProcess, default_num_workers
from pymlgo.workers.dispatch import raise_remote as _raise_remote
from pymlgo.workers.protocol import (
    DEFAULT_MAX_RETRIES,
    ExecutorBase,
    ExecutorError,
    StragglerCut,
    WorkSpec,
    cut_result,
)

PROTOCOL_VERSION = 1
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_TICK_S = 1.0


# -- where pools live ---------------------------------------------------------------------


def runtime_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """`<runtime dir>/pools` (see `pymlgo.runtime.private_dir`)."""
    try:
        return private_dir("pools", override)
    except PermissionError as exc:
        raise ExecutorError(str(exc)) from None


def socket_path(name: str, runtime: str | os.PathLike[str] | None = None) -> Path:
    if not _NAME_RE.fullmatch(name):
        raise ValueError(
            f"bad pool name {name!r}: use letters, digits, '_', '.', '-' (at most 64)"
        )
    return runtime_dir(runtime) / f"{name}.sock"


def _connect(path: Path, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        raise
    return sock


def _request(path: Path, msg: object, timeout: float) -> Any:
    """One blocking request/reply on a fresh connection (stats, shutdown)."""
    with _connect(path, timeout) as sock:
        sock.sendall(wire.pack(msg))
        conn = wire.FrameSocket(sock)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
            frames = conn.receive()
            if frames:
                return frames[0]
            if conn.closed:
                return None
        raise ExecutorError(f"pool at {path} did not answer within {timeout:.0f}s")


def _no_pool(name: str, path: Path) -> ExecutorError:
    return ExecutorError(
        f"no pool named {name!r} is being served (no server on {path}); "
        f"start one with `mlgo pool serve --name {name}`"
    )


def pool_stats(
    name: str, *, runtime: str | os.PathLike[str] | None = None, timeout: float = 10.0
) -> dict[str, Any]:
    """The server's state: workers, attached experiments, and the log of job starts
    as (experiment, module) pairs in start order."""
    path = socket_path(name, runtime)
    try:
        reply = _request(path, ("stats",), timeout)
    except OSError:
        raise _no_pool(name, path) from None
    stats: dict[str, Any] = reply[1]
    return stats


def stop_pool(
    name: str, *, runtime: str | os.PathLike[str] | None = None, timeout: float = 10.0
) -> None:
    path = socket_path(name, runtime)
    try:
        _request(path, ("shutdown",), timeout)
    except OSError:
        raise _no_pool(name, path) from None


def wait_for_pool(
    name: str, *, runtime: str | os.PathLike[str] | None = None, timeout: float = 60.0
) -> dict[str, Any]:
    """Block until a pool answers (a server just started); its stats."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return pool_stats(name, runtime=runtime, timeout=max(0.1, timeout))
        except ExecutorError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


# -- server -------------------------------------------------------------------------------


@dataclass(eq=False)
class _Client:
    conn: wire.FrameSocket
    experiment: str = "?"
    runs: dict[int, int] = field(default_factory=dict)  # client run id -> dispatcher run id


class PoolServer:
    """Serves a named pool until `shutdown()` (any thread or signal) or a shutdown request."""

    def __init__(
        self,
        name: str,
        num_workers: int | None = None,
        *,
        runtime: str | os.PathLike[str] | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ) -> None:
        self.name = name
        self.path = socket_path(name, runtime)
        self._listen = self._bind()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listen, selectors.EVENT_READ, None)
        self.dispatcher = Dispatcher(
            num_workers or default_num_workers(), selector=self._sel, max_retries=max_retries
        )
        self._clients: list[_Client] = []
        self._routes: dict[int, tuple[_Client, int]] = {}
        self._stop = threading.Event()

    def _bind(self) -> socket.socket:
        if self.path.exists():
            try:
                _connect(self.path, 1.0).close()
            except OSError:
                self.path.unlink()  # left by a server that died
            else:
                raise ExecutorError(f"pool {self.name!r} is already served on {self.path}")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.path))
        os.chmod(self.path, 0o600)
        sock.listen(64)
        sock.setblocking(False)
        return sock

    def shutdown(self) -> None:
        self._stop.set()

    def serve_forever(self) -> None:
        try:
            while not self._stop.is_set():
                self.dispatcher.dispatch()
                for key, mask in self._sel.select(_TICK_S):
                    if key.data is None:
                        self._accept()
                    elif isinstance(key.data, WorkerProcess):
                        self._deliver(self.dispatcher.handle(key.data))
                    else:
                        self._serve(key.data, mask)
                self._deliver(self.dispatcher.check_hung())
        finally:
            self.close()

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError):
            sock, _ = self._listen.accept()
            client = _Client(wire.FrameSocket(sock))
            self._clients.append(client)
            self._sel.register(sock, selectors.EVENT_READ, client)

    def _serve(self, client: _Client, mask: int) -> None:
        if mask & selectors.EVENT_READ:
            try:
                for msg in client.conn.receive():
                    self._on_message(client, msg)
            except Exception as exc:  # a confused client is detached; the pool goes on
                print(f"pool {self.name}: detaching {client.experiment}: {exc!r}",
                      file=sys.stderr)
                client.conn.closed = True
        if client.conn.closed:
            self._detach(client)
            return
        self._flush(client)

    def _on_message(self, client: _Client, msg: tuple[Any, ...]) -> None:
        d, kind = self.dispatcher, msg[0]
        if kind == "job":
            _, crid, index, module, blob = msg
            d.submit(client.runs[crid], index, module, blob)
        elif kind == "hello":
            client.experiment = str(msg[1])
            client.conn.send(("welcome", d.num_workers, os.getpid()))
        elif kind == "open":
            _, crid, spec_blob, timeout = msg
            rid = d.open_run(spec_blob, timeout, owner=client, label=client.experiment)
            client.runs[crid] = rid
            self._routes[rid] = (client, crid)
        elif kind == "cancel":
            d.cancel(client.runs[msg[1]])
        elif kind == "close":
            rid = client.runs.pop(msg[1])
            d.close_run(rid)
            self._routes.pop(rid, None)
        elif kind == "stats":
            client.conn.send(("stats", self.stats()))
        elif kind == "shutdown":
            self._stop.set()

    def _deliver(self, completions: list[Completion]) -> None:
        for c in completions:
            route = self._routes.get(c.run_id)
            if route is None:
                continue
            client, crid = route
            if c.raised is not None:
                client.conn.send(("raised", crid, c.index, *c.raised))
            else:
                client.conn.send(("result", crid, c.index, c.result_blob))
            self._flush(client)

    def _flush(self, client: _Client) -> None:
        client.conn.flush()
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if client.conn.wants_write else 0)
        with contextlib.suppress(KeyError, ValueError):
            if self._sel.get_key(client.conn.sock).events != events:
                self._sel.modify(client.conn.sock, events, client)

    def _detach(self, client: _Client) -> None:
        """The experiment is gone: drop its queued jobs, stop its running ones."""
        for rid in client.runs.values():
            self.dispatcher.close_run(rid)
            self._routes.pop(rid, None)
        client.runs.clear()
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(client.conn.sock)
        client.conn.close()
        self._clients.remove(client)

    def stats(self) -> dict[str, Any]:
        d = self.dispatcher
        return {
            "name": self.name,
            "pid": os.getpid(),
            "socket": str(self.path),
            "workers": d.num_workers,
            "worker_pids": d.worker_pids(),
            "busy": d.busy(),
            "experiments": [c.experiment for c in self._clients if c.experiment != "?"],
            "starts": list(d.starts),
            "retries": d.retries,
            "restarts": d.restarts,
        }

    def close(self) -> None:
        for client in list(self._clients):
            self._detach(client)
        self.dispatcher.close()
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(self._listen)
        self._listen.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._sel.close()


def serve_pool(
    name: str,
    num_workers: int | None = None,
    *,
    runtime: str | os.PathLike[str] | None = None,
    max_retries: int = DEFAULT_MAX_RETRIES,
    on_ready: Callable[[PoolServer], None] | None = None,
) -> None:
    """Serve pool `name` until SIGTERM/SIGINT or `mlgo pool stop` (the CLI's body)."""
    server = PoolServer(name, num_workers, runtime=runtime, max_retries=max_retries)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: server.shutdown())
    if on_ready is not None:
        on_ready(server)
    server.serve_forever()


# -- client -------------------------------------------------------------------------------


class PoolClient(ExecutorBase):
    """An experiment attached to a shared pool; `close()` detaches it."""

    def __init__(
        self,
        name: str,
        *,
        experiment: str | None = None,
        runtime: str | os.PathLike[str] | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.name = name
        self.experiment = experiment or f"{socket.gethostname()}:{os.getpid()}"
        path = socket_path(name, runtime)
        try:
            sock = _connect(path, timeout)
        except OSError:
            raise _no_pool(name, path) from None
        self._conn = wire.FrameSocket(sock)
        self._conn.send(("hello", self.experiment, PROTOCOL_VERSION))
        welcome = self._next_frame(timeout)
        if welcome is None or welcome[0] != "welcome":
            self._conn.close()
            raise ExecutorError(f"pool {name!r} at {path} did not welcome us: {welcome!r}")
        self._workers = int(welcome[1])
        self.server_pid = int(welcome[2])
        self._runs = 0
        self._running = False

    @property
    def num_workers(self) -> int:
        return self._workers

    def _pump(self, timeout: float) -> list[Any]:
        """Send what is buffered, wait up to `timeout` for input, return the frames."""
        conn = self._conn
        conn.flush()
        writers = [conn.sock] if conn.wants_write else []
        select.select([conn.sock], writers, [], timeout)
        conn.flush()
        frames = conn.receive()
        if conn.closed and not frames:
            raise ExecutorError(f"pool {self.name!r}: the server went away")
        return frames

    def _next_frame(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            frames = self._pump(max(0.0, deadline - time.monotonic()))
            if frames:
                return frames[0]
        return None

    def run(
        self,
        spec: WorkSpec,
        jobs: Sequence[CompileJob],
        *,
        min_fraction: float | None = None,
        straggler_grace_s: float = 0.0,
    ) -> Iterator[ModuleResult]:
        if self._conn.closed:
            raise RuntimeError("PoolClient is closed")
        cut = StragglerCut(len(jobs), min_fraction, straggler_grace_s)
        return self._results(wire.dumps(spec), spec.timeout, list(jobs), cut)

    def _results(
        self, spec_blob: bytes, timeout: float, jobs: list[CompileJob], cut: StragglerCut
    ) -> Iterator[ModuleResult]:
        if self._running:
            raise RuntimeError("PoolClient runs one batch at a time; finish the other first")
        self._running = True
        self._runs += 1
        crid = self._runs
        conn = self._conn
        conn.send(("open", crid, spec_blob, timeout))
        window = 2 * self._workers + 2  # enough queued to keep our turns, no more
        sent = 0
        left = set(range(len(jobs)))
        try:
            while left:
                while sent < len(jobs) and sent - (len(jobs) - len(left)) < window:
                    job = jobs[sent]
                    conn.send(("job", crid, sent, job.module, wire.dumps(job)))
                    sent += 1
                for msg in self._pump(cut.timeout(_TICK_S)):
                    if msg[0] in ("result", "raised") and msg[1] == crid and msg[2] in left:
                        left.discard(msg[2])
                        if msg[0] == "raised":
                            _raise_remote(msg[3], msg[4])
                        cut.record_done()
                        yield pickle.loads(msg[3])
                if left and cut.expired():
                    conn.send(("cancel", crid))
                    for i in sorted(left):
                        yield cut_result(jobs[i].module)
                    left.clear()
        finally:
            self._running = False
            if not conn.closed:
                conn.send(("close", crid))
                with contextlib.suppress(ExecutorError):
                    deadline = time.monotonic() + 5.0
                    while conn.wants_write and time.monotonic() < deadline:
                        self._pump(0.05)

    def close(self) -> None:
        if not self._conn.closed:
            self._conn.close()
