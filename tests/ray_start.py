"""`ray start`, patient with a loaded machine: `python tests/ray_start.py ARGS` is
`ray start ARGS`, except for two fixed waits of Ray's that a 2-core machine shared with
other work misses (a node's Python helpers can take minutes to import there):

- the new node gets RAY_START_WAIT_S (default 600) instead of 30 s to register with the
  GCS;
- the raylet is told the dashboard agent's port (`--dashboard-agent-listen-port`, which
  `ray start` passes to the agent only) instead of waiting 20 s for the agent to write
  it to a file, and crashing when it has not.

Used for every Ray node the tests start (`netns_ray`'s hosts, `test_workers_ray`'s head),
in the environment `PATIENT_ENV`: Ray's other fixed waits, lengthened.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

# `python tests/ray_start.py start ARGS`: `ray start ARGS`, patient
RAY_START = [sys.executable, str(Path(__file__).resolve()), "start"]

# A node's processes and their drivers on a loaded 2-core machine, where a node's Python
# helpers take minutes to start, not Ray's 20-60 s. Each sets how long Ray waits, not what
# it does once up.
PATIENT_ENV = {
    "RAY_DASHBOARD_STARTUP_TIMEOUT_S": "600",
    "RAY_agent_register_timeout_ms": "600000",
    "RAY_raylet_start_wait_time_s": "600",
    "RAY_START_WAIT_S": "600",  # this file's own
    "RAY_worker_register_timeout_seconds": "600",  # a compile actor's Python process
}  # with pymlgo's BUSY_HEAD_ENV on a head (this file runs without pymlgo: no import here)


def _patient_get_node() -> None:
    from ray._private import services

    plain = services.get_node
    wait_s = float(os.environ.get("RAY_START_WAIT_S", "600"))

    def get_node(*args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return plain(*args, **kwargs)
            except RuntimeError:  # not registered yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    services.get_node = get_node


def _raylet_told_agent_port() -> None:
    from ray._private import services

    if "--dashboard-agent-listen-port" not in sys.argv:
        return
    port = sys.argv[sys.argv.index("--dashboard-agent-listen-port") + 1]
    plain = services.start_ray_process

    def start_ray_process(command: list[str], *args: Any, **kwargs: Any) -> Any:
        if Path(command[0]).name == "raylet":
            command = [*command, f"--dashboard_agent_listen_port={port}"]
        return plain(command, *args, **kwargs)

    services.start_ray_process = start_ray_process


if __name__ == "__main__":
    sys.path.pop(0)  # this file's directory (tests/) is not an import root of Ray's
    _patient_get_node()
    _raylet_told_agent_port()
    from ray.scripts.scripts import main

    sys.argv[0] = "ray"
    sys.exit(main())
