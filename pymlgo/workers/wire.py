"""Length-prefixed pickle frames: the one wire format between pool, workers and clients.

Only trusted peers speak it: a worker the pool started itself, or a process of the same
user on a unix socket in a 0700 directory (unpickling runs code).
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
from typing import Any

_HEADER = struct.Struct("!Q")
_READ_CHUNK = 1 << 20


def dumps(obj: object) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def pack(obj: object) -> bytes:
    payload = dumps(obj)
    return _HEADER.pack(len(payload)) + payload


def write_frame(fd: int, obj: object) -> None:
    """Blocking write of one frame to a pipe (loops: a signal can interrupt a long write)."""
    view = memoryview(pack(obj))
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, n: int) -> bytes | None:
    parts: list[bytes] = []
    while n:
        chunk = os.read(fd, min(n, _READ_CHUNK))
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def read_frame(fd: int) -> Any | None:
    """Blocking read of one frame; None at end of stream (also a stream cut mid-frame)."""
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    payload = _read_exact(fd, _HEADER.unpack(header)[0])
    return None if payload is None else pickle.loads(payload)


class FrameSocket:
    """A non-blocking socket speaking frames, buffered both ways.

    Neither side ever blocks on a send, so a server relaying large jobs one way and large
    results the other cannot deadlock with a client doing the same.
    """

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.closed = False
        self._in = bytearray()
        self._out = bytearray()

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, obj: object) -> None:
        self._out += pack(obj)

    @property
    def wants_write(self) -> bool:
        return bool(self._out)

    def flush(self) -> None:
        """Send what the kernel takes now; the rest waits for the next writable event."""
        while self._out and not self.closed:
            try:
                n = self.sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # peer gone: the read side reports it
                self.closed = True
                return
            del self._out[:n]

    def receive(self) -> list[Any]:
        """Every complete frame available now; sets `closed` at end of stream."""
        while not self.closed:
            try:
                chunk = self.sock.recv(_READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self.closed = True
                break
            if not chunk:
                self.closed = True
                break
            self._in += chunk
        frames = []
        while len(self._in) >= _HEADER.size:
            (n,) = _HEADER.unpack_from(self._in)
            if len(self._in) < _HEADER.size + n:
                break
            frames.append(pickle.loads(bytes(self._in[_HEADER.size : _HEADER.size + n])))
            del self._in[: _HEADER.size + n]
        return frames

    def close(self) -> None:
        self.closed = True
        self.sock.close()
