"""Per-worker scratch directories, and cleaning up after a worker that died.

A compile runs clang in its own session, so killing a worker does not kill its compiler;
and a clang whose host vanished mid-protocol spins forever on the closed FIFO. Every
temp dir of a worker's compiles lives under that worker's scratch dir, so the compilers
it leaves behind are the processes whose command line names that dir. A worker holds an
flock on its dir while alive (released by the kernel however it dies, immune to pid
reuse); a dir whose lock can be taken belongs to a dead worker and is reaped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PREFIX = "mlgo-worker-"
_LOCK = ".alive"


@dataclass
class Scratch:
    path: Path
    lock_fd: int


def claim_scratch(base: Path | None = None) -> Scratch:
    """Reap dead workers' dirs, then make this process's dir the default for temp files."""
    base = Path(base or tempfile.gettempdir())
    reap_stale(base)
    # lock first, then rename into the reaped namespace: a janitor never sees it unlocked
    staging = Path(tempfile.mkdtemp(prefix="." + PREFIX, dir=base))
    fd = os.open(staging / _LOCK, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    path = base / staging.name[1:]
    staging.rename(path)
    tempfile.tempdir = str(path)  # private_tmpdir() and friends now allocate here
    return Scratch(path, fd)


def temp_base(env: Mapping[str, str]) -> Path:
    """Where a worker started with `env` makes its scratch dir: the first of $TMPDIR, $TEMP
    and $TMP that is a directory, as `tempfile.gettempdir()` decides in a new process."""
    for name in ("TMPDIR", "TEMP", "TMP"):
        value = env.get(name)
        if value and os.path.isdir(value):
            return Path(value)
    return Path(tempfile.gettempdir())


def orphans_of(path: Path) -> list[int]:
    """Pids of our processes whose command line mentions `path` (Linux /proc only)."""
    needle = os.fsencode(str(path)) + b"/"
    me = os.getpid()
    found = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if needle in f.read():
                        found.append(int(entry.name))
            except OSError:  # gone meanwhile, or not ours
                continue
    return found


def reap(path: Path) -> None:
    """Kill what a dead worker left running under `path` and remove the dir."""
    for pid in orphans_of(path):
        # compilers are session leaders: the group kill also reaches their children
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def reap_stale(base: Path) -> None:
    """Reap every worker dir under `base` whose owner is gone."""
    for path in base.glob(PREFIX + "*"):
        try:
            fd = os.open(path / _LOCK, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue  # not created yet, or already being removed
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # alive
        try:
            reap(path)
        finally:
            os.close(fd)
