"""A compiler running on the interactive channel, driven one observation at a time.

`protocol.channel.serve_channel` answers a whole session through a callback; an
environment instead hands each observation to its caller and waits for `step(action)`.
`CompilerSession` owns everything one episode creates - a private temp dir with the
module, the two FIFOs and the compiler process - and `close()` removes all of it on every
path (the compiler is killed first: LLVM spins on 0-byte reads once `.in` is closed).

Timeouts are per wait, not per session: an agent may think as long as it likes between
steps, but the compiler must answer each request within `timeout` seconds.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from pymlgo.protocol.channel import (
    ChannelError,
    ChannelTimeout,
    fifo_paths,
    make_fifos,
    pack_advice,
)
from pymlgo.protocol.log import (
    ByteSource,
    Context,
    Header,
    LogFormatError,
    LogReader,
    Observation,
    Outcome,
)
from pymlgo.toolchain import run

_OPEN_RETRY_S = 0.001
_POLL_SLICE_S = 0.05


class CompilerSession:
    """One compile with the channel open; `next_observation()` / `answer()` alternate.

    Usage: `start(argv_for(base))`, then `next_observation()` until it returns None (end of
    stream), `answer(value)` after each observation, then `finish()` for the exit status.
    """

    def __init__(self, *, timeout: float, prefix: str = "mlgo-env-") -> None:
        self.timeout = timeout
        self.tmp = Path(tempfile.mkdtemp(prefix=prefix))
        self.base = make_fifos(self.tmp)
        self.proc: subprocess.Popen[bytes] | None = None
        self.header: Header | None = None
        self.context = ""
        self.opened = False  # the compiler opened the channel
        self._write_fd = -1
        self._read_fd = -1
        self._events: Iterator[object] | None = None
        self._deadline = 0.0
        self._pending: Observation | None = None
        self._stderr: object | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, argv: Sequence[str]) -> None:
        if self.proc is not None:
            raise RuntimeError("the session was already started")
        self._stderr = open(self.tmp / "stderr.txt", "wb")  # noqa: SIM115 - closed in close()
        self.proc = run.start(argv, cwd=self.tmp, stderr=self._stderr)  # type: ignore[arg-type]

    @property
    def pending(self) -> Observation | None:
        """The observation waiting for `answer()`, if any."""
        return self._pending

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def next_observation(self) -> Observation | None:
        """The next observation (contexts and the header are recorded on the way), or None
        when the compiler has closed the channel or never opened it because it had nothing
        to ask (it then exits; check `finish()`)."""
        if self._pending is not None:
            raise RuntimeError("answer the pending observation first")
        self._deadline = time.monotonic() + self.timeout
        if not self.opened and not self._open():
            return None
        assert self._events is not None
        try:
            for event in self._events:
                if isinstance(event, Header):
                    self.header = event
                    if event.advice is None:
                        raise ChannelError("the compiler's header has no advice spec")
                elif isinstance(event, Context):
                    self.context = event.name
                elif isinstance(event, Observation):
                    self._pending = event
                    return event
                elif isinstance(event, Outcome):
                    raise ChannelError("outcome records do not belong on the channel")
        except LogFormatError as e:
            raise ChannelError(f"bad stream from the compiler: {e}") from e
        return None

    def answer(self, value: int | float | np.ndarray) -> np.ndarray:
        """Sends the advice for the pending observation; returns exactly what was sent."""
        if self._pending is None or self.header is None or self.header.advice is None:
            raise RuntimeError("no observation is waiting for an answer")
        advice = pack_advice(self.header.advice, value)
        view = memoryview(advice.tobytes())
        while view:
            try:
                view = view[os.write(self._write_fd, view) :]
            except BrokenPipeError as e:
                raise ChannelError(
                    f"the compiler closed the channel before reading advice "
                    f"{self._pending.index}"
                ) from e
        self._pending = None
        return advice

    def finish(self) -> run.ProcessResult:
        """Waits for the compiler to exit (within `timeout`); its stderr is in the result."""
        assert self.proc is not None
        started = time.monotonic()
        try:
            res = run.finish(self.proc, deadline=started + self.timeout, started=started)
        finally:
            self._close_fds()  # only after exit: LLVM spins on a closed `.in`
        stderr = (self.tmp / "stderr.txt").read_text(errors="replace")
        return run.ProcessResult(res.returncode, stderr, res.seconds)

    def close(self) -> None:
        """Kills the compiler if it still runs, reaps it, removes the FIFOs and temp dir.
        Safe to call more than once."""
        if self.proc is not None:
            run.kill_and_reap(self.proc)
        self._close_fds()
        if self._stderr is not None:
            with contextlib.suppress(OSError):
                self._stderr.close()  # type: ignore[attr-defined]
        with contextlib.suppress(OSError):
            for path in fifo_paths(self.base):
                path.unlink(missing_ok=True)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> CompilerSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------

    def _close_fds(self) -> None:
        for fd in (self._read_fd, self._write_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._read_fd = self._write_fd = -1

    def _open(self) -> bool:
        """Opens `.in` for writing (once the compiler is reading it), then `.out`; False if
        the compiler exited successfully without opening the channel."""
        to_compiler, from_compiler = fifo_paths(self.base)
        while True:
            try:
                self._write_fd = os.open(to_compiler, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as e:
                if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
            if not self.alive():
                assert self.proc is not None
                if self.proc.wait() == 0:
                    return False
                raise ChannelError("the compiler failed before opening the channel")
            if time.monotonic() >= self._deadline:
                raise ChannelTimeout(f"no compiler opened {to_compiler} within {self.timeout:g} s")
            time.sleep(_OPEN_RETRY_S)
        os.set_blocking(self._write_fd, True)
        self._read_fd = os.open(from_compiler, os.O_RDONLY | os.O_NONBLOCK)
        self.opened = True
        self._events = LogReader(ByteSource(self._reader())).events()
        return True

    def _reader(self) -> Callable[[int], bytes]:
        poller = select.poll()
        poller.register(self._read_fd, select.POLLIN)

        def read(n: int) -> bytes:
            while True:
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    raise ChannelTimeout(f"the compiler sent nothing for {self.timeout:g} s")
                if poller.poll(math.ceil(min(remaining, _POLL_SLICE_S) * 1000)):
                    try:
                        return os.read(self._read_fd, n)  # b"" once `.out` is closed
                    except BlockingIOError:
                        continue
                if not self.alive() and not poller.poll(0):
                    raise ChannelError("the compiler exited in the middle of the channel stream")

        return read
