"""Run compiler processes with a deadline, in a private temp dir, always reaped."""

from __future__ import annotations

import contextlib
import math
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

DEFAULT_TIMEOUT_S = 300.0


class CompileTimeout(RuntimeError):
    """The compiler ran past its deadline and was killed."""


@dataclass(frozen=True)
class ProcessResult:
    returncode: int
    stderr: str
    seconds: float


@contextlib.contextmanager
def private_tmpdir(prefix: str = "mlgo-") -> Iterator[Path]:
    """A temp dir only this compile uses; removed on every exit path."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def with_memory_limit(argv: Sequence[str], memory_mb: int | None) -> list[str]:
    """`argv` run under an address-space limit (RLIMIT_AS) of `memory_mb` MiB.

    The limit is set by `sh`'s `ulimit -v`, which then execs the compiler in its place
    (same pid, same command line): unlike a Popen `preexec_fn` it is safe in a process
    with threads. A compile that needs more fails (clang aborts or segfaults) instead of
    driving the machine into swap.
    """
    if memory_mb is None:
        return list(argv)
    if memory_mb < 1:
        raise ValueError(f"memory limit must be >= 1 MiB, got {memory_mb}")
    return ["/bin/sh", "-c", f'ulimit -v {memory_mb * 1024} && exec "$@"', "mlgo-limit", *argv]


def start(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    stderr: IO[bytes] | None = None,
    memory_mb: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start a compiler in its own process group so a kill reaches any children too.

    Pass a file as `stderr` when the caller talks to the compiler while it runs: a
    PIPE nobody drains can fill up and stall the compiler mid-protocol. `memory_mb`
    bounds its address space (see `with_memory_limit`).
    """
    return subprocess.Popen(
        with_memory_limit(argv, memory_mb),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr if stderr is not None else subprocess.PIPE,
        start_new_session=True,
    )


def kill_and_reap(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process group and wait for the child, so no zombie or orphan is left."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.communicate(timeout=10)


def _wait_for_exit(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """`proc.wait(timeout)` that wakes the moment the child exits.

    Without pipes, `Popen.wait(timeout)` polls with sleeps of up to 50 ms; on a channel
    compile that latency would land on every module. A pidfd is readable at exit.
    """
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3, or already reaped
        proc.wait(timeout=timeout)
        return
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(max(0, math.ceil(timeout * 1000))):
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(fd)
    proc.wait()


def finish(proc: subprocess.Popen[bytes], *, deadline: float, started: float) -> ProcessResult:
    """Wait for `proc` until the monotonic `deadline`; kill it and raise past that."""
    try:
        remaining = max(0.0, deadline - time.monotonic())
        if proc.stdout is None and proc.stderr is None:
            _wait_for_exit(proc, remaining)
            err = b""
        else:
            _, err = proc.communicate(timeout=remaining)
    except subprocess.TimeoutExpired:
        kill_and_reap(proc)
        raise CompileTimeout(
            f"compiler killed after {time.monotonic() - started:.1f}s (timeout)"
        ) from None
    return ProcessResult(
        returncode=proc.returncode,
        stderr=err.decode(errors="replace") if err else "",
        seconds=time.monotonic() - started,
    )


def run(
    argv: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    cwd: Path | None = None,
    memory_mb: int | None = None,
) -> ProcessResult:
    """Run to completion with a timeout (and optional memory limit); always reaped."""
    started = time.monotonic()
    proc = start(argv, cwd=cwd, memory_mb=memory_mb)
    try:
        return finish(proc, deadline=started + timeout, started=started)
    finally:
        kill_and_reap(proc)
