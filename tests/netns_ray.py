"""A Ray cluster of separate hosts (`netns_hosts.Lab`): a head, worker hosts, a driver host.

- head (SUBNET.1): the GCS and the Ray Client server, 0 CPUs: it schedules no compiles;
- workers: `ray start --address HEAD` with 1 CPU each (one compile actor per host);
- driver: where `mlgo ... --cluster ray://HEAD:10001` runs, a machine of its own.

How code and corpus reach the workers, explicitly: pymlgo's code is shipped by the driver
as the job's `runtime_env` (py_modules; the cluster's processes get PYTHONPATH=""), and
every module's bytes travel through Ray's object store (the driver reads its files and
`ray.put`s them). The cluster's hosts cannot read the driver's files: the driver's dir
(corpus, run directory, caches) is covered by an empty tmpfs on each of them (`hide`).
What the hosts share is the Python installation (ray, ziglang's clang, numpy), as nodes
built from one image do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pymlgo.workers.ray_backend import BUSY_HEAD_ENV
from tests.netns_hosts import Host, Lab, LabError, kill_all_in, wait_for
from tests.ray_start import PATIENT_ENV, RAY_START

RAY = str(Path(sys.executable).parent / "ray")  # not a pyenv shim (seconds per call)
GCS_PORT = 6379
CLIENT_PORT = 10001

# Every process of the lab's cluster and its drivers: no usage reports, no token auth
# between the lab's hosts, and a lost host declared dead after ~5 s of silence rather
# than Ray's ~30 s (a cluster admin's setting; it changes how soon jobs move, not results).
CLUSTER_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    "PYTHONUNBUFFERED": "1",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "5",
    **PATIENT_ENV,  # a loaded 2-core machine: Ray's fixed waits, lengthened
    **BUSY_HEAD_ENV,  # and Ray Client's per-driver server, as the README says
}
# Fixed ports for each host's agents (every host has its own network): the raylet is
# told them instead of waiting, at most 15 s, for the agents to write them to files.
AGENT_PORTS = ("--dashboard-agent-listen-port", "52365", "--dashboard-agent-grpc-port",
               "52366", "--metrics-export-port", "52367", "--runtime-env-agent-port", "52368")
_STARTED = "Ray runtime started"


class RayHosts:
    """A Ray cluster on a lab's hosts. The lab removes everything on close."""

    def __init__(self, lab: Lab, *, object_store_mb: int = 100,
                 start_timeout: float = 900.0) -> None:
        self.lab = lab
        self.object_store_mb = object_store_mb
        self.start_timeout = start_timeout
        self.driver = lab.add_host("driver")
        self.driver_dir = self.driver.dir / "files"  # corpus, run dirs: the driver's alone
        self.driver_dir.mkdir(exist_ok=True)
        self.head: Host | None = None
        self.workers: dict[str, Host] = {}
        self._starting: dict[str, tuple[subprocess.Popen[bytes], int, list[str]]] = {}

    # -- cluster --------------------------------------------------------------------------

    def _cluster_env(self) -> dict[str, str]:
        return {**os.environ, **CLUSTER_ENV, "PYTHONPATH": ""}

    def start_head(self, name: str = "head") -> str:
        """Start a head (a new one after `lose_head`); its ray:// address."""
        head = self.head = self.lab.add_host(name)
        self._start_node(head, [
            "--head", "--node-ip-address", head.address,
            "--port", str(GCS_PORT), "--ray-client-server-port", str(CLIENT_PORT),
            "--num-cpus", "0", "--include-dashboard", "false", "--no-monitor",
            "--temp-dir", str(head.dir / "ray"),
        ])
        self._wait_node(head)
        return self.address

    @property
    def address(self) -> str:
        if self.head is None:
            raise LabError("no head started")
        return f"ray://{self.head.address}:{CLIENT_PORT}"

    def _start_node(self, host: Host, args: Sequence[str]) -> None:
        """`ray start ARGS` on `host`; `_wait_node` waits for it."""
        argv = [*RAY_START, "--block", "--disable-usage-stats",
                "--include-log-monitor", "false", *AGENT_PORTS,
                "--object-store-memory", str(self.object_store_mb << 20), *args]
        log = host.dir / "ray.log"
        offset = log.stat().st_size if log.is_file() else 0
        proc = self.lab.spawn(host, argv, env=self._cluster_env(),
                              hide=[self.driver_dir], log=log)
        self._starting[host.name] = (proc, offset, list(args))

    def _wait_node(self, host: Host, attempts: int = 3) -> None:
        """Until `ray start` on `host` says its node is up. A start that fails (Ray gives
        a node's helpers fixed times to come up, which a loaded 2-core machine can miss)
        is retried, everything it left on the host killed first."""
        log = host.dir / "ray.log"
        for attempt in range(1, attempts + 1):
            proc, offset, args = self._starting[host.name]

            def started(proc: subprocess.Popen[bytes] = proc, offset: int = offset) -> str:
                with open(log, "rb") as f:
                    f.seek(offset)
                    text = f.read().decode(errors="replace")
                if _STARTED in text:
                    return "up"
                return "exited" if proc.poll() is not None else ""

            if wait_for(started, self.start_timeout, f"Ray on {host.name}") == "up":
                del self._starting[host.name]
                return
            kill_all_in(host.netns)
            if attempt == attempts:
                raise LabError(f"ray start on {host.name} failed {attempts} times:\n"
                               f"{self.logs()}")
            self._start_node(host, args)

    def add_worker(self, name: str, cpus: int = 1) -> Host:
        """A worker host with `cpus` CPUs, once its node has joined."""
        return self.add_workers([name], cpus)[0]

    def add_workers(self, names: Sequence[str], cpus: int = 1) -> list[Host]:
        """Worker hosts with `cpus` CPUs each, one after the other (nodes that start
        together in one session directory have been seen to hang), each once joined."""
        if self.head is None:
            raise LabError("start the head first")
        hosts = []
        for name in names:
            host = self.workers[name] = self.lab.add_host(name)
            self._start_node(host, ["--address", f"{self.head.address}:{GCS_PORT}",
                                    "--node-ip-address", host.address,
                                    "--num-cpus", str(cpus)])
            self._wait_node(host)
            hosts.append(host)
        return hosts

    def lose(self, host: Host) -> None:
        """The host dies: cable cut, processes killed, namespace deleted."""
        self.lab.kill_host(host)
        self.workers = {k: v for k, v in self.workers.items() if v is not host}

    def lose_head(self) -> None:
        assert self.head is not None
        self.lab.kill_host(self.head)

    # -- driver ---------------------------------------------------------------------------

    def driver_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The driver runs this checkout's pymlgo (it ships it to the cluster)."""
        root = str(Path(__file__).resolve().parent.parent)
        return {**os.environ, **CLUSTER_ENV, "PYTHONPATH": root,
                "MLGO_CACHE_DIR": str(self.driver_dir / "cache"), **(extra or {})}

    def mlgo_argv(self, args: Sequence[str]) -> list[str]:
        return [sys.executable, "-m", "pymlgo.cli.main", *args]

    def run_mlgo(self, args: Sequence[str], *, timeout: float,
                 env: Mapping[str, str] | None = None):  # type: ignore[no-untyped-def]
        """`mlgo ARGS` on the driver host, to completion."""
        return self.lab.run(self.driver, self.mlgo_argv(args), timeout=timeout,
                            env=self.driver_env(env), cwd=self.driver_dir)

    def spawn_mlgo(self, args: Sequence[str], log: Path, *,
                   env: Mapping[str, str] | None = None):  # type: ignore[no-untyped-def]
        return self.lab.spawn(self.driver, self.mlgo_argv(args), env=self.driver_env(env),
                              log=log, cwd=self.driver_dir)

    def logs(self, lines: int = 30) -> str:
        """The tail of every host's own log and of Ray's client server logs: why it failed."""
        out = []
        for host in self.lab.hosts.values():
            for log in sorted(host.dir.glob("*.log")) + sorted(
                    host.dir.glob("ray/session_*/logs/ray_client_server*.err")):
                text = log.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {host.name}: {log.name}\n" + "\n".join(text))
        return "\n".join(out)
