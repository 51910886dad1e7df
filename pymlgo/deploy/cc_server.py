"""`mlgo cc`'s policy server: one background process per policy answers the inliner's
channel for every compile of a build, so the build imports numpy and loads the policy once
instead of once per compile (about 0.14 s of CPU per compile on the reference machine,
where a whole -Oz compile is 0.4 s on average).

The first `mlgo cc` that needs a policy starts its server (`python -m
pymlgo.deploy.cc_server`, a new session, no terminal), which listens on
`<runtime dir>/cc/<key>.sock` (directory mode 0700) and exits after `--idle` seconds with
no compile to serve. The key covers the policy's identity (its spec, and for a saved
policy its directory and the bytes of its policy.json, which hold the checksums of the
weights and vocab) and this pymlgo: a retrained policy gets a new server. A server that
cannot load its policy exits, and the compile falls back to loading it itself, which
reports the error as before.

Wire: JSON lines on a Unix stream socket, one connection per compile.
  client -> server  {"flags": true}             (optional: the native launcher asks ...)
  server -> client  {"include_default": bool,   (... whether the policy reads clang's own
                     "ir2vec_vocab": path|null,  decision, the IR2Vec vocabulary it carries
                     "languages": "c++"}         and the languages it decides, "" for all,
                                                 before it starts the compiler)
  client -> server  {"base": FIFO base, "module": name, "pid": compiler pid, "timeout": s}
  server -> client  {"accepted": true}          (before it touches the FIFOs)
  client -> server  {"exited": true}            (once the compiler has exited)
  server -> client  {"sessions", "decisions", "inlined"} or {"error": message}
A client that disconnects before saying "exited" has died: the server kills the compiler's
process group (it was started in a session of its own), which would otherwise spin on a
closed channel, and removes the channel's FIFOs and their directory (if it is then empty),
which the dead client can no longer remove.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pymlgo.problems.inlining.builtin_specs import DEFAULT_FEATURE
from pymlgo.runtime import private_dir

SERVER_ENV, IDLE_ENV = "MLGO_CC_SERVER", "MLGO_CC_SERVER_IDLE"
DEFAULT_IDLE_S = 60.0
START_TIMEOUT_S = 20.0  # importing numpy and loading a policy on a loaded machine
_POLL_S = 0.02
_FINAL_ANSWER_S = 60.0  # after the compiler exited, the server only counts
_MAX_LINE = 1 << 16


class ServerUnavailable(RuntimeError):
    """No server took the compile; nothing touched its channel, so it can be served here."""


class ServerLost(RuntimeError):
    """The server took the compile and then went away: the compile must be redone."""


class ServerRefused(RuntimeError):
    """The server answered with an error (e.g. the policy cannot decide); the message."""


def enabled(env: dict[str, str]) -> bool:
    value = env.get(SERVER_ENV, "1").strip().lower()
    if value in ("0", "no", "off", "false"):
        return False
    if value in ("1", "yes", "on", "true", ""):
        return True
    raise ValueError(f"{SERVER_ENV}={env[SERVER_ENV]!r}: use 1 (default) or 0")


def idle_seconds(env: dict[str, str]) -> float:
    raw = env.get(IDLE_ENV)
    try:
        value = float(raw) if raw else DEFAULT_IDLE_S
    except ValueError:
        raise ValueError(f"{IDLE_ENV}={raw!r}: seconds expected") from None
    if not value > 0:
        raise ValueError(f"{IDLE_ENV}={raw!r}: must be > 0")
    return value


def key_prefix() -> list[str]:
    """The parts of every policy key that name this pymlgo and Python (the native launcher
    has them built in)."""
    from pymlgo import __version__

    return [__version__, os.path.realpath(sys.executable), str(Path(__file__).resolve())]


def policy_key(spec: str, policy_dir: Path | None) -> str:
    """Who may serve `spec`: the same spec, policy bytes, pymlgo and Python."""
    parts = [*key_prefix(), spec]
    if policy_dir is not None:
        try:
            parts += [str(policy_dir.resolve()),
                      hashlib.sha256((policy_dir / "policy.json").read_bytes()).hexdigest()]
        except OSError as exc:
            raise ServerUnavailable(f"cannot read {policy_dir}: {exc}") from None
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def socket_path(key: str) -> Path:
    return private_dir("cc") / f"{key}.sock"


# -- client -------------------------------------------------------------------------------


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    sock.sendall(json.dumps(msg).encode() + b"\n")


class _Lines:
    """JSON lines from a socket; `None` at end of stream."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def next(self, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no answer")
            if not select.select([self.sock], [], [], remaining)[0]:
                continue
            data = self.sock.recv(4096)
            if not data:
                return None
            self.buf += data
            if len(self.buf) > _MAX_LINE:
                raise ValueError("answer line too long")
        line, self.buf = self.buf.split(b"\n", 1)
        msg = json.loads(line)
        if not isinstance(msg, dict):
            raise ValueError("answer is not a JSON object")
        return msg

    def ready(self) -> bool:
        return b"\n" in self.buf or bool(select.select([self.sock], [], [], 0)[0])


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def connect(spec: str, policy_dir: Path | None, env: dict[str, str]) -> socket.socket:
    """A connection to the server of `spec`, started if none runs; ServerUnavailable if
    none can be had within START_TIMEOUT_S."""
    try:
        path = socket_path(policy_key(spec, policy_dir))
    except PermissionError as exc:
        raise ServerUnavailable(str(exc)) from None
    sock = _connect(path)
    if sock is not None:
        return sock
    err = path.with_suffix(".err")
    # The server outlives this build step: it runs in / (it must not keep a build dir
    # busy), so a saved policy is named by its absolute path.
    served = spec if policy_dir is None or spec.startswith("pretrained:") else str(
        policy_dir.resolve())
    package_root = str(Path(__file__).resolve().parents[2])  # importable from / as well
    env = {**env, "PYTHONPATH": os.pathsep.join(
        p for p in (package_root, env.get("PYTHONPATH", "")) if p)}
    with open(err, "wb") as err_file:
        server = subprocess.Popen(
            [sys.executable, "-m", "pymlgo.deploy.cc_server", "--policy", served,
             "--socket", str(path), "--idle", str(idle_seconds(env))],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_file,
            start_new_session=True, env=env, close_fds=True, cwd="/",
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        sock = _connect(path)
        if sock is not None:
            return sock
        # 0: another compile's server won the race to bind; any other exit: it failed.
        code = server.poll()
        if code not in (None, 0):
            raise ServerUnavailable(f"the policy server exited with {code}: "
                                    + err.read_text(errors="replace").strip()[-500:])
        time.sleep(_POLL_S)
    raise ServerUnavailable(f"no policy server on {path} after {START_TIMEOUT_S:g} s")


def serve_remote(sock: socket.socket, base: Path, module: str, proc: subprocess.Popen[bytes],
                 timeout: float) -> dict[str, int] | None:
    """Have the server behind `sock` answer `proc`'s channel at `base` until `proc` exits;
    the server's counts, or None if it went away after the compiler exited (the object
    is complete; only the counts are lost). ServerUnavailable: it did not take the compile
    (nothing was touched); ServerLost: it went away while the compiler ran; ServerRefused:
    it reported an error."""
    lines = _Lines(sock)
    with sock:
        try:
            _send(sock, {"base": str(base), "module": module, "pid": proc.pid,
                         "timeout": timeout})
            first = lines.next(START_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as exc:
            raise ServerUnavailable(f"the policy server did not take the compile: {exc}"
                                    ) from None
        if not first or not first.get("accepted"):
            raise ServerUnavailable(f"the policy server did not take the compile: {first}")
        try:
            with _exit_waiter(proc) as wait_exit:
                while proc.poll() is None:
                    if lines.ready():  # an early answer: an error, or the server died
                        return _final(lines.next(1.0))
                    wait_exit(sock)
        except (OSError, TimeoutError, ValueError) as exc:
            raise ServerLost(f"the policy server failed: {exc}") from None
        try:
            _send(sock, {"exited": True})
            return _final(lines.next(_FINAL_ANSWER_S))
        except (OSError, TimeoutError, ValueError, ServerLost):
            return None


@contextlib.contextmanager
def _exit_waiter(proc: subprocess.Popen[bytes]) -> Iterator[Callable[[socket.socket], None]]:
    """A call that blocks until `proc` exits or the socket has data: on a pidfd where
    Linux has them (no polling delay at the end of every compile), else in short naps."""
    pidfd = -1
    with contextlib.suppress(AttributeError, OSError):
        pidfd = os.pidfd_open(proc.pid)

    def wait(sock: socket.socket) -> None:
        if pidfd >= 0:
            select.select([sock, pidfd], [], [], 1.0)
        else:
            select.select([sock], [], [], _POLL_S)

    try:
        yield wait
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _final(msg: dict[str, Any] | None) -> dict[str, int]:
    if msg is None:
        raise ServerLost("the policy server went away during the compile")
    if "error" in msg:
        raise ServerRefused(str(msg["error"]))
    return {k: int(msg[k]) for k in ("sessions", "decisions", "inlined")}


# -- server -------------------------------------------------------------------------------


def _handle(conn: socket.socket, policy: Any, serve: Callable[..., Any]) -> None:
    lines = _Lines(conn)
    exited = threading.Event()  # the compiler is done: "exited", or the client is gone
    settled = threading.Event()  # the client knows the outcome: nothing left to kill
    pid = None
    try:
        req = lines.next(10.0)
        if req is not None and req.get("flags"):
            reads = DEFAULT_FEATURE in getattr(policy, "required_features", ())
            # clang must embed with the policy's own copy (cc.policy_ir2vec_args' file)
            ir2vec = getattr(policy, "ir2vec_vocab", None)
            # the languages it decides, "c,c++"-style ("": every one): the launcher leaves
            # the compiles of the others to clang, as `cc.left_to_clang` does
            _send(conn, {"include_default": reads,
                         "ir2vec_vocab": None if ir2vec is None else str(ir2vec),
                         "languages": ",".join(getattr(policy, "languages", ()))})
            req = lines.next(10.0)
        if req is None:
            return
        base, module, pid = Path(str(req["base"])), str(req["module"]), int(req["pid"])
        timeout = float(req["timeout"])
        _send(conn, {"accepted": True})

        def watch(pid: int = pid) -> None:
            msg: dict[str, Any] | None = None
            with contextlib.suppress(OSError, ValueError, TimeoutError):
                msg = lines.next(timeout + 60)
            if not (msg and msg.get("exited")) and not settled.is_set():
                _kill_group(pid)  # the client died: its compiler would spin forever
                _remove_channel(base)
            exited.set()

        threading.Thread(target=watch, daemon=True).start()
        try:
            stats = serve(base, policy, module, timeout, alive=lambda: not exited.is_set())
        except Exception as exc:  # the client kills the compiler and reports this
            settled.set()
            _send(conn, {"error": f"{type(exc).__name__}: {exc}"})
            return
        exited.wait(timeout + 60)
        settled.set()
        _send(conn, {"sessions": stats.sessions, "decisions": stats.decisions,
                     "inlined": stats.inlined})
    except (OSError, KeyError, TypeError, ValueError, TimeoutError):
        if pid is not None and not settled.is_set():
            _kill_group(pid)
    finally:
        conn.close()


def stop_servers(runtime_dir: Path) -> int:
    """Kill every policy server started with `runtime_dir` as its $MLGO_RUNTIME_DIR (each
    names its socket there on its command line), e.g. when a build that had a runtime
    directory of its own is done; returns how many were killed."""
    needle = os.fsencode(str(runtime_dir))
    killed = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if needle in f.read():
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed += 1
        except OSError:  # gone meanwhile, or not ours to read
            pass
    return killed


def _remove_channel(base: Path) -> None:
    """The FIFOs of a client that died, and their directory if nothing else is in it."""
    for suffix in (".in", ".out"):
        with contextlib.suppress(OSError):
            if Path(f"{base}{suffix}").is_fifo():
                os.unlink(f"{base}{suffix}")
    with contextlib.suppress(OSError):
        base.parent.rmdir()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _bind(path: Path) -> socket.socket | None:
    """Listen on `path`, unless a live server already does (None). A lock serializes the
    servers that start at once; a socket file nobody answers on is stale and replaced."""
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        probe = _connect(path)
        if probe is not None:
            probe.close()
            return None
        path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        sock.listen(64)
        return sock


def run_server(spec: str, path: Path, idle: float) -> int:
    """Load `spec`, then serve compiles on `path` until `idle` seconds pass without any."""
    from pymlgo.deploy.answer import serve_sessions
    from pymlgo.policy.store import load_policy

    policy = load_policy(spec)  # fails before binding: clients then serve themselves
    listener = _bind(path)
    if listener is None:
        return 0
    inode = os.stat(path).st_ino
    active = [0]
    lock = threading.Lock()
    last = time.monotonic()

    def handle(conn: socket.socket) -> None:
        try:
            _handle(conn, policy, serve_sessions)
        finally:
            with lock:
                active[0] -= 1

    try:
        listener.settimeout(1.0)
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                with lock:
                    if active[0]:
                        last = time.monotonic()
                    elif time.monotonic() - last > idle:
                        return 0
                continue
            conn.settimeout(None)
            with lock:
                active[0] += 1
            threading.Thread(target=handle, args=(conn,), daemon=True).start()
    finally:
        # Only our own socket file: a newer server may have replaced a stale one.
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == inode:
                path.unlink()
        listener.close()


def main(argv: list[str] | None = None) -> int:
    import argparse  # only the server's own start pays for it

    ap = argparse.ArgumentParser(prog="python -m pymlgo.deploy.cc_server",
                                 description="mlgo cc's policy server (started by mlgo cc)")
    ap.add_argument("--policy", required=True)
    ap.add_argument("--socket", required=True, type=Path)
    ap.add_argument("--idle", type=float, default=DEFAULT_IDLE_S)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    return run_server(args.policy, args.socket, args.idle)


if __name__ == "__main__":
    sys.exit(main())
