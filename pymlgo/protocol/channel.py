"""Host side of LLVM's interactive model-runner channel.

The compiler is started with e.g. `-mllvm -enable-ml-inliner=release
-mllvm -inliner-interactive-channel-base=BASE -mllvm -inliner-interactive-include-default`.
It opens the FIFO `BASE.in` for reading, then `BASE.out` for writing, sends a header and
contexts and, per decision, an observation (the log format of `pymlgo.protocol.log`), then
blocks until it has read one advice tensor from `BASE.in`. The host opens the FIFOs in the
same order (`.in` for writing, then `.out` for reading), or both sides block in `open`.

Every wait is bounded: the pass may never run (e.g. `-O0`, or a cached `zig cc` run), so
the FIFOs are never opened, and the compiler may die at any point. After `ChannelError`
or `ChannelTimeout` the caller should kill a compiler that is still running: LLVM spins on
0-byte reads once the host has closed its end.
"""

from __future__ import annotations

import errno
import math
import os
import select
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from pymlgo.protocol.log import (
    ByteSource,
    Context,
    Header,
    LogFormatError,
    LogReader,
    LogWriter,
    Observation,
    Outcome,
)
from pymlgo.protocol.tensor_spec import TensorSpec

Advise = Callable[[str, Observation, Header], int | float | np.ndarray]
"""Policy callback: (context name, observation, header) -> advice value."""

REWARD_SPEC = TensorSpec("reward", "float", (1,))

_OPEN_RETRY_S = 0.001  # how often to retry opening `.in` while no reader is there yet
_POLL_SLICE_S = 0.05  # how often to check that the compiler is still alive while waiting


class ChannelError(RuntimeError):
    """The channel session failed: never opened, broken stream, or the compiler died."""


class ChannelTimeout(ChannelError):
    """The session did not finish within its time limit."""


# eq=False: dataclass equality on ndarray fields would raise ("truth value is ambiguous").
@dataclass(frozen=True, eq=False)
class Decision:
    context: str
    index: int
    features: tuple[np.ndarray, ...]  # one per header feature
    advice: np.ndarray  # exactly what was sent, with the advice spec's dtype and shape


@dataclass(frozen=True)
class ChannelSession:
    header: Header | None
    contexts: tuple[str, ...]
    decisions: tuple[Decision, ...]


def fifo_paths(base: Path) -> tuple[Path, Path]:
    """(`BASE.in`, `BASE.out`): host -> compiler and compiler -> host."""
    return Path(f"{base}.in"), Path(f"{base}.out")


def make_fifos(directory: Path, stem: str = "channel") -> Path:
    """Creates `directory/stem.in` and `directory/stem.out`; returns the base path."""
    base = Path(directory) / stem
    for path in fifo_paths(base):
        os.mkfifo(path, 0o600)
    return base


def remove_fifos(base: Path) -> None:
    for path in fifo_paths(base):
        path.unlink(missing_ok=True)


def pack_advice(spec: TensorSpec, value: Any) -> np.ndarray:
    """`value` as exactly one tensor of `spec` (e.g. int64 `inlining_decision`, float32
    `priority`)."""
    arr = np.asarray(value)
    if arr.size != spec.element_count:
        raise ValueError(
            f"advice {spec.name!r} needs {spec.element_count} value(s), got {arr.size}"
        )
    if spec.dtype.kind in "iu":
        # A cast would silently wrap, truncate or make up a value (0.7 -> 0: "never
        # inline"); the compiler must get exactly what the policy said, or nothing.
        if arr.dtype.kind not in "iufb":
            raise ValueError(f"advice {spec.name!r} is integer, got {value!r}")
        if arr.dtype.kind == "f":
            if not np.isfinite(arr).all():
                raise ValueError(f"advice {spec.name!r} is integer, got non-finite {value!r}")
            if not (arr == np.trunc(arr)).all():
                raise ValueError(f"advice {spec.name!r} is integer, got {value!r}")
        info = np.iinfo(spec.dtype)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise ValueError(f"advice {spec.name!r} ({spec.type}) cannot hold {value!r}")
    return arr.astype(spec.dtype).reshape(spec.shape)


_INT64 = np.dtype(np.int64)
_INT64_RANGE = range(-(2**63), 2**63)


