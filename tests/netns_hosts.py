"""Separate hosts on one machine: Linux network namespaces joined by a bridge.

For tests and benchmarks of a cluster (`benchmarks/cluster.py`, tests/test_cluster_hosts.py).
Each `Host` is a network namespace with its own address on a private /24; the bridge that
joins them lives in a namespace of its own (the lab's "switch"), so nothing is added to
the machine's own network: every packet stays inside the lab's namespaces.

A `Lab` ALWAYS removes what it made: on `close()` (also from `__exit__` on any exception),
at interpreter exit, and on SIGTERM (turned into SystemExit so `finally` blocks run). A lab
whose process died without any of that (SIGKILL) is removed by the next `Lab` made on the
machine: namespaces are named after the pid that made them, and those of a dead pid are
stale.

What a host shares with the others: the filesystem, the pid space and the Python
installation (the same `ray`, `ziglang` and `numpy` everywhere, like nodes built from one
image). What it does not: the network, and whatever paths it is started with in `hide`
(each host process starts in its own mount namespace, where `hide` paths are covered by an
empty tmpfs) — so a worker host can be shown not to read the corpus or the run directory
of the driver from disk.

Needs root, iproute2 (`ip netns`), a kernel with veth and bridge support.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SUBNET = "10.77.0"  # private to the lab: its namespaces see no other network
_NAME = re.compile(r"mlgo-(\d+)-\d+-")
_IP_TIMEOUT_S = 30.0
_serial = itertools.count()


class LabError(RuntimeError):
    """A namespace or link could not be made, or a host did not come up."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True,
                          timeout=_IP_TIMEOUT_S, check=False)
    if check and proc.returncode != 0:
        raise LabError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here (a reason to skip), or None if they can."""
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    probe = f"mlgo-{os.getpid()}-{next(_serial)}-probe"
    try:
        made = _ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"cannot make a network namespace: {made.stderr.strip()}"
        veth = _ip("-n", probe, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1",
                   check=False)
        if veth.returncode != 0:
            return f"cannot make a veth pair: {veth.stderr.strip()}"
        bridge = _ip("-n", probe, "link", "add", "probebr", "type", "bridge", check=False)
        if bridge.returncode != 0:
            return f"cannot make a bridge: {bridge.stderr.strip()}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run ip: {exc}"
    finally:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            _ip("netns", "del", probe, check=False)
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def netns_pids(netns: str) -> list[int]:
    """Every process whose network namespace is `netns` (whoever started it)."""
    proc = _ip("netns", "pids", netns, check=False)
    return [int(p) for p in proc.stdout.split()] if proc.returncode == 0 else []


def kill_all_in(netns: str, timeout: float = 10.0) -> None:
    """SIGKILL every process in `netns` until none is left (processes may fork meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = netns_pids(netns)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            return  # zombies (exited, not yet reaped) still count: they hold nothing
        time.sleep(0.05)


def _delete_netns(netns: str) -> None:
    kill_all_in(netns)
    _ip("netns", "del", netns, check=False)


def remove_stale_labs() -> list[str]:
    """Remove the namespaces of labs whose process is gone; their names."""
    listed = _ip("netns", "list", check=False).stdout.split("\n")
    stale = []
    for line in listed:
        name = line.split(" ")[0]
        m = _NAME.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _delete_netns(name)
            stale.append(name)
    return stale


@dataclass(eq=False)
class Host:
    """One machine of the lab: a network namespace with one address."""

    name: str
    netns: str
    address: str
    dir: Path  # its own scratch space (TMPDIR of what it runs)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    alive: bool = True

    def pids(self) -> list[int]:
        return netns_pids(self.netns) if self.alive else []


# `ip netns exec` gives each command a mount namespace of its own: mounts made here are
# seen by the host's processes only
_HIDE_AND_EXEC = ('for d in $MLGO_LAB_HIDE; do mount -t tmpfs -o size=1m,mode=0700 lab "$d"; '
                  'done; exec "$@"')


class Lab:
    """Hosts on a bridge; a context manager that removes them all on exit."""

    def __init__(self, root: Path | None = None, *, nice: int = 10) -> None:
        """Host dirs go under `root` (default: a new short dir in /tmp, removed by `close`
        unless the lab is left by an exception: its logs are then kept)."""
        remove_stale_labs()
        self.prefix = f"mlgo-{os.getpid()}-{next(_serial)}-"
        # short: Ray puts unix sockets under its hosts' dirs (108 bytes at most)
        self._own_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="mlgolab-", dir="/tmp"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.nice = nice
        self.hosts: dict[str, Host] = {}
        self._next_address = 1
        self._closed = False
        self._lock = threading.Lock()
        self.switch = self.prefix + "switch"
        atexit.register(self.close)
        self._restore_sigterm = _sigterm_exits()
        try:
            _ip("netns", "add", self.switch)
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(keep_files=exc_type is not None)

    # -- hosts ----------------------------------------------------------------------------

    def add_host(self, name: str) -> Host:
        """A new machine on the bridge, address SUBNET.N (N counts up from 1)."""
        if name in self.hosts and self.hosts[name].alive:
            raise LabError(f"host {name!r} exists")
        n = self._next_address
        self._next_address += 1
        address = f"{SUBNET}.{n}"
        netns = f"{self.prefix}{name}"
        port = f"p{n}"  # the switch's end of the cable
        host_dir = self.root / name
        host_dir.mkdir(parents=True, exist_ok=True)
        host = Host(name, netns, address, host_dir)
        self.hosts[name] = host
        _ip("netns", "add", netns)
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
            "netns", netns)
        _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
        _ip("-n", netns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        return host

    def argv(self, host: Host, argv: Sequence[str]) -> list[str]:
        """`argv` as run on `host` (its namespace, lowered priority, its own mounts)."""
        return ["ip", "netns", "exec", host.netns, "nice", "-n", str(self.nice),
                "sh", "-c", _HIDE_AND_EXEC, "lab-host", *argv]

    def _env(self, host: Host, env: Mapping[str, str] | None,
             hide: Sequence[Path]) -> dict[str, str]:
        out = dict(os.environ if env is None else env)
        out["TMPDIR"] = str(host.dir)
        out["MLGO_LAB_HIDE"] = " ".join(str(p) for p in hide)
        if any(" " in str(p) for p in hide):
            raise LabError(f"cannot hide paths with spaces: {list(hide)}")
        return out

    def spawn(self, host: Host, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              hide: Sequence[Path] = (), log: Path | None = None,
              cwd: Path | None = None) -> subprocess.Popen[bytes]:
        """Start `argv` on `host` (stdout and stderr to `log`, default HOST_DIR/NAME.log)."""
        if not host.alive:
            raise LabError(f"host {host.name} is down")
        out = open(log or host.dir / f"{Path(argv[0]).name}.log", "ab")  # noqa: SIM115
        try:
            proc = subprocess.Popen(self.argv(host, argv), env=self._env(host, env, hide),
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=cwd or host.dir)
        finally:
            out.close()
        host.procs.append(proc)
        return proc

    def run(self, host: Host, argv: Sequence[str], *, timeout: float,
            env: Mapping[str, str] | None = None, hide: Sequence[Path] = (),
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run `argv` on `host` to completion (killed, with its children, at `timeout`)."""
        proc = subprocess.Popen(self.argv(host, argv), env=self._env(host, env, hide),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL, cwd=cwd or host.dir,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise LabError(f"{argv} on {host.name} did not finish in {timeout:.0f}s:\n"
                           f"{err[-3000:]}") from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def cut(self, host: Host) -> None:
        """Pull the host's cable: its peers get no goodbye, as when a machine dies."""
        n = host.address.rsplit(".", 1)[1]
        _ip("-n", self.switch, "link", "del", f"p{n}", check=False)

    def kill_host(self, host: Host) -> None:
        """The machine is lost: cable cut, every process on it killed, namespace gone."""
        if not host.alive:
            return
        self.cut(host)
        _delete_netns(host.netns)
        host.alive = False
        for proc in host.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def close(self, *, keep_files: bool = False) -> None:
        """Remove every host and the switch; and the lab's own root dir, unless
        `keep_files` (its hosts' logs)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for host in self.hosts.values():
            with contextlib.suppress(Exception):
                self.kill_host(host)
        with contextlib.suppress(Exception):
            _delete_netns(self.switch)
        atexit.unregister(self.close)
        self._restore_sigterm()
        if self._own_root and not keep_files:
            shutil.rmtree(self.root, ignore_errors=True)


def _sigterm_exits() -> Callable[[], None]:
    """Make SIGTERM raise SystemExit in the main thread (so cleanup runs), if nobody has
    claimed it; returns a callable that puts the old handler back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    old = signal.getsignal(signal.SIGTERM)
    if old is not signal.SIG_DFL:
        return lambda: None

    def on_term(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)

    def restore() -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, old)

    return restore


def wait_for(cond, timeout: float, what: str, every: float = 0.5):  # type: ignore[no-untyped-def]
    """Poll `cond()` until it returns something truthy (returned), or LabError."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise LabError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)