def advice_bytes(spec: TensorSpec, value: Any) -> bytes:
    """The bytes of `pack_advice(spec, value)`; a Python int for an int64 [1] advice (every
    inliner policy's answer) is converted without numpy, since the compiler waits for it."""
    if (type(value) is int and value in _INT64_RANGE and spec.dtype == _INT64
            and spec.element_count == 1):
        return value.to_bytes(8, sys.byteorder, signed=True)
    return pack_advice(spec, value).tobytes()


def serve_channel(
    base: Path,
    advise: Advise,
    *,
    timeout: float,
    compiler_alive: Callable[[], bool] = lambda: True,
) -> ChannelSession:
    """Answers one compiler's channel session on `BASE.in`/`BASE.out` within `timeout` s.

    Raises `ChannelError` if `compiler_alive()` turns False before the compiler opened the
    channel or while it is silent, or if the stream is malformed; `ChannelTimeout` when the
    deadline passes. A header and context followed by end of stream is a normal, empty
    session (a module with nothing to decide).
    """
    sessions: list[ChannelSession] = []
    _serve(base, advise, sessions.append, timeout, compiler_alive, successive=False)
    return sessions[0]


def serve_channel_sessions(
    base: Path,
    advise: Advise,
    on_session: Callable[[ChannelSession], None],
    *,
    timeout: float,
    compiler_alive: Callable[[], bool] = lambda: True,
) -> int:
    """Answers every session one compiler process opens on `BASE.in`/`BASE.out`, as
    `serve_channel` answers one, until `compiler_alive()` turns False; calls `on_session` as
    each ends and returns how many there were (at least one, else `ChannelError`).

    For a compiler that runs advisors one after another (lld's ThinLTO backends with
    `--thinlto-jobs=1`, a driver running cc1 once per source): each opens `BASE.in` and
    `BASE.out` afresh and closes them when done, and the next may open them at any moment
    after that. So the host keeps both open all along: the next compiler's opens succeed at
    once, its advice goes through the same `BASE.in` descriptor, and `BASE.out` never lacks
    a reader (a compiler writing into a FIFO without one would die of SIGPIPE; at the end of
    a stream a fresh reader is opened before the old one closes). If the next compiler
    opened `BASE.out` before the host read the end of the previous stream, the host never
    sees that end, and the next header follows the previous session's last complete item on
    the same stream (`LogReader`'s `successive_sessions`). Each session has its own
    `timeout`, counted from the opening, the end of the previous stream or its header.
    """
    count = 0

    def ended(session: ChannelSession) -> None:
        nonlocal count
        count += 1
        on_session(session)

    _serve(base, advise, ended, timeout, compiler_alive, successive=True)
    return count


def _serve(base: Path, advise: Advise, on_session: Callable[[ChannelSession], None],
           timeout: float, compiler_alive: Callable[[], bool], *, successive: bool) -> None:
    deadline = _Deadline(timeout)
    to_compiler, from_compiler = fifo_paths(Path(base))
    write_fd = read_fd = -1
    try:
        write_fd = _open_writer(to_compiler, deadline, compiler_alive)
        os.set_blocking(write_fd, True)  # advice is tiny and the compiler waits for it
        # Non-blocking open of the read end succeeds at once; poll then waits for data.
        read_fd = os.open(from_compiler, os.O_RDONLY | os.O_NONBLOCK)
        later = False  # a stream after the first: the compiler may exit instead of sending
        while True:
            read = _bounded_reader(read_fd, deadline, compiler_alive, exit_ends=later)
            reader = LogReader(ByteSource(read), successive_sessions=successive)
            if not _converse(reader, write_fd, advise, base, on_session, deadline.restart,
                             compiler_alive, exit_ends=later) or not successive:
                return
            # The reader of an ended stream sees no later writer (POLLHUP stays): a fresh
            # one does, and is opened first so that `.out` has a reader all along.
            fresh = os.open(from_compiler, os.O_RDONLY | os.O_NONBLOCK)
            os.close(read_fd)
            read_fd, later = fresh, True
            deadline.restart()
    finally:
        # Only now, after end of stream (or failure), may `.in` close.
        for fd in (read_fd, write_fd):
            if fd >= 0:
                os.close(fd)


class _Deadline:
    """When the current session's time is up: `timeout` s from the start or the restart."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.restart()

    def restart(self) -> None:
        self.at = time.monotonic() + self.timeout

    def remaining(self) -> float:
        return self.at - time.monotonic()


def _open_writer(path: Path, deadline: _Deadline, compiler_alive: Callable[[], bool]) -> int:
    while True:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: no reader has opened the FIFO yet
                raise
        if not compiler_alive():
            raise ChannelError(
                f"the compiler exited without opening the channel {path}"
                " (the pass did not run, e.g. at -O0 or for a cached build)"
            )
        if deadline.remaining() <= 0:
            raise ChannelTimeout(f"no compiler opened {path} within {deadline.timeout:g} s")
        time.sleep(_OPEN_RETRY_S)


def _bounded_reader(
    fd: int, deadline: _Deadline, compiler_alive: Callable[[], bool], *, exit_ends: bool
) -> Callable[[int], bytes]:
    """`read(n)` on `fd` within the deadline. A dead compiler writes no more: with nothing
    pending it never opened `.out` (a `ChannelError`), or, if `exit_ends`, it exited after
    its last session (end of stream)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)  # POLLHUP (writer gone) is always reported

    def read(n: int) -> bytes:
        while True:
            remaining = deadline.remaining()
            if remaining <= 0:
                raise ChannelTimeout(f"channel session exceeded {deadline.timeout:g} s")
            if poller.poll(math.ceil(min(remaining, _POLL_SLICE_S) * 1000)):
                try:
                    return os.read(fd, n)  # b"" once the compiler closed `.out`
                except BlockingIOError:
                    continue
            if not compiler_alive() and not poller.poll(0):
                if exit_ends:
                    return b""
                raise ChannelError("the compiler exited without sending on the channel")

    return read


def _converse(reader: LogReader, write_fd: int, advise: Advise, base: Path,
              on_session: Callable[[ChannelSession], None], restart: Callable[[], None],
              compiler_alive: Callable[[], bool], *, exit_ends: bool) -> bool:
    """Answers the sessions of one stream; False if, `exit_ends`, it was empty because the
    compiler exited."""
    header: Header | None = None
    contexts: list[str] = []
    decisions: list[Decision] = []
    context = ""
    try:
        for event in reader.events():
            if isinstance(event, Context):
                context = event.name
                contexts.append(context)
            elif isinstance(event, Observation):
                assert header is not None  # the reader yields the header first
                if header.advice is None:
                    raise ChannelError(f"channel {base}: the header has no advice spec")
                spec = header.advice
                data = advice_bytes(spec, advise(context, event, header))
                _write_all(write_fd, data, event.index)
                # the compiler is running again: the record can be made at leisure
                advice = np.frombuffer(data, dtype=spec.dtype).reshape(spec.shape)
                decisions.append(Decision(context, event.index, event.tensors, advice))
            elif isinstance(event, Header):
                if header is not None:  # the previous session ended where this one starts
                    on_session(ChannelSession(header, tuple(contexts), tuple(decisions)))
                    contexts, decisions, context = [], [], ""
                    restart()
                header = event
            elif isinstance(event, Outcome):
                raise ChannelError(f"channel {base}: outcome records do not belong here")
    except LogFormatError as e:
        raise ChannelError(f"channel {base}: bad stream from the compiler: {e}") from e
    if header is None:
        if exit_ends and not compiler_alive():
            return False
        raise ChannelError(f"channel {base}: the compiler closed it without sending a header")
    on_session(ChannelSession(header, tuple(contexts), tuple(decisions)))
    return True


def _write_all(fd: int, data: bytes, index: int) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BrokenPipeError as e:
            raise ChannelError(
                f"the compiler closed the channel before reading advice {index}"
            ) from e


def session_to_log(session: ChannelSession, stream: BinaryIO, *, outcome: float | None) -> None:
    """Writes `session` as a training log: the decision is an extra feature named after the
    advice spec and, if `outcome` is given, every observation is followed by that reward."""
    header = session.header
    if header is None or header.advice is None:
        raise ValueError("a session without a header or advice spec cannot be logged")
    writer = LogWriter(stream)
    score = None if outcome is None else REWARD_SPEC
    writer.write_header(Header(features=(*header.features, header.advice), score=score))
    reward = None if outcome is None else np.array([outcome], dtype=REWARD_SPEC.dtype)
    current: str | None = None
    for decision in session.decisions:
        if decision.context != current:
            current = decision.context
            writer.write_context(current)
        writer.write_observation(decision.index, (*decision.features, decision.advice))
        if reward is not None:
            writer.write_outcome(decision.index, reward)
    writer.flush()
